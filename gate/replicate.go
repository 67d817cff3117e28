package gate

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"tempest/transport"
	"tempest/wire"
)

// save persists records and replicates them to the other gates (one way:
// the leader's next change or a successor's sync covers a lost message).
func (g *Gate) save(recs ...*wire.GateJobRecord) {
	if len(recs) == 0 {
		return
	}
	if err := g.store.put(recs...); err != nil {
		g.log.Error("persist job records", "err", err)
	}
	out := make([]*wire.GateJobRecord, 0, len(recs))
	for _, r := range recs {
		fit, _, shed, err := fitRecord(r)
		if err != nil {
			g.log.Warn("replicate job record: too large to send", "job_id", r.Submission.JobID, "err", err)
			continue
		}
		if shed != "" {
			g.log.Warn("replicate job record: too large for a message; sent without "+shed, "job_id", r.Submission.JobID)
		}
		out = append(out, fit)
	}
	g.spawn(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, g.cfg.QuorumTimeout)
		defer cancel()
		for _, id := range g.peerIDs {
			for _, r := range out {
				if err := g.tr.Send(ctx, g.peers[id], &wire.ReplicateGateRecord{Record: *r}); err != nil {
					g.log.Debug("replicate job record", "peer", id, "job_id", r.Submission.JobID, "err", err)
				}
			}
		}
	})
}

// replicateQuorum hands a new job's record to the other gates and waits
// until a majority (this gate included) stored it, so a successor knows
// the job before the client hears of it.
func (g *Gate) replicateQuorum(ctx context.Context, rec *wire.GateJobRecord) error {
	if g.quorumSize <= 1 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.QuorumTimeout)
	var wg sync.WaitGroup
	// Returning at quorum cancels the calls still out, and waits for them.
	defer wg.Wait()
	defer cancel()
	acks := make(chan error, len(g.peerIDs))
	op := &wire.ReplicateGateRecord{Record: *rec}
	for _, id := range g.peerIDs {
		wg.Go(func() {
			reply, err := g.tr.Call(ctx, g.peers[id], op)
			if ack, ok := reply.(*wire.JobAck); err == nil && (!ok || !ack.Accepted) {
				err = fmt.Errorf("gate %s refused the record: %s", id, ackError(ack))
			}
			acks <- err
		})
	}
	have, errs := 1, []error(nil)
	for range g.peerIDs {
		err := <-acks
		if err == nil {
			have++
			if have >= g.quorumSize {
				return nil
			}
		} else {
			errs = append(errs, err)
		}
	}
	return wire.Errorf(wire.CodeNoQuorum, "job %s reached %d of %d gates (need %d): %v",
		rec.Submission.JobID, have, len(g.cfg.Peers), g.quorumSize, errors.Join(errs...))
}

func ackError(a *wire.JobAck) string {
	if a == nil {
		return "unexpected answer"
	}
	return a.Error
}

// handleReplicateGateRecord stores a record the gate leader replicated.
func (g *Gate) handleReplicateGateRecord(_ context.Context, from transport.Peer, op *wire.ReplicateGateRecord) (wire.Message, error) {
	rec := &op.Record
	if !g.isPeer(from.NodeID) {
		return nil, wire.Errorf(wire.CodeRejected, "job records are only accepted from configured gates")
	}
	if rec.Submission.JobID == "" {
		return nil, wire.Errorf(wire.CodeRejected, "job record without a job id")
	}
	if lt := g.lead.Leading(); lt != nil && lt.Synced() {
		// A deposed leader still replicating: this gate's own copy, with
		// the leases it took over, is newer.
		return &wire.JobAck{JobID: rec.Submission.JobID, Accepted: false, Error: "this gate leads now"}, nil
	}
	if leader, _ := g.elector.Leader(); leader != "" && leader != from.NodeID {
		// Only the leader this gate follows writes records; a deposed one
		// learns of its successor from the answer and its next election
		// message.
		return &wire.JobAck{JobID: rec.Submission.JobID, Accepted: false, Error: "not the leader: " + leader + " leads"}, nil
	}
	if err := g.update(func(tx *txn) { g.adoptLocked(tx, rec) }); err != nil {
		return nil, wire.Errorf(wire.CodeUnavailable, "persist job %s: %v", rec.Submission.JobID, err)
	}
	return &wire.JobAck{JobID: rec.Submission.JobID, Accepted: true}, nil
}

// adoptLocked merges a record from another gate: the higher version wins,
// and a record past retention is never taken in. A record taken in is
// written as it is; it returns the copy, or nil if it was not newer.
func (g *Gate) adoptLocked(tx *txn, rec *wire.GateJobRecord) *wire.GateJobRecord {
	g.version = max(g.version, rec.Version)
	if g.expired(rec, g.now()) {
		return nil
	}
	j, ok := g.jobs[rec.Submission.JobID]
	if ok && j.rec.Version >= rec.Version {
		return nil
	}
	if !ok {
		j = newJobEntry(*rec)
		g.jobs[rec.Submission.JobID] = j
	} else {
		j.rec = *rec
	}
	j.wakeLocked()
	out := j.rec
	tx.store(&out)
	return &out
}
