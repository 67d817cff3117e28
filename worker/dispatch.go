package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"tempest/leadership"
	"tempest/transport"
	"tempest/wire"
	"tempest/workflow"
)

// execution is one workflow on this worker, from an accepted dispatch until
// its final progress is acknowledged.
type execution struct {
	jobID      string
	workflowID string
	name       string
	cores      []int
	log        *slog.Logger
	cancel     context.CancelCauseFunc
	// done is closed once the runner has returned and its cores are free.
	done chan struct{}
	// notify (capacity 1) tells the progress sender newer progress waits.
	notify chan struct{}

	// Guarded by Worker.mu.
	fence uint64
	// placement is the proof, from fence's dispatch, that its leader
	// placed this attempt here, handed back in every progress
	// (wire.PlacementProof).
	placement *wire.PlacementProof
	blobs     []string // sums of the blobs its params name (blobs.go)
	latest    wire.WorkflowProgress
	seq       uint64 // bumped with latest
	finished  bool
}

func (e *execution) signal() {
	select {
	case e.notify <- struct{}{}:
	default:
	}
}

// stopReason is the cause a workflow's context is cancelled with; it decides
// the status its final progress reports.
type stopReason struct {
	status wire.WorkflowStatus
	reason string
}

func (s *stopReason) Error() string { return s.reason }

