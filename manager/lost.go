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
	"tempest/workflow"
)

// A load workflow's attempt that is lost (its worker died, or its dispatch
// broke and it was fenced) has sent requests the target received. Its last
// reported counts and histograms are kept as a part of the workflow, like a
// shard, and the retry runs only what is left of the load
// (docs/load-tests.md, "When a worker dies").

// resumerOf is w's type when it continues a lost attempt's load instead of
// repeating it.
func (m *Manager) resumerOf(spec *wire.WorkflowSpec) workflow.Resumer {
	t, ok := m.reg.Lookup(spec.Type)
	if !ok {
		return nil
	}
	r, _ := t.(workflow.Resumer)
	return r
}

// attemptProgress is the current attempt's own progress.
func attemptProgress(rec *store.WorkflowRecord) wire.WorkflowProgress {
	if len(rec.Lost) == 0 {
		return rec.LastProgress
	}
	if rec.AttemptProgress == nil {
		return wire.WorkflowProgress{}
	}
	return *rec.AttemptProgress
}

// loseAttemptLocked keeps what rec's current attempt reported, on worker,
// as a lost attempt, and leaves the record with no current attempt's
// progress: the counts shown are the lost attempts' from now on, until the
// retry reports.
func (m *Manager) loseAttemptLocked(rec *store.WorkflowRecord, worker, reason string) {
	if worker == "" {
		worker = rec.Worker
	}
	if i := lostIndex(rec.Lost, rec.FenceToken); i >= 0 || rec.FenceToken == 0 {
		return // already kept (a retry of a retry's bookkeeping)
	}
	la := wire.LostAttempt{Attempt: rec.Attempts, Worker: worker, FenceToken: rec.FenceToken, Reason: reason, At: m.clock.Now().UnixNano()}
	if p := attemptProgress(rec); p.FenceToken == rec.FenceToken {
		fillLost(&la, &p)
	}
	rec.Lost = append(slices.Clip(rec.Lost), la)
	rec.AttemptProgress = nil
	foldLost(rec)
}

// lostWordLocked takes a report from an attempt kept as lost: the worker
// was only cut off, or its dispatch's outcome was unknown, and it ran on
// until fenced. Counts are cumulative, so its newer word replaces what
// was kept; it reports whether rec changed.
func lostWordLocked(rec *store.WorkflowRecord, p *wire.WorkflowProgress, worker string) (known, changed bool) {
	i := lostIndex(rec.Lost, p.FenceToken)
	if i < 0 || rec.Lost[i].Worker != worker {
		return false, false
	}
	la := rec.Lost[i]
	if p.Timestamp < la.Reported || p.CompletedCount+p.FailedCount < la.CompletedCount+la.FailedCount {
		return true, false // older than what is kept
	}
	fillLost(&la, p)
	// Copied, not changed in place: a placement may be reading the slice
	// of a copy of this record outside the lock.
	rec.Lost = slices.Clone(rec.Lost)
	rec.Lost[i] = la
	foldLost(rec)
	return true, true
}

func lostIndex(lost []wire.LostAttempt, token uint64) int {
	if token == 0 {
		return -1
	}
	return slices.IndexFunc(lost, func(la wire.LostAttempt) bool { return la.FenceToken == token })
}

func fillLost(la *wire.LostAttempt, p *wire.WorkflowProgress) {
	la.CompletedCount, la.FailedCount = p.CompletedCount, p.FailedCount
	la.DroppedIterations, la.Iterations = p.DroppedIterations, p.Iterations
	la.Elapsed, la.Reported = p.Elapsed, p.Timestamp
	la.Steps = nil
	if len(p.StepStats) > 0 {
		// Encoding plain structs fails only on a bug; the counts stay.
		la.Steps, _ = wire.Marshal(&wire.LostSteps{Steps: p.StepStats})
	}
}

// lostSteps decodes a lost attempt's step statistics; undecodable ones
// (which only a bug makes) count as none.
func lostSteps(la *wire.LostAttempt) []wire.StepStats {
	if len(la.Steps) == 0 {
		return nil
	}
	var ls wire.LostSteps
	if err := wire.Unmarshal(la.Steps, &ls); err != nil {
		return nil
	}
	return ls.Steps
}

// foldLost makes rec.LastProgress the current attempt's progress with every
// lost attempt's counts added and step statistics merged, as shards are.
// Elapsed adds up too, since the attempts ran one after the other and the
// retry runs what is left of the duration.
func foldLost(rec *store.WorkflowRecord) {
	if len(rec.Lost) == 0 {
		return
	}
	cur := attemptProgress(rec)
	if cur.FenceToken != 0 && lostIndex(rec.Lost, cur.FenceToken) < 0 {
		rec.AttemptProgress = &cur
	}
	p := cur
	steps := slices.Clone(cur.StepStats)
	for _, la := range rec.Lost {
		p.CompletedCount += la.CompletedCount
		p.FailedCount += la.FailedCount
		p.DroppedIterations += la.DroppedIterations
		p.Iterations += la.Iterations
		p.Elapsed += la.Elapsed
		steps = append(steps, lostSteps(&la)...)
	}
	if merged, err := workflow.MergeStepStats(nil, steps); err == nil {
		p.StepStats = merged
	}
	// Marks p as folded (keepProgress); the statistics are in rec.Lost
	// once, not twice on disk.
	p.Lost = lostSummaries(rec.Lost)
	rec.LastProgress = p
}

