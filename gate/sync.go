package gate

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"tempest/internal/lifecycle"
	"tempest/leadership"
	"tempest/transport"
	"tempest/wire"
)

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
	var n int
	g.view(func() { n = len(g.jobs) })
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
		_, n, err := g.fetchRecords(ctx, leader, g.group.Load().Addr(leader), syncCursor{})
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
	// One group for the whole read: a majority of one configuration.
	peers := g.group.Load()
	need := peers.Quorum - 1
	if need <= 0 {
		return nil, nil
	}
	cursors := make(map[string]syncCursor, len(peers.VoterIDs))
	read := make(map[string]bool, len(peers.VoterIDs))
	backoff := 100 * time.Millisecond
	for round := 1; ; round++ {
		adopted := g.syncRound(ctx, peers, cursors, read, need)
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
func (g *Gate) syncRound(ctx context.Context, peers *leadership.PeerSet, cursors map[string]syncCursor, read map[string]bool, need int) int {
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
	for _, id := range peers.VoterIDs {
		if !read[id] {
			ask = append(ask, id)
		}
	}
	answers := make(chan answer, len(ask))
	for _, id := range ask {
		cur := cursors[id]
		wg.Go(func() {
			cur, n, err := g.fetchRecords(ctx, id, peers.Voters[id], cur)
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
func (g *Gate) fetchRecords(ctx context.Context, id, addr string, cur syncCursor) (syncCursor, int, error) {
	adopted := 0
	for {
		reply, err := g.tr.Call(ctx, addr, &wire.StateSyncRequest{RequesterID: g.cfg.ID, RequesterRole: wire.RoleGate,
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
	n := 0
	err := g.update(func(tx *txn) {
		for i := range recs {
			if g.adoptLocked(tx, &recs[i]) != nil {
				n++
			}
		}
	})
	if err != nil {
		return n, fmt.Errorf("synced job records: %w", err)
	}
	return n, nil
}

// handleStateSync answers another gate's state sync with one page of
// records after the request's (SinceVersion, SinceJobID), in (version, job
// id) order: at least one whole record and then as many as fit in
// SyncPageBytes, never more than one message holds. More says whether
// pages remain; CurrentVersion is the newest version this gate has. A
// record too large for a message goes lighter (fitRecord); one too large
// even then is an error the asker sees, naming the job, rather than an
// answer the transport cannot carry.
func (g *Gate) handleStateSync(ctx context.Context, from transport.Peer, req *wire.StateSyncRequest) (wire.Message, error) {
	if err := g.learnerSyncGate(ctx, from); err != nil {
		return nil, err
	}
	// Without SinceJobID the asker has every record of SinceVersion (it
	// pages by version alone).
	wanted := func(r *wire.GateJobRecord) bool {
		return r.Version > req.SinceVersion ||
			req.SinceJobID != "" && r.Version == req.SinceVersion && r.Submission.JobID > req.SinceJobID
	}
	var recs []wire.GateJobRecord
	resp := &wire.StateSyncResponse{ResponderID: g.cfg.ID}
	g.view(func() {
		recs = make([]wire.GateJobRecord, 0, len(g.jobs))
		for _, j := range g.jobs {
			if wanted(&j.rec) {
				recs = append(recs, j.rec)
			}
		}
		resp.CurrentVersion = g.version
	})
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