// handleDispatch serves WorkflowDispatch. Refusals the manager should act on
// by choosing another worker (no room, draining, unknown type) are an ack
// with Accepted false; a stale fence token is a typed ErrStaleFence, since
// the sender is a deposed leader and must not retry anywhere, and a missing
// one (0) a typed CodeRejected.
func (w *Worker) handleDispatch(ctx context.Context, from transport.Peer, d *wire.WorkflowDispatch) (wire.Message, error) {
	if d.Worker != "" && d.Worker != w.cfg.ID {
		return nil, wire.Errorf(wire.CodeRejected, "dispatch of %s is addressed to worker %s, not %s", d.WorkflowID, d.Worker, w.cfg.ID)
	}
	spec := d.Workflow
	if d.Cores > 0 {
		spec.Cores = d.Cores
	}
	if problem := checkDispatch(d, spec); problem != "" {
		return w.refuse(d, "%s", problem), nil
	}

	// Cheap checks first, then the registry (which decodes params) outside
	// the lock, then everything again under it, since the world may have
	// moved in between.
	w.mu.Lock()
	reply, decided, err := w.admitLocked(d, false)
	w.mu.Unlock()
	if decided {
		return reply, err
	}
	spec, blobs, err := w.attachBlobs(ctx, from, spec)
	if err != nil {
		return w.refuse(d, "read blob from %s: %v", from.NodeID, err), nil
	}
	runner, err := w.newRunner(d, spec)
	if err != nil {
		return w.refuse(d, "%v", err), nil
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	if reply, decided, err := w.admitLocked(d, true); decided {
		return reply, err
	}
	cores, err := w.cores.AllocateIn(d.WorkflowID, d.Slot, spec.Cores)
	if err != nil {
		return w.refuseLocked(d, "%v", err), nil
	}
	w.contact.touch(w.now()) // a dispatch comes from a leader
	e := w.startLocked(d, spec, runner, cores)
	e.blobs = blobs
	e.log.Info("workflow started", "type", spec.Type, "cores", cores, "slot", d.Slot, "fence", d.FenceToken, "attempt", d.Attempt)
	return &wire.WorkflowDispatchAck{WorkflowID: d.WorkflowID, Accepted: true, CoresAssigned: cores, AvailableCores: w.cores.Available()}, nil
}

func checkDispatch(d *wire.WorkflowDispatch, spec wire.WorkflowSpec) string {
	switch {
	case d.JobID == "":
		return "dispatch has no job id"
	case d.WorkflowID == "":
		return "dispatch has no workflow id"
	case len(d.WorkflowID) > 2*workflow.MaxNameLen || len(d.JobID) > 2*workflow.MaxNameLen:
		return "job or workflow id too long"
	case spec.Cores < 1:
		return fmt.Sprintf("dispatch asks for %d cores", spec.Cores)
	}
	return ""
}

// admitLocked decides a dispatch that needs no new run: refused (draining,
// stale) or a repeat of one already running. decided is false when the
// dispatch may start a run; commit says the caller will then start it.
func (w *Worker) admitLocked(d *wire.WorkflowDispatch, commit bool) (reply wire.Message, decided bool, err error) {
	switch {
	case w.stopping:
		return w.refuseLocked(d, "worker %s is shutting down", w.cfg.ID), true, nil
	case !w.running:
		return w.refuseLocked(d, "worker %s is starting up", w.cfg.ID), true, nil
	case w.draining:
		return w.refuseLocked(d, "worker %s is draining: not accepting new workflows", w.cfg.ID), true, nil
	case w.health.state == wire.WorkerDraining:
		return w.refuseLocked(d, "worker %s is under critical pressure (%s): not accepting new workflows", w.cfg.ID, w.health.reason), true, nil
	}
	// A dispatch issued in a term older than a leader this worker has
	// already answered is a deposed leader's, arriving late: the newer
	// leader synced with this worker without it and may have placed the
	// workflow elsewhere, so running it would run the workflow twice.
	if tt, known := leadership.TokenTerm(d.FenceToken), w.leader.knownTerm(); tt < known {
		w.log.Info("dispatch refused: issued in an older term than the leader's", "job_id", d.JobID, "workflow_id", d.WorkflowID, "token_term", tt, "term", known)
		return nil, true, wire.Errorf(wire.CodeStaleFence, "workflow %s: dispatch issued in term %d; a leader of term %d is known", d.WorkflowID, tt, known)
	}
	if err := w.fences.CheckDispatch(d.WorkflowID, d.FenceToken); err != nil {
		w.log.Info("dispatch refused by fencing", "job_id", d.JobID, "workflow_id", d.WorkflowID, "err", err)
		return nil, true, err
	}
	e, ok := w.execs[d.WorkflowID]
	if !ok {
		return nil, false, nil
	}
	if !e.finished {
		// The same dispatch again (a retried call), or a newer leader
		// re-dispatching work it found running here: keep running, answer
		// to the newer token from now on.
		w.fences.Start(d.WorkflowID, d.FenceToken)
		if d.FenceToken > e.fence {
			e.log.Info("running workflow adopted by newer dispatch", "fence", d.FenceToken, "previous_fence", e.fence)
			e.fence, e.placement = d.FenceToken, d.Placement
			e.latest.FenceToken, e.latest.Placement = d.FenceToken, d.Placement
		}
		return &wire.WorkflowDispatchAck{WorkflowID: d.WorkflowID, Accepted: true, CoresAssigned: slices.Clone(e.cores), AvailableCores: w.cores.Available()}, true, nil
	}
	// A newer attempt of a workflow whose previous run here still waits for
	// its final progress to be acknowledged: the manager has moved on, so
	// that final is abandoned and the new run takes the slot.
	if commit {
		e.log.Info("abandoning unacknowledged final progress for a newer attempt", "fence", d.FenceToken)
		w.forgetLocked(e)
	}
	return nil, false, nil
}

func (w *Worker) refuse(d *wire.WorkflowDispatch, format string, args ...any) wire.Message {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.refuseLocked(d, format, args...)
}

func (w *Worker) refuseLocked(d *wire.WorkflowDispatch, format string, args ...any) wire.Message {
	reason := fmt.Sprintf(format, args...)
	w.log.Info("dispatch refused", "job_id", d.JobID, "workflow_id", d.WorkflowID, "reason", reason)
	return &wire.WorkflowDispatchAck{WorkflowID: d.WorkflowID, Accepted: false, Error: reason, AvailableCores: w.cores.Available()}
}

// startLocked records the execution and starts its runner and progress
// sender. Both are the Owner's; spawn cannot refuse them here, because
// shutdown sets stopping (checked false by admitLocked under this same lock
// hold) before it closes the Owner.
func (w *Worker) startLocked(d *wire.WorkflowDispatch, spec wire.WorkflowSpec, runner workflow.Runner, cores []int) *execution {
	ctx, cancel := context.WithCancelCause(w.ctx)
	e := &execution{
		jobID:      d.JobID,
		workflowID: d.WorkflowID,
		name:       spec.Name,
		cores:      cores,
		log:        w.log.With("job_id", d.JobID, "workflow_id", d.WorkflowID),
		cancel:     cancel,
		done:       make(chan struct{}),
		notify:     make(chan struct{}, 1),
		fence:      d.FenceToken,
		placement:  d.Placement,
	}
	e.latest = w.progressLocked(e, workflow.Snapshot{}, wire.WorkflowRunning)
	w.execs[d.WorkflowID] = e
	w.fences.Start(d.WorkflowID, d.FenceToken)
	w.bumpLocked()

	timeout := d.Timeout
	if timeout <= 0 {
		timeout = spec.Timeout
	}
	w.spawn(nil, func() { w.execute(ctx, e, runner, timeout) })
	w.spawn(nil, func() { w.progressLoop(e) })
	return e
}

// execute runs the workflow and records how it ended.
func (w *Worker) execute(ctx context.Context, e *execution, runner workflow.Runner, timeout time.Duration) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, timeout,
			&stopReason{status: wire.WorkflowFailed, reason: fmt.Sprintf("timed out after %s", timeout)})
		defer cancel()
	}
	env := workflow.Env{
		Cores:          slices.Clone(e.cores),
		Report:         func(s workflow.Snapshot) { w.report(e, s) },
		ReportInterval: w.cfg.ProgressInterval,
		Logger:         e.log,
	}
	res, err := runSafely(ctx, runner, env)
	status, reason := outcome(ctx, err)
	var perm *workflow.PermanentError
	w.finish(e, res.Snapshot, status, reason, status == wire.WorkflowFailed && errors.As(err, &perm))
}

