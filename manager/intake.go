package manager

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"tempest/leadership"
	"tempest/transport"
	"tempest/wire"
)

// Job intake: a submission is acknowledged only once a majority of the
// datacenter's managers stored it (this leader's disk counts as one), so a
// leader killed right after its answer cannot take the job with it: any
// majority a successor reads in its state sync holds a copy.
//
// Until then the job is unconfirmed: stored here, never placed. When a
// majority cannot be reached, the answer is one of two:
//
//   - a true refusal (ErrNoQuorum, the job FAILED here) when every peer
//     certainly did not store it (it answered with a refusal, or the request
//     certainly never reached it), so nothing anywhere can run it;
//   - otherwise "outcome unknown" (ErrOutcomeUnknown, as gates answer): some peer
//     may hold the job, so it may still run. The leader keeps trying to
//     store it on a majority and places it once it has; a resubmission with
//     the same job id (the API's Idempotency-Key) finds it, retries the
//     intake and answers 201 once a majority holds it.
//
// A successor decides what it found in its majority read (resolveIntake):
// a job some manager knows is on a majority is confirmed; an unconfirmed job
// held only by the leader that accepted it, in an older term, was never on a
// majority (that leader records the confirmation before its 201, and stops
// confirming once a newer term has read its snapshot), so it is withdrawn
// rather than resurrected; any other unconfirmed job is adopted and stored
// on a majority before it is placed.

// intakeResult is what storing a submission on the peers came to.
type intakeResult struct {
	quorum  int // the majority the round counted toward (its peer set's)
	voters  int // the voters of that set, this manager included
	stored  int // voters that answered with a JobAck
	refused int // peers that certainly did not store it
	unknown int // peers whose outcome is unknown (timeout, lost connection)
}

// storeOnPeers sends sub to every peer and waits, up to the quorum timeout,
// until enough voters stored it for a majority or every voter answered.
// Learners get it too, uncounted. Stragglers are not cancelled at quorum:
// they keep their own timeout, so a slow peer still gets the copy a
// successor may need.
func (m *Manager) storeOnPeers(ctx context.Context, sub *wire.JobSubmission) intakeResult {
	peers, release := m.group.Hold()
	res := intakeResult{quorum: peers.Quorum, voters: 1 + len(peers.VoterIDs)}
	targets := peers.Targets()
	if len(targets) == 0 {
		release()
		return res
	}
	type answer struct {
		peer string
		err  error
	}
	answers := make(chan answer, len(targets))
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.QuorumTimeout)
	var wg sync.WaitGroup
	for _, id := range targets {
		wg.Add(1)
		if !m.spawn(func(context.Context) {
			defer wg.Done()
			resp, err := m.tr.Call(callCtx, peers.Addr(id), &wire.ReplicateJob{Job: *sub})
			if err == nil {
				if _, ok := resp.(*wire.JobAck); !ok {
					err = &wire.Error{Code: wire.CodeInternal, Message: fmt.Sprintf("unexpected %T", resp)}
				}
			}
			answers <- answer{peer: id, err: err}
		}) {
			wg.Done()
			answers <- answer{peer: id, err: transport.ErrNotDelivered}
		}
	}
	if !m.spawn(func(context.Context) { wg.Wait(); cancel(); release() }) {
		wg.Wait()
		cancel()
		release()
	}
	for range targets {
		var a answer
		select {
		case a = <-answers:
		case <-ctx.Done():
			// The caller gave up: whatever has not answered is unknown.
			res.unknown = len(peers.VoterIDs) - res.stored - res.refused
			return res
		}
		if _, voter := peers.Voters[a.peer]; !voter {
			continue // a learner's copy never counts
		}
		switch {
		case a.err == nil:
			res.stored++
		case certainlyNotStored(a.err):
			res.refused++
		default:
			res.unknown++
			m.log.Debug("submission not confirmed by peer", "peer", a.peer, "job_id", sub.JobID, "err", a.err)
		}
		if 1+res.stored >= res.quorum {
			return res
		}
	}
	return res
}

