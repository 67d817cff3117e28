package gate

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"tempest/leadership"
	"tempest/transport"
	"tempest/wire"
)

// save persists the records a leader's change committed and stores them
// on a majority of gates before it returns: until then a successor that
// read a majority could miss a lease this leader took over (and show an
// older fence token) or a job's end (and run it again). It returns an
// error with code no_quorum when some record did not reach a majority;
// the record stays unstored (jobEntry.storedVersion), so the next report
// or takeover round commits it again.
func (g *Gate) save(ctx context.Context, recs ...*wire.GateJobRecord) error {
	if len(recs) == 0 {
		return nil
	}
	if err := g.store.put(recs...); err != nil {
		g.log.Error("persist job records", "err", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(recs))
	for i, r := range recs {
		fit, _, shed, err := fitRecord(r)
		if err != nil {
			g.log.Warn("replicate job record: too large to send", "job_id", r.Submission.JobID, "err", err)
			errs[i] = err
			continue
		}
		if shed != "" {
			g.log.Warn("replicate job record: too large for a message; sent without "+shed, "job_id", r.Submission.JobID)
		}
		wg.Go(func() {
			if err := g.replicateQuorum(ctx, fit); err != nil {
				g.log.Debug("job record not on a majority of gates yet", "job_id", r.Submission.JobID, "version", r.Version, "err", err)
				errs[i] = err
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// replicateQuorum hands a job's record to the other gates and waits until
// a majority (this gate included) stored it, so a successor knows the job
// (and this version of it) before the client or a datacenter hears of it.
func (g *Gate) replicateQuorum(ctx context.Context, rec *wire.GateJobRecord) error {
	peers, release := g.group.Hold()
	op := &wire.ReplicateGateRecord{Record: *rec}
	g.sendToLearners(peers, op, release)
	if peers.Quorum <= 1 {
		g.markStored(rec)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.QuorumTimeout)
	var wg sync.WaitGroup
	// Returning at quorum cancels the calls still out, and waits for them.
	defer wg.Wait()
	defer cancel()
	acks := make(chan error, len(peers.VoterIDs))
	for _, id := range peers.VoterIDs {
		wg.Go(func() {
			reply, err := g.tr.Call(ctx, peers.Voters[id], op)
			if ack, ok := reply.(*wire.JobAck); err == nil && (!ok || !ack.Accepted) {
				err = fmt.Errorf("gate %s refused the record: %s", id, ackError(ack))
			}
			acks <- err
		})
	}
	have, errs := 1, []error(nil)
	for range peers.VoterIDs {
		err := <-acks
		if err == nil {
			have++
			if have >= peers.Quorum {
				g.markStored(rec)
				return nil
			}
		} else {
			errs = append(errs, err)
		}
	}
	return wire.Errorf(wire.CodeNoQuorum, "job %s reached %d of %d gates (need %d): %v",
		rec.Submission.JobID, have, 1+len(peers.VoterIDs), peers.Quorum, errors.Join(errs...))
}

// sendToLearners hands op to every learner of peers, counted by nobody,
// each call with its own timeout rather than the round's (which ends at
// quorum): a learner must get every record sent after it joined. release
// runs once they all ended.
func (g *Gate) sendToLearners(peers *leadership.PeerSet, op *wire.ReplicateGateRecord, release func()) {
	if len(peers.LearnerIDs) == 0 || !g.spawn(func(ctx context.Context) {
		defer release()
		var wg sync.WaitGroup
		for _, id := range peers.LearnerIDs {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, g.cfg.QuorumTimeout)
				defer cancel()
				if _, err := g.tr.Call(cctx, peers.Learners[id], op); err != nil {
					g.log.Debug("record not sent to a learner gate", "gate", id, "job_id", op.Record.Submission.JobID, "err", err)
				}
			})
		}
		wg.Wait()
	}) {
		release()
	}
}

// markStored notes that rec's version of its job is on a majority of
// gates.
func (g *Gate) markStored(rec *wire.GateJobRecord) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if j, ok := g.jobs[rec.Submission.JobID]; ok {
		j.storedVersion = max(j.storedVersion, rec.Version)
	}
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
