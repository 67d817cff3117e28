package gate

import (
	"context"
	"sync"

	"tempest/leadership"
	"tempest/transport"
	"tempest/wire"
)

// A leader that read a majority of gates holds every job a majority
// acknowledged, but a job can still reach a datacenter without this leader
// holding it: a submission whose answer was "outcome unknown" left a copy
// on a gate that later led and dispatched it, and a record that arrived
// too late for the sync. So a report for a job the leader does not hold is
// never answered with a blind cancel: the leader asks the other gates for
// the job's record, takes it in (and its leases over) if one has it, and
// tells the datacenter to stop only when a majority of gates, this one
// included, said they hold no such job — then no acknowledged job can be
// behind the report, and nobody would ever read its results.

// lookupResult is what asking the other gates for one job found.
type lookupResult struct {
	found  bool // a gate held the record; it is adopted now
	absent int  // gates, this one included, that said they hold no such job
	quorum int  // the majority of the group that was asked
}

// lookupJob asks every other gate for job id's record, within
// DispatchTimeout, and adopts the newest copy it got. It stops asking once
// a gate has the job; a majority saying it has none is not enough to stop,
// since the one gate that has it (a copy whose submission was answered
// outcome_unknown, taken over by a later leader) may answer last.
func (g *Gate) lookupJob(ctx context.Context, id string) lookupResult {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.DispatchTimeout)
	var wg sync.WaitGroup
	// Returning early cancels the calls still out, and waits for them.
	defer wg.Wait()
	defer cancel()
	type answer struct {
		rec *wire.GateJobRecord
		err error
	}
	peers := g.group.Load()
	answers := make(chan answer, len(peers.VoterIDs))
	for _, peer := range peers.VoterIDs {
		wg.Go(func() {
			reply, err := g.tr.Call(ctx, peers.Voters[peer], &wire.GateRecordRequest{JobID: id})
			if err != nil {
				answers <- answer{err: err}
				return
			}
			rec, ok := reply.(*wire.GateJobRecord)
			if !ok || rec.Submission.JobID != id {
				answers <- answer{err: wire.Errorf(wire.CodeMalformed, "gate %s answered a record request with %s", peer, reply.Type())}
				return
			}
			answers <- answer{rec: rec}
		})
	}
	res := lookupResult{absent: 1, quorum: peers.Quorum}
	var newest *wire.GateJobRecord
	for range peers.VoterIDs {
		a := <-answers
		switch {
		case a.err == nil:
			if newest == nil || a.rec.Version > newest.Version {
				newest = a.rec
			}
		case wire.CodeOf(a.err) == wire.CodeNotFound:
			res.absent++
		}
		if newest != nil {
			break
		}
	}
	if newest != nil {
		if _, err := g.merge([]wire.GateJobRecord{*newest}); err != nil {
			g.log.Warn("persist a job record found on another gate", "job_id", id, "err", err)
		}
		g.view(func() { _, res.found = g.jobs[id] })
	}
	return res
}

// handleRecordRequest answers another gate's request for one job's record.
func (g *Gate) handleRecordRequest(_ context.Context, from transport.Peer, req *wire.GateRecordRequest) (wire.Message, error) {
	if !g.isPeer(from.NodeID) {
		return nil, wire.Errorf(wire.CodeRejected, "gate state is only shared with configured gates")
	}
	rec, _, ok := g.record(req.JobID)
	if !ok || g.expired(&rec, g.now()) {
		return nil, wire.Errorf(wire.CodeNotFound, "job %s not found", req.JobID)
	}
	out, _, _, err := fitRecord(&rec)
	return out, err
}

// unknownReport answers a datacenter's report for a job this leader does
// not hold. It returns found when the job was found on another gate (and
// taken over): the caller then handles the report as usual.
func (g *Gate) unknownReport(ctx context.Context, lt *leadership.Term, jp *wire.JobProgress) (ack *wire.ProgressAck, found bool) {
	ack = &wire.ProgressAck{Leader: g.cfg.ID}
	log := g.log.With("job_id", jp.JobID, "dc", jp.Datacenter)
	res := g.lookupJob(ctx, jp.JobID)
	switch {
	case res.found:
		log.Warn("a datacenter reported a job this leader did not hold; found it on another gate and took it over")
		g.takeOver(lt, jp.JobID)
		return nil, true
	case res.absent >= res.quorum:
		// A majority holds no such job: it was never acknowledged (or is
		// past retention), and nobody will read its results. Managers obey
		// a Cancel in an answer only from the job's lease holder, which
		// this gate is not, so the datacenter is told with a CancelJob
		// under a token from this term: newer than any it holds.
		if jp.Status.Terminal() {
			return ack, false
		}
		token, err := lt.NextToken()
		if err != nil {
			log.Error("cannot tell a datacenter to stop a job no majority of gates holds", "err", err)
			return ack, false
		}
		ack.Cancel, ack.FenceToken = true, token
		log.Warn("a datacenter reported a job no majority of gates holds; telling it to stop", "gates_without_it", res.absent, "fence_token", token)
		g.spawn(func(context.Context) {
			ctx, cancel := context.WithTimeout(lt.Context(), g.cfg.DispatchTimeout)
			defer cancel()
			if err := g.callDC(ctx, jp.Datacenter, &wire.CancelJob{JobID: jp.JobID, Reason: "no gate holds this job", FenceToken: token}); err != nil {
				log.Warn("cancel of a job no gate holds not delivered; its next report asks again", "err", err)
			}
		})
		return ack, false
	default:
		// Not enough gates answered to tell: the datacenter goes on and
		// reports again, and the next report asks again.
		log.Info("a datacenter reported a job this leader does not hold; too few gates answered to tell whether one does",
			"gates_without_it", res.absent, "need", res.quorum)
		return ack, false
	}
}
