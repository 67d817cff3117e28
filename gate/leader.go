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
		// No lease is issued, no job taken and no report answered before a
		// majority of gates has been read: until then this gate may lack a
		// job a majority acknowledged. A sync that fails is tried again for
		// as long as this term lasts, never skipped.
		if _, err := g.syncMajority(lt.ctx, "takeover"); err != nil {
			g.log.Info("lost the lead before a majority of gates was read; never served", "term", term)
			return
		}
		g.seedDatacenters(lt.ctx)
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

// initialSync runs once at start: the gate reads the other gates' records
// and becomes eligible to lead only once it has read a majority of gates
// (or is alone). A gate that joins late therefore never leads without the
// jobs and leases the others hold.
func (g *Gate) initialSync(ctx context.Context) {
	read, err := g.syncMajority(ctx, "start")
	if err != nil {
		return
	}
	g.ready.Store(true)
	if leader, _ := g.elector.Leader(); !read[leader] {
		g.catchUpFrom(leader)
	}
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

// catchUpFrom reads every record of the leader a gate follows, when its
// majority read did not include that leader or the leader changed since.
// A majority read holds every acknowledged job, but later changes travel one way from
// the leader, so the majority a gate read may hold older versions of them
// (a gate restarted empty while the job finished reads the one peer that
// missed the last change). The leader has the newest version of every job
// it leads; reading it once per leader change brings a follower level
// without waiting for the next change of each record.
func (g *Gate) catchUpFrom(leader string) {
	if leader == "" || leader == g.cfg.ID || !g.isPeer(leader) {
		return
	}
	g.spawn(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, g.cfg.SyncTimeout)
		defer cancel()
		_, n, err := g.fetchRecords(ctx, leader, syncCursor{})
		if err != nil {
			g.log.Debug("catch-up from the leader not finished", "leader", leader, "adopted", n, "err", err)
			return
		}
		if n > 0 {
			g.log.Info("caught up from the leader", "leader", leader, "adopted", n)
		}
	})
}

// syncCursor is how far one gate's records have been read: records are
// paged in (version, job id) order.
type syncCursor struct {
	version uint64
	jobID   string
}

func (c syncCursor) before(o syncCursor) bool {
	return c.version < o.version || c.version == o.version && c.jobID < o.jobID
}

// syncRetryMax caps the wait between two rounds of a state sync that has
// not yet read a majority.
const syncRetryMax = 5 * time.Second

// syncMajority merges other gates' records into this one's until it has
// read a majority of gates in full — this gate's own records count as one
// gate's, never as more. Any majority shares a gate with the majority every
// new job was stored on before its client heard of it, so no acknowledged
// job is missed. Rounds are bounded by SyncTimeout and repeated with backoff
// until enough gates were read or ctx ends (the only error); a gate whose
// read failed part way is asked again from the page after the last one it
// answered, and every page received is kept. It returns the gates it read
// in full.
func (g *Gate) syncMajority(ctx context.Context, why string) (map[string]bool, error) {
	need := g.quorumSize - 1
	if need <= 0 {
		return nil, nil
	}
	cursors := make(map[string]syncCursor, len(g.peerIDs))
	read := make(map[string]bool, len(g.peerIDs))
	backoff := 100 * time.Millisecond
	for round := 1; ; round++ {
		adopted := g.syncRound(ctx, cursors, read, need)
		if len(read) >= need {
			g.log.Info("state sync: read a majority of gates", "why", why, "gates_read", len(read), "rounds", round, "adopted", adopted)
			return read, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		g.log.Info("state sync: a majority of gates not read yet; not leading", "why", why,
			"gates_read", len(read), "need", need, "retry_in", backoff)
		if !lifecycle.Sleep(ctx, backoff) {
			return nil, ctx.Err()
		}
		backoff = min(backoff*2, syncRetryMax)
	}
}

// syncRound reads, at once and within SyncTimeout, every gate not read yet,
// each from its cursor; it marks the gates read in full and returns at a
// majority (cancelling the reads still out) or when every read ended. It
// returns how many records it adopted.
func (g *Gate) syncRound(ctx context.Context, cursors map[string]syncCursor, read map[string]bool, need int) int {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.SyncTimeout)
	var wg sync.WaitGroup
	// Returning at a majority cancels the fetches still out, and waits.
	defer wg.Wait()
	defer cancel()
	type answer struct {
		id      string
		cur     syncCursor
		adopted int
		err     error
	}
	var ask []string
	for _, id := range g.peerIDs {
		if !read[id] {
			ask = append(ask, id)
		}
	}
	answers := make(chan answer, len(ask))
	for _, id := range ask {
		cur := cursors[id]
		wg.Go(func() {
			cur, n, err := g.fetchRecords(ctx, id, cur)
			answers <- answer{id: id, cur: cur, adopted: n, err: err}
		})
	}
	adopted := 0
	for range ask {
		a := <-answers
		cursors[a.id] = a.cur
		adopted += a.adopted
		if a.err != nil {
			g.log.Debug("state sync: gate not read in full", "gate", a.id, "err", a.err)
			continue
		}
		read[a.id] = true
		if len(read) >= need {
			break
		}
	}
	return adopted
}

