package manager

import (
	"context"
	"fmt"
	"slices"
	"time"

	"tempest/internal/lifecycle"
	"tempest/internal/store"
	"tempest/rainstorm"
	"tempest/wire"
)

// buildDispatch returns the dispatch for the next attempt of rec under
// token. The first attempt's encoding is kept (returned as original, stored
// as DispatchBytes) and every retry decodes exactly those bytes and changes
// only the fence token and attempt number, so a retry runs precisely what
// was first sent (the seed's "retry data preserved at dispatch").
func (m *Manager) buildDispatch(rec *store.WorkflowRecord, token uint64) (d *wire.WorkflowDispatch, original []byte, err error) {
	if len(rec.DispatchBytes) == 0 {
		d = &wire.WorkflowDispatch{
			JobID:      rec.JobID,
			WorkflowID: rec.WorkflowID,
			Workflow:   rec.Spec,
			Cores:      rec.Spec.Cores,
			Timeout:    rec.Spec.Timeout,
			FenceToken: token,
			Attempt:    rec.Attempts + 1,
		}
		original, err = wire.Marshal(d)
		if err != nil {
			return nil, nil, fmt.Errorf("encode dispatch %s: %w", rec.WorkflowID, err)
		}
		return d, original, nil
	}
	d = new(wire.WorkflowDispatch)
	if err := wire.Unmarshal(rec.DispatchBytes, d); err != nil {
		return nil, nil, fmt.Errorf("decode kept dispatch of %s: %w", rec.WorkflowID, err)
	}
	d.FenceToken = token
	d.Attempt = rec.Attempts + 1
	if d.Workflow.Params, _, err = m.restParams(rec, d.Workflow.Params); err != nil {
		return nil, nil, fmt.Errorf("the rest of %s's load after its lost attempts: %w", rec.WorkflowID, err)
	}
	return d, nil, nil
}

// retryLocked records that the current attempt of w failed on worker and
// either puts the workflow back to PENDING for another worker (excluding
// this one from now on) or, once MaxWorkflowRetries retries have been used,
// fails it. The new attempt gets a new fence token when it is placed.
func (m *Manager) retryLocked(tx *txn, w *workflowState, worker, reason string) {
	if w.rec.Status.Terminal() {
		return
	}
	if worker != "" && !slices.Contains(w.rec.Excluded, worker) {
		w.rec.Excluded = append(slices.Clip(w.rec.Excluded), worker)
	}
	log := m.log.With("job_id", w.rec.JobID, "workflow_id", w.rec.WorkflowID, "worker", worker)
	// Attempts taken back through no fault of the workflow (requeueLocked)
	// are not failures: a pipeline task requeued after every leader change
	// of a loaded host used to fail on its first dispatch error.
	failures := w.rec.Attempts - w.rec.Requeues
	left := true
	if m.resumerOf(&w.rec.Spec) != nil {
		m.loseAttemptLocked(&w.rec, worker, reason)
		if n := len(w.rec.Lost); n > 0 {
			la := w.rec.Lost[n-1]
			log.Info("attempt lost; its reported counts are kept and a retry runs what is left",
				"attempt", la.Attempt, "completed", la.CompletedCount, "failed", la.FailedCount, "iterations", la.Iterations, "elapsed", la.Elapsed)
		}
		var err error
		if _, left, err = m.restParams(&w.rec, w.rec.Spec.Params); err != nil {
			log.Warn("cannot work out what is left of the load; running it whole", "err", err)
			left = true
		}
	}
	switch {
	case !left:
		// The lost attempt had run all of the load by its last report.
		w.rec.Status = wire.WorkflowCompleted
		w.rec.Error = ""
		log.Info("workflow completed by its lost attempts; nothing is left to retry", "reason", reason)
	case failures > m.cfg.MaxWorkflowRetries:
		w.rec.Status = wire.WorkflowFailed
		w.rec.Error = fmt.Sprintf("failed after %d attempts; last: %s", failures, reason)
		log.Warn("workflow failed", "attempts", w.rec.Attempts, "reason", reason)
		// A pipeline cannot finish without each of its tasks: its job
		// ends now, not at its timeout.
		if m.rsTaskFailedLocked(tx, w, wire.WorkflowFailed, w.rec.Error) {
			return
		}
	default:
		w.rec.Status = wire.WorkflowPending
		w.rec.Error = reason
		log.Info("workflow will be retried", "attempts", w.rec.Attempts, "reason", reason)
		m.kick()
	}
	w.rec.Worker = ""
	w.rec.Cores = nil
	tx.touchWorkflow(w, true)
}

