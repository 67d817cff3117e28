package gate

import (
	"context"

	"tempest/transport"
	"tempest/wire"
)

// handleJobProgress takes a datacenter's report. A follower passes it to
// the leader (ForwardJobProgress); the leader renews the lease and merges
// the report.
func (g *Gate) handleJobProgress(ctx context.Context, _ transport.Peer, jp *wire.JobProgress) (wire.Message, error) {
	lt := g.lead.Load()
	if lt == nil {
		leader, addr := g.elector.Leader()
		if leader == "" || leader == g.cfg.ID || addr == "" {
			return nil, g.elector.NotLeaderError()
		}
		return g.tr.Call(ctx, addr, &wire.ForwardJobProgress{Report: *jp})
	}
	return g.takeReport(ctx, lt, jp)
}

// handleForwardedJobProgress takes a report another gate received. It goes
// one hop only: a gate that does not lead either answers not_leader, and
// the manager tries the next gate it knows.
func (g *Gate) handleForwardedJobProgress(ctx context.Context, from transport.Peer, op *wire.ForwardJobProgress) (wire.Message, error) {
	if !g.isPeer(from.NodeID) {
		return nil, wire.Errorf(wire.CodeRejected, "forwarded reports are only accepted from configured gates")
	}
	lt := g.lead.Load()
	if lt == nil {
		return nil, g.elector.NotLeaderError()
	}
	return g.takeReport(ctx, lt, &op.Report)
}

// takeReport is the leader's side of a datacenter's report.
func (g *Gate) takeReport(ctx context.Context, lt *leaderTerm, jp *wire.JobProgress) (wire.Message, error) {
	// No report is answered before the takeover's majority read: until
	// then this gate may not hold the job.
	select {
	case <-lt.synced:
	case <-lt.ctx.Done():
		return nil, g.elector.NotLeaderError()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	g.mu.Lock()
	_, known := g.jobs[jp.JobID]
	g.mu.Unlock()
	if !known {
		if ack, found := g.unknownReport(ctx, lt, jp); !found {
			return ack, nil
		}
	}
	now := g.now()
	var stored *wire.GateJobRecord
	ack := &wire.ProgressAck{Leader: g.cfg.ID}
	g.mu.Lock()
	j, ok := g.jobs[jp.JobID]
	if !ok {
		// Forgotten meanwhile (retention): nobody will read its results.
		g.mu.Unlock()
		ack.Cancel = !jp.Status.Terminal()
		return ack, nil
	}
	li, pi := j.leaseIndex(jp.Datacenter), j.progressIndex(jp.Datacenter)
	if li < 0 || pi < 0 {
		g.mu.Unlock()
		return nil, wire.Errorf(wire.CodeRejected, "job %s does not run in %s", jp.JobID, jp.Datacenter)
	}
	cur := j.rec.Datacenters[pi]
	if cur.Status.Terminal() {
		// The gate already ended the job here (lease expired, cancelled):
		// a datacenter still running it must stop. The token proves to the
		// manager that the lease holder says so.
		ack.Cancel = !jp.Status.Terminal()
		ack.FenceToken = j.rec.Leases[li].FenceToken
		g.mu.Unlock()
		return ack, nil
	}
	if jp.FenceToken >= j.rec.Leases[li].FenceToken {
		delete(j.send, jp.Datacenter)
	}
	statusChanged := jp.Status != cur.Status
	j.mutateLocked(func(rec *wire.GateJobRecord) {
		rec.Leases[li].ExpiresAt = now.Add(g.cfg.LeaseTTL).UnixNano()
		rec.Datacenters[pi] = *jp
	})
	if rec := j.rec.Leases[li]; rec.LeaseHolder == g.cfg.ID {
		ack.LeaseTTL = g.cfg.LeaseTTL
	}
	if g.refreshLocked(j) || statusChanged {
		stored = g.commitLocked(j)
	} else {
		j.wakeLocked()
	}
	var check *wire.GateJobRecord
	if j.aborted == "" && j.cancelled == "" && !now.Before(j.nextAbortCheck) && hasAbortThresholds(j.rec.Submission.Workflows) {
		j.nextAbortCheck = now.Add(abortCheckInterval)
		rec := j.rec
		check = &rec
	}
	g.mu.Unlock()
	if stored != nil {
		g.save(stored)
	}
	if check != nil {
		if reason := g.abortReason(check); reason != "" {
			g.spawn(func(ctx context.Context) { g.abort(ctx, check.Submission.JobID, reason) })
		}
	}
	return ack, nil
}