// fetchRecords pages through one gate's records from cur on, merging and
// persisting each page as it arrives, and returns where it got to and how
// many records it adopted. It ends without error only once the gate said
// it has nothing more.
func (g *Gate) fetchRecords(ctx context.Context, id string, cur syncCursor) (syncCursor, int, error) {
	adopted := 0
	for {
		reply, err := g.tr.Call(ctx, g.peers[id], &wire.StateSyncRequest{RequesterID: g.cfg.ID, RequesterRole: wire.RoleGate,
			SinceVersion: cur.version, SinceJobID: cur.jobID})
		if err != nil {
			return cur, adopted, fmt.Errorf("gate %s: state sync after version %d: %w", id, cur.version, err)
		}
		resp, ok := reply.(*wire.StateSyncResponse)
		if !ok {
			return cur, adopted, fmt.Errorf("gate %s answered a state sync with %s", id, reply.Type())
		}
		if len(resp.GateJobs) == 0 {
			return cur, adopted, nil
		}
		n, err := g.merge(resp.GateJobs)
		adopted += n
		if err != nil {
			return cur, adopted, fmt.Errorf("gate %s: %w", id, err)
		}
		last := resp.GateJobs[len(resp.GateJobs)-1]
		next := syncCursor{last.Version, last.Submission.JobID}
		if !cur.before(next) {
			return cur, adopted, fmt.Errorf("gate %s: state sync page did not advance past version %d", id, cur.version)
		}
		cur = next
		// More is the answer's own word; a gate that does not send it
		// ends pages between versions, so its newest version ends them.
		if !resp.More && last.Version >= resp.CurrentVersion {
			return cur, adopted, nil
		}
	}
}

// merge adopts records newer than this gate's copies and persists them.
func (g *Gate) merge(recs []wire.GateJobRecord) (int, error) {
	var stored []*wire.GateJobRecord
	for i := range recs {
		if r := g.adopt(&recs[i]); r != nil {
			stored = append(stored, r)
		}
	}
	if err := g.store.put(stored...); err != nil {
		return len(stored), fmt.Errorf("persist synced job records: %w", err)
	}
	return len(stored), nil
}

// handleStateSync answers another gate's state sync with one page of
// records after the request's (SinceVersion, SinceJobID), in (version, job
// id) order: at least one whole record and then as many as fit in
// SyncPageBytes, never more than one message holds. More says whether
// pages remain; CurrentVersion is the newest version this gate has. A
// record too large for a message goes lighter (fitRecord); one too large
// even then is an error the asker sees, naming the job, rather than an
// answer the transport cannot carry.
func (g *Gate) handleStateSync(_ context.Context, from transport.Peer, req *wire.StateSyncRequest) (wire.Message, error) {
	if !g.isPeer(from.NodeID) {
		return nil, wire.Errorf(wire.CodeRejected, "gate state is only shared with configured gates")
	}
	// Without SinceJobID the asker has every record of SinceVersion (it
	// pages by version alone).
	wanted := func(r *wire.GateJobRecord) bool {
		return r.Version > req.SinceVersion ||
			req.SinceJobID != "" && r.Version == req.SinceVersion && r.Submission.JobID > req.SinceJobID
	}
	g.mu.Lock()
	recs := make([]wire.GateJobRecord, 0, len(g.jobs))
	for _, j := range g.jobs {
		if wanted(&j.rec) {
			recs = append(recs, j.rec)
		}
	}
	resp := &wire.StateSyncResponse{ResponderID: g.cfg.ID, CurrentVersion: g.version}
	g.mu.Unlock()
	slices.SortFunc(recs, func(a, b wire.GateJobRecord) int {
		return cmp.Or(cmp.Compare(a.Version, b.Version), cmp.Compare(a.Submission.JobID, b.Submission.JobID))
	})
	limit := min(g.cfg.SyncPageBytes, maxRecordBytes)
	size := 0
	for i := range recs {
		r, b, shed, err := fitRecord(&recs[i])
		if err != nil {
			g.log.Warn("state sync: a job record cannot be sent", "job_id", recs[i].Submission.JobID, "err", err)
			return nil, err
		}
		if len(resp.GateJobs) > 0 && size+len(b) > limit {
			resp.More = true
			break
		}
		if shed != "" {
			g.log.Warn("state sync: job record too large for a message; sent without "+shed, "job_id", r.Submission.JobID)
		}
		size += len(b)
		resp.GateJobs = append(resp.GateJobs, *r)
	}
	return resp, nil
}

// takeOver moves every unfinished job's leases (or, with ids, those jobs'
// only) to this leader: new fence tokens from this term, fresh expiry (the
// datacenters have had no gate to report to), and a LeaseTransfer to each
// datacenter, which from then on refuses the old leader's commands.
func (g *Gate) takeOver(lt *leaderTerm, ids ...string) {
	now := g.now()
	var stored []*wire.GateJobRecord
	var sends [][2]string
	g.mu.Lock()
	jobs := g.jobs
	if len(ids) > 0 {
		jobs = make(map[string]*jobEntry, len(ids))
		for _, id := range ids {
			if j, ok := g.jobs[id]; ok {
				jobs[id] = j
			}
		}
	}
	for id, j := range jobs {
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
				if l.LeaseHolder == g.cfg.ID && l.FenceToken>>32 == lt.term {
					continue // already this term's
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
// and datacenters that have not taken a job (or a lease) yet are tried
// again. Finished jobs past retention are forgotten by every gate
// (retentionLoop).
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
		g.mu.Lock()
		for id, j := range g.jobs {
			if j.rec.Status.Terminal() {
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
		g.mu.Unlock()
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