// runSafely turns a panicking workflow type into a failed workflow instead
// of a dead worker that takes every other workflow with it.
func runSafely(ctx context.Context, r workflow.Runner, env workflow.Env) (res workflow.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("workflow panicked: %v", p)
		}
	}()
	return r.Run(ctx, env)
}

func outcome(ctx context.Context, err error) (wire.WorkflowStatus, string) {
	if err == nil {
		return wire.WorkflowCompleted, ""
	}
	if sr := (*stopReason)(nil); errors.As(err, &sr) {
		return sr.status, sr.reason // the runner says how it ended
	}
	if ctx.Err() == nil {
		return wire.WorkflowFailed, err.Error() // the workflow's own failure
	}
	// Stopped from outside: the cause says by whom. Without one, the
	// context Run was given ended: a hard stop.
	sr := errShutdown
	errors.As(context.Cause(ctx), &sr)
	return sr.status, sr.reason
}

// finish frees the workflow's cores and turns its latest progress into the
// final one, which the progress sender delivers.
//
// permanent says another attempt would fail the same way
// (workflow.PermanentError), so the manager does not retry it.
func (w *Worker) finish(e *execution, snap workflow.Snapshot, status wire.WorkflowStatus, reason string, permanent bool) {
	steps := stepStats(e, snap)
	w.mu.Lock()
	w.cores.Free(e.workflowID)
	w.fences.Finish(e.workflowID, w.now())
	p := w.progressLocked(e, snap, status)
	p.StepStats, p.Final, p.Error, p.Permanent = steps, true, reason, permanent
	e.latest, e.finished = p, true
	e.seq++
	w.bumpLocked()
	w.mu.Unlock()
	close(e.done)
	e.signal()
	attrs := []any{"status", status, "completed", snap.Completed, "failed", snap.Failed, "elapsed", snap.Elapsed}
	if reason != "" {
		attrs = append(attrs, "reason", reason)
	}
	e.log.Info("workflow finished", attrs...)
}

// stopLocked cancels a running workflow, whose final progress will then
// carry status and reason. It reports whether the workflow was running.
func (w *Worker) stopLocked(e *execution, status wire.WorkflowStatus, reason string) bool {
	if e.finished {
		return false
	}
	e.cancel(&stopReason{status: status, reason: reason})
	return true
}

// forgetLocked drops an execution whose final progress is acknowledged (or
// abandoned).
func (w *Worker) forgetLocked(e *execution) {
	if w.execs[e.workflowID] == e {
		delete(w.execs, e.workflowID)
		w.bumpLocked()
	}
}

// countLocked counts executions: running ones, or with finishedToo also
// those whose final progress is still undelivered.
func (w *Worker) countLocked(finishedToo bool) int {
	n := 0
	for _, e := range w.execs {
		if finishedToo || !e.finished {
			n++
		}
	}
	return n
}