// certainlyNotStored reports whether err proves a peer did not store a
// submission: it answered with a typed refusal, or the request certainly
// never reached its handler.
func certainlyNotStored(err error) bool {
	var typed *wire.Error
	return errors.As(err, &typed) || errors.Is(err, transport.ErrNotDelivered) ||
		errors.Is(err, transport.ErrCircuitOpen) || errors.Is(err, transport.ErrUnreachable)
}

// intake stores j's submission on a majority and confirms it. It returns
// nil once the job may be placed, or the answer for the client. Only a
// first attempt may refuse for good: after an attempt with an unknown
// outcome some peer may hold the job whatever later attempts find.
func (m *Manager) intake(ctx context.Context, lt *leadership.Term, j *jobState, first bool) error {
	m.mu.Lock()
	sub := j.rec.Submission
	m.mu.Unlock()
	res := m.storeOnPeers(ctx, &sub)
	if 1+res.stored >= res.quorum {
		if err := m.confirm(lt, j); err != nil {
			return m.unknownOutcome(sub.JobID, res, err.Error())
		}
		return nil
	}
	if first && res.stored == 0 && res.unknown == 0 {
		msg := fmt.Sprintf("no quorum: %d of %d managers confirmed storing job %s; it was not run and will not be", 1, res.voters, sub.JobID)
		m.endJob(j, wire.JobFailed, msg)
		return wire.Errorf(wire.CodeNoQuorum, "%s", msg)
	}
	return m.unknownOutcome(sub.JobID, res, "")
}

// unknownOutcome is the answer when a job may or may not come to run.
func (m *Manager) unknownOutcome(id string, res intakeResult, why string) error {
	if why != "" {
		why = " (" + why + ")"
	}
	return wire.Errorf(wire.CodeOutcomeUnknown, "no quorum: %d of %d managers confirmed storing job %s%s; outcome unknown: "+
		"it runs if a majority comes to hold it; resubmit with the same Idempotency-Key to learn which",
		1+res.stored, res.voters, id, why)
}

// errNotConfirmed: the job cannot be confirmed by this leader any more.
var errNotConfirmed = errors.New("this leader's term ended or a newer leader read the job first")

// confirm records that j is on a majority, durably, before anyone is told:
// a successor trusts this flag. It refuses once the term is over or a newer
// term's state sync has read the job unconfirmed (abandoned), since that
// successor may already have withdrawn it.
func (m *Manager) confirm(lt *leadership.Term, j *jobState) error {
	var refused bool
	err := m.update(func(tx *txn) {
		if j.abandoned || m.leading() != lt || j.rec.Status.Terminal() {
			refused = true
			return
		}
		if !j.rec.Confirmed {
			j.rec.Confirmed = true
			tx.touchJob(j, true)
		}
	})
	switch {
	case refused:
		return errNotConfirmed
	case err != nil:
		// Not durable here: a successor could not trust it, so neither may
		// this leader. The next attempt writes it again.
		m.mu.Lock()
		j.rec.Confirmed = false
		m.mu.Unlock()
		return fmt.Errorf("persist confirmation: %w", err)
	}
	m.kick()
	return nil
}

// confirmPending retries the intake of unconfirmed jobs: those whose
// submitter was told the outcome is unknown, and those a state sync
// adopted from a minority. It runs on the scheduler's beat.
func (m *Manager) confirmPending(ctx context.Context, lt *leadership.Term) {
	m.mu.Lock()
	var todo []*jobState
	for _, j := range m.jobs {
		if !j.rec.Confirmed && !j.intaking && !j.abandoned && !j.rec.Status.Terminal() {
			j.intaking = true
			todo = append(todo, j)
		}
	}
	m.mu.Unlock()
	for _, j := range todo {
		if ctx.Err() == nil {
			if err := m.intake(ctx, lt, j, false); err != nil {
				m.log.Debug("job still not on a majority of managers", "job_id", j.rec.ID(), "err", err)
			} else {
				m.log.Info("job stored on a majority of managers", "job_id", j.rec.ID())
			}
		}
		m.mu.Lock()
		j.intaking = false
		m.mu.Unlock()
	}
}
