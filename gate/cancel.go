package gate

import (
	"context"

	"tempest/wire"
)

// cancelJob stops a job in every datacenter (leader only).
func (g *Gate) cancelJob(ctx context.Context, id, reason string) (*wire.CancelAck, error) {
	if _, err := g.awaitLeader(ctx); err != nil {
		return nil, err
	}
	var found bool
	var ended wire.JobStatus
	g.update(func(tx *txn) {
		j, ok := g.jobs[id]
		if found = ok; !ok {
			return
		}
		if j.rec.Status.Terminal() {
			ended = j.rec.Status
			return
		}
		j.cancelled = reason
		// CANCELLING until every datacenter has answered (or its lease
		// is over): watchers see the cancel at once.
		if g.refreshLocked(j) {
			tx.commit(j)
		}
	})
	switch {
	case !found:
		return nil, wire.Errorf(wire.CodeNotFound, "job %s not found", id)
	case ended != "":
		return &wire.CancelAck{JobID: id, Cancelled: false, Error: "job already " + string(ended)}, nil
	}
	return g.stopEverywhere(ctx, id, reason)
}

// stopEverywhere tells every datacenter still running job id to stop, under
// its lease's token, and ends the job's part there. A datacenter that cannot
// be told now stops at its next report, which is answered with a cancel.
// The answer counts the workflows the datacenters said they stopped (one
// that could not be told adds none).
func (g *Gate) stopEverywhere(ctx context.Context, id, reason string) (*wire.CancelAck, error) {
	type target struct {
		dc    string
		token uint64
	}
	var targets []target
	var j *jobEntry
	g.view(func() {
		var ok bool
		if j, ok = g.jobs[id]; !ok {
			return
		}
		for _, l := range j.rec.Leases {
			if pi := j.progressIndex(l.Datacenter); pi >= 0 && !j.rec.Datacenters[pi].Status.Terminal() {
				targets = append(targets, target{l.Datacenter, l.FenceToken})
			}
		}
	})
	if j == nil {
		return nil, wire.Errorf(wire.CodeNotFound, "job %s not found", id)
	}

	ack := &wire.CancelAck{JobID: id, Cancelled: true}
	for _, t := range targets {
		reply, err := g.callDCReply(ctx, t.dc, &wire.CancelJob{JobID: id, Reason: reason, FenceToken: t.token})
		if dack, ok := reply.(*wire.CancelAck); ok && err == nil {
			ack.WorkflowsCancelled += dack.WorkflowsCancelled
		}
		if err != nil {
			// The datacenter cannot be told now; its lease is over, so its
			// next report is answered with a cancel.
			g.log.Warn("cancel not delivered; the datacenter stops at its next report", "job_id", id, "dc", t.dc, "err", err)
		}
		g.update(func(*txn) {
			if pi := j.progressIndex(t.dc); pi >= 0 && !j.rec.Datacenters[pi].Status.Terminal() {
				j.mutateLocked(func(rec *wire.GateJobRecord) {
					rec.Datacenters[pi].Status = wire.JobCancelled
					rec.Datacenters[pi].Error = reason
				})
			}
		})
	}
	g.update(func(tx *txn) {
		g.refreshLocked(j)
		tx.commit(j)
	})
	return ack, nil
}
