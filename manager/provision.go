package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"tempest/leadership"
	"tempest/rainstorm"
	"tempest/transport"
	"tempest/wire"
)

// outcome is how one placement attempt ended.
type outcome int

const (
	outcomePlaced     outcome = iota // dispatched and accepted
	outcomeNoCapacity                // no eligible worker now; stays PENDING
	outcomeNoQuorum                  // too few managers answered; stays PENDING
	outcomeSkipped                   // nothing to do (placed elsewhere, cancelled, ended)
	outcomeFailed                    // the workflow FAILED, or this leader is stale
)

type placeResult struct {
	outcome outcome
	err     error
}

// place runs quorum-confirmed provisioning for one PENDING workflow
// (docs/datacenter.md): pick a worker, get a majority of the configured managers to
// confirm, persist and commit the placement to the peers, dispatch. A worker
// that refuses, or that peers refuse, is skipped for this round and another
// is tried; a dispatch that fails with the outcome unknown counts as a
// failed attempt on that worker (it is excluded from now on, and any copy it
// did start is fenced out by the newer token).
//
// The plan (gang.go) has claimed w already, and for p.on reserved p.cores
// cores on that worker, which is tried first: fewer than the workflow's
// own when it joins a slot there another task of its pipeline takes or
// holds (slots.go). Any other worker is asked for the workflow's own.
func (m *Manager) place(ctx context.Context, lt *leadership.Term, p placement) (res placeResult) {
	w := p.w
	var valid bool
	var cores int
	var excluded []string
	m.update(func(tx *txn) {
		if w.rec.Status != wire.WorkflowPending || w.job.rec.Status.Terminal() || !w.job.rec.Confirmed {
			return
		}
		valid, cores, excluded = true, w.rec.Spec.Cores, slices.Clone(w.rec.Excluded)
	})
	if !valid || p.cores > cores {
		m.release(p)
		return placeResult{outcome: outcomeSkipped}
	}
	first := p.on // reserved by the plan, until used
	defer func() {
		if first.ID != "" {
			m.workers.unreserve(first.ID, p.cores)
		}
	}()
	defer m.update(func(tx *txn) {
		w.placing, w.provisioning, w.target = false, false, ""
		why := w.waiting
		switch res.outcome {
		case outcomeNoCapacity:
			why = noFreeCore(cores)
		case outcomeNoQuorum:
			why = "no quorum of managers to confirm a placement"
		case outcomePlaced:
			why = ""
		}
		setWaitingLocked(tx, w, why)
	})

	skip := make(map[string]bool, len(excluded))
	for _, id := range excluded {
		skip[id] = true
	}
	for {
		if err := ctx.Err(); err != nil {
			return placeResult{outcome: outcomeSkipped, err: err}
		}
		wv, ok, reserved := first, true, p.cores
		if first.ID != "" {
			// The plan's worker, which it chose knowing the exclusions
			// (a replacement may rejoin its slot's worker, gang.go).
			first = workerView{} // placeOn settles its reservation now
		} else {
			wv, ok = m.pickFor(w, cores, skip)
			reserved = cores
		}
		if !ok {
			return placeResult{outcome: outcomeNoCapacity}
		}
		res, another := m.placeOn(ctx, lt, w, wv, reserved)
		if !another {
			return res
		}
		skip[wv.ID] = true
	}
}

// pickFor reserves cores on a worker for w, avoiding the workers its sibling
// shards use when another worker has room. Sibling placements run at the
// same time, so the choice and its record happen under the job table's lock
// (Manager.mu before workerTable.mu, as the lock order allows).
func (m *Manager) pickFor(w *workflowState, cores int, skip map[string]bool) (workerView, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pickLocked(w, cores, skip)
}

