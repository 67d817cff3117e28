package gate

import (
	"context"
	"errors"

	"tempest/leadership"
	"tempest/transport"
	"tempest/wire"
)

// handleJobProgress takes a datacenter's report. A follower passes it to
// the leader (ForwardJobProgress); the leader renews the lease and merges
// the report. A manager the gate knows reports for its own datacenter
// only: the datacenter a report speaks for is checked against its
// authenticated sender, here, before it is forwarded.
func (g *Gate) handleJobProgress(ctx context.Context, from transport.Peer, jp *wire.JobProgress) (wire.Message, error) {
	if dc := g.dcs.datacenterOf(from.NodeID); dc != "" && dc != jp.Datacenter {
		return nil, wire.Errorf(wire.CodeRejected, "manager %s of %s reported job %s for %s", from.NodeID, dc, jp.JobID, jp.Datacenter)
	}
	lt := g.lead.Leading()
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
	lt := g.lead.Leading()
	if lt == nil {
		return nil, g.elector.NotLeaderError()
	}
	return g.takeReport(ctx, lt, &op.Report)
}

// takeReport is the leader's side of a datacenter's report.
func (g *Gate) takeReport(ctx context.Context, lt *leadership.Term, jp *wire.JobProgress) (wire.Message, error) {
	// No report is answered before the takeover's majority read: until
	// then this gate may not hold the job.
	if err := lt.AwaitSynced(ctx); errors.Is(err, leadership.ErrTermEnded) {
		return nil, g.elector.NotLeaderError()
	} else if err != nil {
		return nil, err
	}
	var known bool
	g.view(func() { _, known = g.jobs[jp.JobID] })
	if !known {
		if ack, found := g.unknownReport(ctx, lt, jp); !found {
			return ack, nil
		}
	}
	ack := &wire.ProgressAck{Leader: g.cfg.ID}
	var check *wire.GateJobRecord
	var rejected error
	// The answer waits for the change to be on a majority of gates: a
	// datacenter whose end was acknowledged stops reporting it, so a
	// successor must have it. Without a majority the datacenter is told to
	// retry, and its next report stores the change again.
	err := g.update(func(tx *txn) { check, rejected = g.reportLocked(tx, jp, ack) })
	if rejected != nil {
		return nil, rejected
	}
	if err != nil {
		return nil, err
	}
	if check != nil {
		if reason := g.abortReason(check); reason != "" {
			g.spawn(func(ctx context.Context) { g.abort(ctx, check.Submission.JobID, reason) })
		}
	}
	return ack, nil
}

// reportLocked merges a datacenter's report into its job and fills the
// answer: the lease renewed, the datacenter's part replaced, the record
// committed when the job's status changed. It returns a copy of the record
// when the job's abort_on_fail thresholds are due a check.
func (g *Gate) reportLocked(tx *txn, jp *wire.JobProgress, ack *wire.ProgressAck) (*wire.GateJobRecord, error) {
	now := g.now()
	j, ok := g.jobs[jp.JobID]
	if !ok {
		// Forgotten meanwhile (retention): nobody will read its results.
		ack.Cancel = !jp.Status.Terminal()
		return nil, nil
	}
	li, pi := j.leaseIndex(jp.Datacenter), j.progressIndex(jp.Datacenter)
	if li < 0 || pi < 0 {
		return nil, wire.Errorf(wire.CodeRejected, "job %s does not run in %s", jp.JobID, jp.Datacenter)
	}
	if j.rec.Version > j.storedVersion {
		// A change of this job did not reach a majority, is being stored
		// now, or came from another gate's copy: store it (again) before
		// answering.
		tx.commit(j)
	}
	cur := j.rec.Datacenters[pi]
	if cur.Status.Terminal() {
		// The gate already ended the job here (lease expired, cancelled):
		// a datacenter still running it must stop. The token proves to the
		// manager that the lease holder says so.
		ack.Cancel = !jp.Status.Terminal()
		ack.FenceToken = j.rec.Leases[li].FenceToken
		return nil, nil
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
		tx.commit(j)
	} else {
		j.wakeLocked()
	}
	if j.aborted == "" && j.cancelled == "" && !now.Before(j.nextAbortCheck) && hasAbortThresholds(j.rec.Submission.Workflows) {
		j.nextAbortCheck = now.Add(abortCheckInterval)
		rec := j.rec
		return &rec, nil
	}
	return nil, nil
}
