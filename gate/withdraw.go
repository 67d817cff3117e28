package gate

import (
	"context"

	"tempest/wire"
)

// A new job is acknowledged once a majority of gates stored its record.
// When that fails, some gates may still hold the record (they stored it,
// but their answers were lost or came too late), and a later leader would
// take it over and run it: answering "refused" then would be a lie. So the
// leader withdraws the job: it writes a newer version of the record, ended
// and marked Withdrawn, and stores that on a majority. Any majority a later
// leader reads then holds the withdrawal, which outranks every copy of the
// first version, so the job never runs: the refusal is true, and the client
// is told so (no_quorum). If the withdrawal cannot reach a majority either,
// the gate cannot know whether the job will run, and says exactly that
// (outcome_unknown): the client re-sends it under the same Idempotency-Key,
// which finds the job wherever it was kept or places it afresh, once.

// withdrawnPrefix starts the error of a withdrawn job.
const withdrawnPrefix = "withdrawn: "

// existing answers a submission whose id this gate already holds: the job's
// datacenters once it is acknowledged, after waiting for a placement still
// under way. It returns nil, nil when the id is free (or withdrawn).
func (g *Gate) existing(ctx context.Context, id string) (*wire.JobAck, error) {
	for {
		var placing chan struct{}
		var dcs []string
		free := false
		g.view(func() {
			j, ok := g.jobs[id]
			if !ok || j.rec.Withdrawn {
				free = true
				return
			}
			placing, dcs = j.placing, j.datacentersLocked()
		})
		if free {
			return nil, nil
		}
		if placing == nil {
			return &wire.JobAck{JobID: id, Accepted: true, Datacenters: dcs}, nil
		}
		select {
		case <-placing:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// placed ends j's placement: submissions of its id waiting on it go on.
func (g *Gate) placed(j *jobEntry) {
	g.update(func(*txn) {
		if j.placing != nil {
			close(j.placing)
			j.placing = nil
		}
	})
}

// withdraw ends job j, which did not reach a majority of gates (cause),
// and stores the withdrawal on a majority. It returns the client's answer:
// no_quorum when the withdrawal holds (the job will never run),
// outcome_unknown when it does not.
func (g *Gate) withdraw(j *jobEntry, cause error) error {
	id := j.id()
	var stored *wire.GateJobRecord
	err := g.update(func(tx *txn) {
		if g.jobs[id] != j {
			return
		}
		j.mutateLocked(func(rec *wire.GateJobRecord) {
			rec.Withdrawn = true
			rec.Status = wire.JobFailed
			rec.Error = withdrawnPrefix + "not stored on a majority of gates; it never ran"
			rec.FinishedAt = g.now().UnixNano()
			for i := range rec.Datacenters {
				rec.Datacenters[i].Status = wire.JobFailed
				rec.Datacenters[i].Error = "withdrawn before the datacenter got it"
			}
		})
		clear(j.send)
		stored = tx.commitForQuorum(j)
	})
	if stored == nil {
		return wire.Errorf(wire.CodeOutcomeUnknown, "job %s: not stored on a majority of gates (%v), and replaced meanwhile", id, cause)
	}
	if err != nil {
		g.log.Warn("persist a withdrawn job", "job_id", id, "err", err)
	}
	// The client may have gone (its context ended the first attempt); the
	// withdrawal has its own bound, QuorumTimeout.
	if err := g.replicateQuorum(g.life.Context(), stored); err != nil {
		return wire.Errorf(wire.CodeOutcomeUnknown,
			"job %s reached some gates but not a majority, and could not be withdrawn from them: it may still run; "+
				"re-send it with the same Idempotency-Key to find or place it (%v; withdrawal: %v)", id, cause, err)
	}
	return wire.Errorf(wire.CodeNoQuorum, "job %s was not stored on a majority of gates and is withdrawn: it will not run (%v)", id, cause)
}