// pickLocked is pickFor under Manager.mu.
func (m *Manager) pickLocked(w *workflowState, cores int, skip map[string]bool) (workerView, bool) {
	avoid := siblingWorkersLocked(w)
	var allowed map[string]bool // nil: any worker
	if needs := taskNeeds(w); len(needs) > 0 {
		allowed = m.workers.allowing(needs)
	}
	barred := func(id string) bool { return skip[id] || (allowed != nil && !allowed[id]) }
	wv, ok := m.workers.pick(cores, func(id string) bool { return barred(id) || avoid[id] })
	if !ok && len(avoid) > 0 {
		wv, ok = m.workers.pick(cores, barred)
	}
	if ok {
		w.target = wv.ID
	}
	return wv, ok
}

// placeOn tries one worker whose cores pick has reserved. another reports
// that the caller should try a different worker.
func (m *Manager) placeOn(ctx context.Context, lt *leadership.Term, w *workflowState, wv workerView, cores int) (res placeResult, another bool) {
	m.mu.Lock()
	rec := w.rec
	slot := dispatchSlotLocked(w)
	first := groupMembersLocked(w)[0].rec.Spec.Params
	m.mu.Unlock()
	log := m.log.With("job_id", rec.JobID, "workflow_id", rec.WorkflowID, "worker", wv.ID)
	keep := true // the first dispatch's bytes, for retries to resend
	if isPipeline(w) {
		// A pipeline task's stored params name the pipeline's spec, kept
		// once in its first task's (rainstorm.TaskParams); the worker gets
		// them whole. Its dispatch bytes are not kept: they would hold the
		// spec once more per task, and the stored params rebuild them
		// exactly.
		params, err := rainstorm.Resolve(first, rec.Spec.Params)
		if err != nil {
			m.workers.unreserve(wv.ID, cores)
			return placeResult{outcome: outcomeFailed, err: fmt.Errorf("pipeline task %s: %w", rec.WorkflowID, err)}, false
		}
		rec.Spec.Params, rec.DispatchBytes, keep = params, nil, false
	}

	token, err := lt.NextToken()
	if err != nil {
		m.workers.unreserve(wv.ID, cores)
		return placeResult{outcome: outcomeFailed, err: err}, false
	}
	m.update(func(tx *txn) {
		w.provisioning = true
		tx.touchJob(w.job, false)
	})
	dispatch, original, err := m.buildDispatch(&rec, token)
	if err != nil {
		m.workers.unreserve(wv.ID, cores)
		return placeResult{outcome: outcomeFailed, err: err}, false
	}
	dispatch.Worker, dispatch.Slot = wv.ID, slot
	dispatch.Placement = m.placementProof(rec.JobID, rec.WorkflowID, wv.ID, token)

	a := m.provision(ctx, &wire.ProvisionRequest{
		JobID: rec.JobID, WorkflowID: rec.WorkflowID, TargetWorker: wv.ID,
		CoresRequired: cores, FenceToken: token, Version: wv.Version,
	})
	if err := ctx.Err(); err != nil {
		// The round is shared, so it ran on; this placement's caller is
		// gone (the term ended, or the submitting client left). A
		// confirmation binds no peer to anything until a commit, and none
		// is sent: the workflow stays PENDING for the scheduler.
		m.workers.unreserve(wv.ID, cores)
		return placeResult{outcome: outcomeSkipped, err: err}, false
	}
	if a.confirmed < a.quorum {
		m.workers.unreserve(wv.ID, cores)
		if a.answered < a.quorum {
			err := wire.Errorf(wire.CodeNoQuorum, "no quorum: %d of %d managers confirmed", a.confirmed, a.voters)
			log.Warn("provision failed", "err", err)
			return placeResult{outcome: outcomeNoQuorum, err: err}, false
		}
		log.Info("peers refused placement; trying another worker", "refusals", a.refusals)
		return placeResult{}, true
	}

	// The placement is decided: make it durable before anyone acts on it,
	// so a restarted leader knows where the workflow went and under which
	// token.
	committed, attempts := false, 0
	m.update(func(tx *txn) {
		if !w.placing || w.rec.Status != wire.WorkflowPending || w.job.rec.Status.Terminal() || m.leading() != lt {
			return
		}
		if len(w.rec.DispatchBytes) == 0 && keep {
			w.rec.DispatchBytes = original
		}
		w.rec.Worker = wv.ID
		w.rec.FenceToken = token
		w.rec.Attempts++
		w.rec.Status = wire.WorkflowAssigned
		w.rec.Cores = nil
		w.rec.Error = ""
		tx.touchWorkflow(w, true)
		committed, attempts = true, w.rec.Attempts
	})
	if !committed {
		m.workers.unreserve(wv.ID, cores)
		return placeResult{outcome: outcomeSkipped}, false
	}
	m.commitToPeers(ctx, &wire.ProvisionCommit{
		JobID: rec.JobID, WorkflowID: rec.WorkflowID, TargetWorker: wv.ID,
		CoresAssigned: cores, FenceToken: token, CommittedVersion: wv.Version, Attempts: attempts,
	})

	ack, err := m.dispatch(ctx, wv, dispatch)
	switch {
	case err == nil && ack.Accepted:
		m.workers.dispatched(wv.ID, cores, ack.AvailableCores)
		var cancelNow bool
		m.update(func(tx *txn) {
			if w.rec.FenceToken != token {
				return
			}
			switch w.rec.Status {
			case wire.WorkflowAssigned:
				// Lazily: the placement is on disk (ASSIGNED, with its
				// worker and token), and a successor reads from the
				// workers whether it runs.
				w.rec.Status = wire.WorkflowRunning
				w.rec.Cores = ack.CoresAssigned
				tx.touchWorkflowLazily(w)
			case wire.WorkflowCancelled:
				cancelNow = true // cancelled while the dispatch was in flight
			}
		})
		if cancelNow {
			// The cancel counted these cores free before the ack counted
			// them taken; they are free again once the worker stops.
			m.workers.freed(wv.ID, cores)
			m.cancelOnWorkers(ctx, []cancelTarget{{worker: wv.ID, jobID: rec.JobID, workflowID: rec.WorkflowID, fence: token}}, "job ended")
		}
		log.Info("workflow dispatched", "fence_token", token, "attempt", dispatch.Attempt, "cores", ack.CoresAssigned)
		return placeResult{outcome: outcomePlaced}, false

	case err == nil:
		// Refused (no room after all, draining, unknown type): it never ran,
		// so it costs no attempt; the worker's count of free cores is fresh.
		m.workers.dispatched(wv.ID, cores, ack.AvailableCores)
		m.revertAssignment(w, token)
		log.Info("worker refused dispatch; trying another", "reason", ack.Error)
		return placeResult{}, true

	case errors.Is(err, wire.ErrStaleFence):
		// The worker has seen a newer token for this workflow: a newer
		// leader exists. Stop; that leader owns the workflow now.
		m.workers.unreserve(wv.ID, cores)
		m.revertAssignment(w, token)
		log.Warn("dispatch fenced out: a newer leader owns this workflow", "fence_token", token, "err", err)
		return placeResult{outcome: outcomeFailed, err: err}, false

	case fencedFirst(&rec.Spec):
		// The call broke after the dispatch may have reached the worker,
		// which may be running it: a retry at once could load the target
		// twice and count once. The attempt stays ASSIGNED while it is
		// fenced on its worker; then it is retried, with whatever it
		// reported kept (lost.go).
		m.workers.unreserve(wv.ID, cores)
		reason := fmt.Sprintf("dispatch to %s: %v", wv.ID, err)
		log.Warn("dispatch outcome unknown; fencing the attempt on its worker before a retry", "fence_token", token, "err", err)
		lt.Go(func(ctx context.Context) { m.fenceUnknownDispatch(ctx, wv, rec.JobID, rec.WorkflowID, token, reason) })
		return placeResult{outcome: outcomeSkipped, err: err}, false

	default:
		m.workers.unreserve(wv.ID, cores)
		failed := false
		m.update(func(tx *txn) {
			if w.rec.FenceToken == token && !w.rec.Status.Terminal() {
				m.retryLocked(tx, w, wv.ID, fmt.Sprintf("dispatch to %s: %v", wv.ID, err))
				failed = w.rec.Status == wire.WorkflowFailed
			}
		})
		log.Warn("dispatch failed", "fence_token", token, "err", err)
		if failed {
			return placeResult{outcome: outcomeFailed, err: err}, false
		}
		return placeResult{}, true
	}
}

