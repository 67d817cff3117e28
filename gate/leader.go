package gate

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"tempest/lifecycle"
	"tempest/transport"
	"tempest/wire"
)

// leaderTerm is one term of leadership. Fence tokens are term<<32 | seq, so
// every lease a later leader grants outranks every lease of an earlier one.
type leaderTerm struct {
	term   uint64
	seq    atomic.Uint64
	ctx    context.Context
	cancel context.CancelFunc
	synced chan struct{} // closed once the takeover is done
	wg     sync.WaitGroup
}

func (lt *leaderTerm) nextToken() uint64 { return lt.term<<32 | lt.seq.Add(1)&0xffffffff }

func (lt *leaderTerm) isSynced() bool {
	select {
	case <-lt.synced:
		return true
	default:
		return false
	}
}

// awaitLeader returns the current term once its takeover is done.
func (g *Gate) awaitLeader(ctx context.Context) (*leaderTerm, error) {
	lt := g.lead.Load()
	if lt == nil {
		return nil, g.notLeaderAPI()
	}
	select {
	case <-lt.synced:
		return lt, nil
	case <-lt.ctx.Done():
		return nil, g.notLeaderAPI()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (g *Gate) onBecomeLeader(term uint64) {
	ctx, cancel := context.WithCancel(g.life.Context())
	lt := &leaderTerm{term: term, ctx: ctx, cancel: cancel, synced: make(chan struct{})}
	g.lead.Store(lt)
	g.log.Info("leading the gates", "term", term)
	lt.wg.Add(1)
	if !g.spawn(func(context.Context) {
		defer lt.wg.Done()
		g.syncFromPeers(lt.ctx, g.cfg.SyncTimeout)
		g.takeOver(lt)
		close(lt.synced)
		g.log.Info("serving as gate leader", "term", term)
		g.tickLoop(lt)
	}) {
		lt.wg.Done()
	}
}

func (g *Gate) onLoseLeadership(term uint64) {
	lt := g.lead.Load()
	if lt == nil || lt.term != term {
		return
	}
	g.lead.Store(nil)
	lt.cancel()
	lt.wg.Wait()
	g.log.Info("no longer leading the gates", "term", term)
}

// initialSync runs once at start: the gate asks the other gates for their
// records and becomes eligible to lead only once one of them answered (or it
// is alone). A gate that joins late therefore never leads without the
// jobs and leases the others hold.
func (g *Gate) initialSync(ctx context.Context) {
	backoff := 200 * time.Millisecond
	for {
		if len(g.peerIDs) == 0 || g.syncFromPeers(ctx, g.cfg.SyncTimeout) >= g.quorumSize-1 {
			break
		}
		g.log.Info("no other gate answered the state sync yet; not eligible to lead", "retry_in", backoff)
		if !lifecycle.Sleep(ctx, backoff) {
			return
		}
		backoff = min(backoff*2, 5*time.Second)
	}
	g.ready.Store(true)
	lhm := 0
	if g.members != nil {
		lhm = g.members.LocalHealth()
	}
	g.elector.SetLHM(lhm)
	g.mu.Lock()
	n := len(g.jobs)
	g.mu.Unlock()
	g.log.Info("state synced; eligible to lead", "jobs", n)
}

// syncFromPeers merges other gates' records into this one's until enough of
// them answered that, with this gate, they form a majority (or timeout
// passes), and returns how many answered. Any majority shares a gate with
// the majority every new job was replicated to before its client heard of
// it, so no acknowledged job is missed; a crashed gate is not waited for.
func (g *Gate) syncFromPeers(ctx context.Context, timeout time.Duration) int {
	if len(g.peerIDs) == 0 {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	var wg sync.WaitGroup
	// Returning at a majority cancels the fetches still out, and waits.
	defer wg.Wait()
	defer cancel()
	type answer struct {
		id   string
		recs []wire.GateJobRecord
		err  error
	}
	answers := make(chan answer, len(g.peerIDs))
	for _, id := range g.peerIDs {
		wg.Go(func() {
			recs, err := g.fetchRecords(ctx, id)
			answers <- answer{id: id, recs: recs, err: err}
		})
	}
	need := g.quorumSize - 1
	answered := 0
	var stored []*wire.GateJobRecord
	for range g.peerIDs {
		a := <-answers
		if a.err != nil {
			g.log.Debug("state sync: gate did not answer", "gate", a.id, "err", a.err)
			continue
		}
		answered++
		for i := range a.recs {
			if r := g.adopt(&a.recs[i]); r != nil {
				stored = append(stored, r)
			}
		}
		if answered >= need {
			break
		}
	}
	if err := g.store.put(stored...); err != nil {
		g.log.Error("persist synced job records", "err", err)
	}
	if len(stored) > 0 {
		g.log.Info("state sync adopted newer job records", "records", len(stored), "gates_answered", answered)
	}
	return answered
}

// fetchRecords pages through one gate's records, oldest first.
func (g *Gate) fetchRecords(ctx context.Context, id string) ([]wire.GateJobRecord, error) {
	var out []wire.GateJobRecord
	var since uint64
	for {
		reply, err := g.tr.Call(ctx, g.peers[id], &wire.StateSyncRequest{RequesterID: g.cfg.ID, RequesterRole: wire.RoleGate, SinceVersion: since})
		if err != nil {
			return nil, err
		}
		resp, ok := reply.(*wire.StateSyncResponse)
		if !ok {
			return nil, fmt.Errorf("gate %s answered a state sync with %s", id, reply.Type())
		}
		out = append(out, resp.GateJobs...)
		if len(resp.GateJobs) == 0 {
			return out, nil
		}
		last := resp.GateJobs[len(resp.GateJobs)-1].Version
		if last <= since || last >= resp.CurrentVersion {
			return out, nil
		}
		since = last
	}
}

// handleStateSync answers another gate's state sync with one page of
// records: those newer than the request's SinceVersion, oldest first, up to
// SyncPageBytes. CurrentVersion is the newest this gate has, so the asker
// knows when it has them all.
func (g *Gate) handleStateSync(_ context.Context, from transport.Peer, req *wire.StateSyncRequest) (wire.Message, error) {
	if !g.isPeer(from.NodeID) {
		return nil, wire.Errorf(wire.CodeRejected, "gate state is only shared with configured gates")
	}
	g.mu.Lock()
	recs := make([]wire.GateJobRecord, 0, len(g.jobs))
	for _, j := range g.jobs {
		if j.rec.Version > req.SinceVersion {
			recs = append(recs, j.rec)
		}
	}
	resp := &wire.StateSyncResponse{ResponderID: g.cfg.ID, CurrentVersion: g.version}
	g.mu.Unlock()
	slices.SortFunc(recs, func(a, b wire.GateJobRecord) int { return cmp.Compare(a.Version, b.Version) })
	size := 0
	for _, r := range recs {
		b, err := wire.Marshal(&r)
		if err != nil {
			return nil, fmt.Errorf("encode job %s: %w", r.Submission.JobID, err)
		}
		// Pages end between versions, never inside one: the asker resumes
		// after the last version it got.
		if n := len(resp.GateJobs); n > 0 && size+len(b) > g.cfg.SyncPageBytes && resp.GateJobs[n-1].Version != r.Version {
			break
		}
		size += len(b)
		resp.GateJobs = append(resp.GateJobs, r)
	}
	return resp, nil
}

// takeOver moves every unfinished job's leases to this leader: new fence
// tokens from this term, fresh expiry (the datacenters have had no gate to
// report to), and a LeaseTransfer to each datacenter, which from then on
// refuses the old leader's commands.
func (g *Gate) takeOver(lt *leaderTerm) {
	now := g.now()
	var stored []*wire.GateJobRecord
	var sends [][2]string
	g.mu.Lock()
	for id, j := range g.jobs {
		if j.rec.Status.Terminal() {
			continue
		}
		moved := false
		j.mutateLocked(func(rec *wire.GateJobRecord) {
			for i := range rec.Leases {
				l := &rec.Leases[i]
				pi := j.progressIndex(l.Datacenter)
				if pi >= 0 && rec.Datacenters[pi].Status.Terminal() {
					continue
				}
				l.LeaseHolder = g.cfg.ID
				l.FenceToken = lt.nextToken()
				l.ExpiresAt = now.Add(g.cfg.LeaseTTL).UnixNano()
				l.Version++
				j.send[l.Datacenter] = true
				sends = append(sends, [2]string{id, l.Datacenter})
				moved = true
			}
		})
		if moved {
			stored = append(stored, g.commitLocked(j))
		}
	}
	g.mu.Unlock()
	if len(stored) == 0 {
		return
	}
	g.log.Info("taking over leases", "jobs", len(stored), "leases", len(sends), "term", lt.term)
	g.save(stored...)
	var wg sync.WaitGroup
	for _, s := range sends {
		wg.Go(func() { g.sendToDC(lt, s[0], s[1]) })
	}
	wg.Wait()
}

// tickLoop is the leader's clock: expired leases fail their datacenter,
// datacenters that have not taken a job (or a lease) yet are tried again,
// and finished jobs past retention are forgotten.
func (g *Gate) tickLoop(lt *leaderTerm) {
	t := time.NewTicker(g.cfg.TickInterval)
	defer t.Stop()
	var sends sync.WaitGroup
	defer sends.Wait()
	for {
		select {
		case <-lt.ctx.Done():
			return
		case <-t.C:
		}
		now := g.now()
		type dcRef struct{ id, dc, reason string }
		var expired, retry []dcRef
		var old []string
		g.mu.Lock()
		for id, j := range g.jobs {
			if j.rec.Status.Terminal() {
				if j.rec.FinishedAt != 0 && now.Sub(time.Unix(0, j.rec.FinishedAt)) > g.cfg.Retention {
					old = append(old, id)
				}
				continue
			}
			for _, l := range j.rec.Leases {
				pi := j.progressIndex(l.Datacenter)
				if pi < 0 || j.rec.Datacenters[pi].Status.Terminal() {
					continue
				}
				if now.UnixNano() > l.ExpiresAt {
					expired = append(expired, dcRef{id, l.Datacenter, ""})
					continue
				}
				if j.send[l.Datacenter] && !j.inFlight[l.Datacenter] {
					retry = append(retry, dcRef{id, l.Datacenter, ""})
				}
			}
		}
		for _, id := range old {
			delete(g.jobs, id)
		}
		g.mu.Unlock()
		if len(old) > 0 {
			if err := g.store.delete(old...); err != nil {
				g.log.Warn("retention", "err", err)
			}
		}
		for _, e := range expired {
			g.failDC(e.id, e.dc, "lease expired: no progress from "+e.dc+" for "+g.cfg.LeaseTTL.String())
			sends.Go(func() {
				ctx, cancel := context.WithTimeout(lt.ctx, g.cfg.DispatchTimeout)
				defer cancel()
				// Best effort: the datacenter may be gone; if it comes back
				// its next report is answered with a cancel.
				g.callDC(ctx, e.dc, &wire.CancelJob{JobID: e.id, Reason: "lease expired at the gate", FenceToken: g.tokenOf(e.id, e.dc)})
			})
		}
		for _, r := range retry {
			sends.Go(func() { g.sendToDC(lt, r.id, r.dc) })
		}
	}
}

func (g *Gate) tokenOf(id, dc string) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if j, ok := g.jobs[id]; ok {
		if i := j.leaseIndex(dc); i >= 0 {
			return j.rec.Leases[i].FenceToken
		}
	}
	return 0
}

// leases lists a job's leases (tests read them).
func (g *Gate) leases(id string) []wire.DatacenterLease {
	g.mu.Lock()
	defer g.mu.Unlock()
	if j, ok := g.jobs[id]; ok {
		return slices.Clone(j.rec.Leases)
	}
	return nil
}