// requeueLocked puts w back to PENDING after its worker was declared dead,
// without counting that against its retries or excluding the worker. For a
// pipeline task the death says nothing about the task, and under load SWIM
// declares live workers dead: counting those would fail a pipeline after a
// few false deaths, and excluding them would leave a small cluster with no
// worker to place the task on. The store's fencing keeps a replaced
// incarnation from publishing, so placing it again at once is safe.
func (m *Manager) requeueLocked(tx *txn, w *workflowState, reason string) {
	if w.rec.Status.Terminal() {
		return
	}
	w.rec.Status = wire.WorkflowPending
	w.rec.Error = reason
	w.rec.Worker = ""
	w.rec.Cores = nil
	if w.rec.Attempts > w.rec.Requeues {
		w.rec.Requeues++
	}
	m.log.Info("workflow will be placed again; its worker is gone", "job_id", w.rec.JobID, "workflow_id", w.rec.WorkflowID, "attempts", w.rec.Attempts, "reason", reason)
	m.kick()
	tx.touchWorkflow(w, true)
}

// notItsFaultLocked runs w again after something that says nothing about
// w itself: its worker stopped it, or a new leader found it lost. A
// pipeline task is placed again at once (requeueLocked): a pipeline fails
// with any of its tasks, and on a loaded host these come one after another,
// so counting them ended pipelines that were doing fine (issue 23's chaos
// scenario: a task failed "after 4 attempts" of its workers fencing
// themselves, another after 7 leader changes). A task whose run fails ends
// its job at once (rsTaskFailedLocked), so its retries never counted
// anything else. Any other workflow is retried as before (retryLocked).
func (m *Manager) notItsFaultLocked(tx *txn, w *workflowState, worker, reason string) {
	if w.rec.Spec.Type == rainstorm.TypeName {
		m.requeueLocked(tx, w, reason)
		return
	}
	m.retryLocked(tx, w, worker, reason)
}

// workerLost retries, elsewhere, every workflow the leader had placed on a
// worker that SWIM declared dead, once WorkerFenceAfter has passed since
// the worker was last heard from: a worker that is only cut off stops its
// runs by then (self-fencing), so the retry does not double the load.
func (m *Manager) workerLost(worker, reason string) {
	lt := m.leading()
	if lt == nil {
		return
	}
	wait := m.fenceWait(worker)
	if wait <= 0 {
		m.retryLost(worker, reason)
		return
	}
	// RainStorm tasks go again at once: a cut-off incarnation that still
	// runs can publish nothing once the replacement holds a newer fence
	// token (the checkpoint store refuses it), and the pipeline waits for
	// the task meanwhile.
	m.rsRetryLost(worker, reason)
	m.log.Info("waiting for the lost worker to fence itself before re-dispatching its workflows", "worker", worker, "wait", wait)
	lt.Go(func(ctx context.Context) {
		if !lifecycle.Sleep(ctx, wait) {
			return
		}
		if wv, ok := m.workers.get(worker); ok && !wv.Gone {
			return // it came back: its runs go on, or it reports them stopped
		}
		m.retryLost(worker, reason)
	})
}

// fenceWait is how much longer to wait before re-running a lost worker's
// workflows: WorkerFenceAfter from when it was last heard from, or from
// when this manager became leader if that is later. This manager may not
// have heard from the worker for long while the previous leader still
// did: that leader's answers keep the worker running until fence_after
// past its last confirmation by a majority, which came before the
// majority elected this one (docs/datacenter.md, self-fencing).
func (m *Manager) fenceWait(worker string) time.Duration {
	wv, ok := m.workers.get(worker)
	if !ok || wv.LastSeen.IsZero() {
		return m.cfg.WorkerFenceAfter
	}
	from := wv.LastSeen
	if since := time.Unix(0, m.leadSince.Load()); since.After(from) {
		from = since
	}
	return from.Add(m.cfg.WorkerFenceAfter).Sub(m.clock.Now())
}

func (m *Manager) retryLost(worker, reason string) {
	if m.leading() == nil {
		return
	}
	m.update(func(tx *txn) {
		for _, w := range m.wfs {
			if w.rec.Worker == worker && (w.rec.Status == wire.WorkflowAssigned || w.rec.Status == wire.WorkflowRunning) {
				m.retryLocked(tx, w, worker, reason)
			}
		}
	})
}