// revertAssignment undoes the ASSIGNED state of a dispatch the worker never
// ran.
func (m *Manager) revertAssignment(w *workflowState, token uint64) {
	m.update(func(tx *txn) {
		if w.rec.FenceToken != token || w.rec.Status != wire.WorkflowAssigned {
			return
		}
		w.rec.Status = wire.WorkflowPending
		w.rec.Worker = ""
		w.rec.Attempts = max(w.rec.Attempts-1, 0)
		tx.touchWorkflow(w, true)
	})
}

// provision asks every peer to confirm req, in a round it shares with the
// placements running at the same time (provision_batch.go), and returns how
// many managers confirmed and how many answered at all, both counting this
// one.
func (m *Manager) provision(ctx context.Context, req *wire.ProvisionRequest) quorumAnswer {
	return m.batch.provision.Do(ctx, *req)
}

// commitToPeers tells every peer about a decided placement, in a round it
// shares with other placements, and waits (up to the quorum timeout) for
// them to persist it, so that whichever of them leads next knows it. A peer
// that misses it learns the placement from the worker in the next state
// sync.
func (m *Manager) commitToPeers(ctx context.Context, c *wire.ProvisionCommit) {
	m.batch.commit.Do(ctx, *c)
}

// callPeers sends msg to every peer at once and waits, up to the quorum
// timeout, for their answers. It is best effort: a peer that does not
// answer is logged and catches up in the next leader's state sync.
//
// Learners are sent it too: they must hold every placement once promoted.
func (m *Manager) callPeers(ctx context.Context, msg wire.Message, failure string, attrs ...any) {
	peers, release := m.group.Hold()
	defer release()
	ctx, cancel := context.WithTimeout(ctx, m.cfg.QuorumTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, id := range peers.Targets() {
		wg.Go(func() {
			if _, err := m.tr.Call(ctx, peers.Addr(id), msg); err != nil {
				m.log.Debug(failure, append([]any{"peer", id, "err", err}, attrs...)...)
			}
		})
	}
	wg.Wait()
}

// dispatch sends a WorkflowDispatch to a worker.
// dispatchResends is how many times a dispatch that timed out is sent
// again to the same live worker before the workflow goes elsewhere.
const dispatchResends = 3

func (m *Manager) dispatch(ctx context.Context, wv workerView, d *wire.WorkflowDispatch) (*wire.WorkflowDispatchAck, error) {
	var (
		resp wire.Message
		err  error
	)
	// A worker answers a dispatch only once the run is prepared (its blobs
	// read, its runner built), which on a loaded machine can outlast
	// DispatchTimeout while the run then starts all the same. Placing the
	// workflow elsewhere on a timeout would run it twice; the same
	// dispatch again is idempotent on the worker (same token: it answers
	// for the run it has, or prepares it once), so a timed-out dispatch is
	// sent again while the worker is alive, and only then given up.
	for sent := 1; ; sent++ {
		resp, err = m.sendDispatch(ctx, wv.Addr, d)
		if err == nil || !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil || sent > dispatchResends {
			break
		}
		if now, ok := m.workers.get(wv.ID); !ok || now.Gone {
			break
		}
		m.log.Info("dispatch not answered in time; sending it again", "job_id", d.JobID, "workflow_id", d.WorkflowID,
			"worker", wv.ID, "fence_token", d.FenceToken, "sent", sent)
	}
	if err != nil {
		return nil, fmt.Errorf("dispatch %s to %s: %w", d.WorkflowID, wv.ID, err)
	}
	ack, ok := resp.(*wire.WorkflowDispatchAck)
	if !ok {
		return nil, fmt.Errorf("dispatch %s to %s: unexpected reply %T", d.WorkflowID, wv.ID, resp)
	}
	return ack, nil
}

// handleProvisionRequest is a peer's side of quorum confirmation.
func (m *Manager) handleProvisionRequest(_ context.Context, from transport.Peer, req *wire.ProvisionRequest) (wire.Message, error) {
	if !m.isPeer(from.NodeID) {
		return nil, wire.Errorf(wire.CodeRejected, "%s is not a configured manager", from.NodeID)
	}
	confirm := &wire.ProvisionConfirm{JobID: req.JobID, WorkflowID: req.WorkflowID, ConfirmingNode: m.cfg.ID}
	if reason := m.staleLeaderReason(from.NodeID, req.FenceToken); reason != "" {
		confirm.Error = reason
		return confirm, nil
	}
	ok, reason := m.workers.confirm(req.TargetWorker, req.CoresRequired, req.Version)
	if wv, known := m.workers.get(req.TargetWorker); known {
		confirm.Version = wv.Version
	}
	confirm.Confirmed, confirm.Error = ok, reason
	if !ok {
		m.log.Info("provision refused", "job_id", req.JobID, "workflow_id", req.WorkflowID, "leader", from.NodeID, "reason", reason)
	}
	return confirm, nil
}

// staleLeaderReason says why a command from sender under token must not be
// followed, or "" if it may: a token from an older term than ours comes from
// a deposed leader, and in our own term only the leader we follow commands.
func (m *Manager) staleLeaderReason(sender string, token uint64) string {
	st := m.elector.Status()
	term := leadership.TokenTerm(token)
	switch {
	case term < st.Term:
		return fmt.Sprintf("stale term %d: this manager is in term %d", term, st.Term)
	case term == st.Term && st.Leader != "" && st.Leader != sender:
		return fmt.Sprintf("%s does not lead term %d; %s does", sender, term, st.Leader)
	}
	return ""
}

// handleProvisionCommit is a peer storing a decided placement.
func (m *Manager) handleProvisionCommit(_ context.Context, from transport.Peer, c *wire.ProvisionCommit) (wire.Message, error) {
	if !m.isPeer(from.NodeID) {
		return nil, wire.Errorf(wire.CodeRejected, "%s is not a configured manager", from.NodeID)
	}
	if reason := m.staleLeaderReason(from.NodeID, c.FenceToken); reason != "" {
		return nil, &wire.Error{Code: wire.CodeStaleFence, Message: reason}
	}
	if err := m.applyCommit(c); err != nil {
		return nil, wire.Errorf(wire.CodeUnavailable, "persist commit: %v", err)
	}
	return &wire.CommitAck{WorkflowID: c.WorkflowID, NodeID: m.cfg.ID}, nil
}

// applyCommit records a placement decided by the leader: the newest token
// wins. A commit for a job this manager has not heard of is kept aside until
// the submission arrives.
func (m *Manager) applyCommit(c *wire.ProvisionCommit) error {
	return m.update(func(tx *txn) {
		m.applyCommitLocked(tx, c)
	})
}

func (m *Manager) applyCommitLocked(tx *txn, c *wire.ProvisionCommit) {
	w, ok := m.wfs[c.WorkflowID]
	if !ok || w.rec.JobID != c.JobID {
		m.keepOrphanCommitLocked(c)
		return
	}
	if c.FenceToken <= w.rec.FenceToken || w.rec.Status.Terminal() {
		return
	}
	w.rec.Worker = c.TargetWorker
	w.rec.FenceToken = c.FenceToken
	if c.Attempts > 0 {
		w.rec.Attempts = c.Attempts
	} else {
		w.rec.Attempts++
	}
	w.rec.Status = wire.WorkflowAssigned
	tx.touchWorkflow(w, true)
}