// doneByLost is how much of the load the lost attempts ran.
func doneByLost(lost []wire.LostAttempt) workflow.Done {
	var d workflow.Done
	for _, la := range lost {
		d.Elapsed += la.Elapsed
		d.Iterations += la.Iterations
	}
	return d
}

// restParams are the params of a retry of rec: what is left of its load
// after its lost attempts, or the params as they are for a workflow that
// repeats its run. left is false when nothing is.
func (m *Manager) restParams(rec *store.WorkflowRecord, params []byte) (rest []byte, left bool, err error) {
	if len(rec.Lost) == 0 {
		return params, true, nil
	}
	r := m.resumerOf(&rec.Spec)
	if r == nil {
		return params, true, nil
	}
	return r.Rest(params, doneByLost(rec.Lost))
}

// lostSummaries are lost attempts as gates and clients see them: their
// statistics are already folded into the workflow's.
func lostSummaries(lost []wire.LostAttempt) []wire.LostAttempt {
	if len(lost) == 0 {
		return nil
	}
	out := slices.Clone(lost)
	for i := range out {
		out[i].Steps = nil
	}
	return out
}

// fenceUnknownDispatch settles a dispatch whose outcome is unknown (the
// call failed after it may have reached the worker, which may be running
// it): the attempt is cancelled on its worker under its own token before
// the workflow is retried, so two attempts never load the target at once
// and the first one's counts are kept rather than lost.
//
// The cancel's answer says which: a worker that stopped the run reports
// it CANCELLED with its final counts (retrying that report until a leader
// takes it), and that report retries the workflow, kept as a lost attempt
// whose iterations the retry leaves out, so the counts stay exact. A
// worker that ran nothing tombstones the token, so the dispatch is refused
// if it arrives late, and the workflow is retried at once. One that cannot
// be reached fences itself within WorkerFenceAfter, as a cut-off worker
// does; the retry waits that long. A report of the attempt before the
// cancel settles it too: it runs there, and says so.
func (m *Manager) fenceUnknownDispatch(ctx context.Context, wv workerView, jobID, workflowID string, token uint64, reason string) {
	settled := func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		w, ok := m.wfs[workflowID]
		return !ok || w.rec.FenceToken != token || w.rec.Status != wire.WorkflowAssigned
	}
	if settled() {
		return
	}
	log := m.log.With("job_id", jobID, "workflow_id", workflowID, "worker", wv.ID, "fence_token", token)
	cctx, cancel := context.WithTimeout(ctx, m.cfg.DispatchTimeout+workerCancelWait)
	resp, err := m.tr.Call(cctx, wv.Addr, &wire.CancelJob{JobID: jobID, WorkflowID: workflowID, FenceToken: token,
		Reason: "its dispatch's outcome was unknown; fenced before a retry"})
	cancel()
	switch ack, _ := resp.(*wire.CancelAck); {
	case err != nil:
		log.Warn("could not fence an attempt whose dispatch's outcome is unknown; waiting for the worker to fence itself", "err", err, "wait", m.cfg.WorkerFenceAfter)
		if !lifecycle.Sleep(ctx, m.cfg.WorkerFenceAfter) {
			return
		}
	case ack != nil && ack.WorkflowsCancelled > 0:
		log.Info("attempt whose dispatch's outcome was unknown was running; stopped, its final report retries it")
		return
	default:
		log.Info("attempt whose dispatch's outcome was unknown never ran; fenced, retrying")
	}
	m.update(func(tx *txn) {
		w, ok := m.wfs[workflowID]
		if ok && w.rec.FenceToken == token && w.rec.Status == wire.WorkflowAssigned {
			m.retryLocked(tx, w, wv.ID, reason)
		}
	})
}

// workerCancelWait is how long a worker waits for a cancelled run to stop
// before it answers (worker.cancelWait).
const workerCancelWait = 2 * time.Second

// fencedFirst reports whether a dispatch of w whose outcome is unknown is
// fenced before a retry. A pipeline task is retried at once: the checkpoint
// store refuses the older incarnation, and the pipeline waits for the task.
func fencedFirst(spec *wire.WorkflowSpec) bool {
	return spec.Type != rainstorm.TypeName
}

func describeLost(la wire.LostAttempt) string {
	return fmt.Sprintf("attempt %d on %s lost (%s): %d completed and %d failed kept", la.Attempt, la.Worker, la.Reason, la.CompletedCount, la.FailedCount)
}

// sameLost reports whether a and b keep the same counts of the same
// attempts.
func sameLost(a, b []wire.LostAttempt) bool {
	return slices.EqualFunc(a, b, func(x, y wire.LostAttempt) bool {
		return x.FenceToken == y.FenceToken && x.Reported == y.Reported &&
			x.CompletedCount == y.CompletedCount && x.FailedCount == y.FailedCount
	})
}
