package manager

import (
	"context"
	"strings"
	"time"

	"tempest/internal/store"
	"tempest/jobs"
	"tempest/wire"
	"tempest/workflow"
)

// ThresholdAbortPrefix starts the error of a job that an abort_on_fail
// threshold ended. Such a job is FAILED (it did not run to its end, and a
// status reader must not take it for a cancel by a person), and the API
// marks it with threshold_abort so that the CLI exits 1 (thresholds) rather
// than 2 (job failed). The error travels to peers with the job's status, so
// every manager derives the same flag after a failover.
const ThresholdAbortPrefix = wire.ThresholdAbortPrefix

// abortCheckInterval is the least time between two mid-run evaluations of a
// workflow's abort_on_fail thresholds. Each merges the workflow's histograms
// under the manager's lock, while progress arrives every 100 ms.
const abortCheckInterval = time.Second

// thresholdState is what a workflowState remembers about its thresholds.
type thresholdState struct {
	// evaluated and of say which progress rec.Thresholds were computed
	// from: a workflow persisted again without new progress (a replicated
	// status, a job-level change) is not merged again.
	evaluated bool
	of        progressKey
	// nextAbortCheck throttles mid-run checks; aborting is set once an
	// abort is under way, so later reports do not start another.
	nextAbortCheck time.Time
	aborting       bool
}

// progressKey identifies one progress report of one attempt.
type progressKey struct {
	status            wire.WorkflowStatus
	fence             uint64
	timestamp         int64
	completed, failed int64
	elapsed           time.Duration
	steps             int
}

func progressKeyOf(rec *store.WorkflowRecord) progressKey {
	p := &rec.LastProgress
	return progressKey{status: rec.Status, fence: rec.FenceToken, timestamp: p.Timestamp,
		completed: p.CompletedCount, failed: p.FailedCount, elapsed: p.Elapsed, steps: len(p.StepStats)}
}

// evaluateThresholdsLocked stores the verdicts of an ended workflow's
// thresholds on its final progress. It runs for every workflow a change
// persists, so it covers each way a workflow ends (completion, retries
// exhausted, cancel, timeout, abort, a peer's replicated status) and the
// late final report of an attempt cancelled mid-run, which replaces the
// verdicts with ones on complete counts.
func (m *Manager) evaluateThresholdsLocked(w *workflowState) {
	rec := &w.rec
	// A shard's verdicts would judge part of the load: statuses judge the
	// merged shards instead (shardsStatus).
	if len(rec.Spec.Thresholds) == 0 || !rec.Status.Terminal() || len(groupMembersLocked(w)) > 1 {
		return
	}
	key := progressKeyOf(rec)
	if w.thresholds.evaluated && w.thresholds.of == key {
		return
	}
	p := &rec.LastProgress
	rec.Thresholds = thresholdsLocked(w).Evaluate(p.StepStats, p.CompletedCount, p.FailedCount, p.Elapsed)
	w.thresholds.evaluated, w.thresholds.of = true, key
	if failed := workflow.Failed(rec.Thresholds); len(failed) > 0 {
		m.log.Info("thresholds failed", "job_id", rec.JobID, "workflow_id", rec.WorkflowID,
			"failed", len(failed), "of", len(rec.Thresholds), "first", describeResult(failed[0]))
	}
}

// checkAbortLocked evaluates a running workflow's abort_on_fail thresholds
// on its latest progress, at most every abortCheckInterval, and ends the job
// FAILED when one fails. A threshold with no data yet is not judged: early
// in a run it only means nothing was measured. The job is ended on a
// goroutine of the leader term, as a cancel from a client would be: it
// waits for its terminal state to be durable and then tells every worker,
// which must not happen under the lock or inside a worker's progress call.
func (m *Manager) checkAbortLocked(tx *txn, w *workflowState) {
	lt := tx.leading
	if lt == nil || w.thresholds.aborting || w.rec.Status.Terminal() || w.job.rec.Status.Terminal() {
		return
	}
	if w.job.rec.Submission.Origin != "" {
		// A gate drives this job over several datacenters, each with part
		// of the load: only the gate sees the whole, and judges it.
		return
	}
	abort := thresholdsLocked(w).AbortOnFail()
	if abort.Len() == 0 {
		return
	}
	now := m.clock.Now()
	if now.Before(w.thresholds.nextAbortCheck) {
		return
	}
	w.thresholds.nextAbortCheck = now.Add(abortCheckInterval)
	p := &w.rec.LastProgress
	steps, completed, failed, elapsed := p.StepStats, p.CompletedCount, p.FailedCount, p.Elapsed
	if shards := groupMembersLocked(w); len(shards) > 1 {
		// A shard carries 1/N of the load: judge the shards together, or
		// "rps > 1000" would fail on every one of them.
		steps, completed, failed = nil, 0, 0
		for _, s := range shards {
			sp := &s.rec.LastProgress
			steps = append(steps, sp.StepStats...)
			completed, failed, elapsed = completed+sp.CompletedCount, failed+sp.FailedCount, max(elapsed, sp.Elapsed)
		}
	}
	if reason, r, hit := jobs.AbortReason(w.rec.Spec.Name, abort.Evaluate(steps, completed, failed, elapsed)); hit {
		w.thresholds.aborting = true
		jobID := w.rec.JobID
		m.log.Warn("abort_on_fail threshold failed; ending the job", "job_id", jobID,
			"workflow_id", w.rec.WorkflowID, "threshold", r.Expr, "step", r.Step, "actual", r.Actual)
		tx.afterCommit(func() {
			lt.Go(func(ctx context.Context) {
				if _, err := m.cancelJob(ctx, jobID, wire.JobFailed, reason); err != nil {
					m.log.Warn("end job after threshold failure", "job_id", jobID, "err", err)
				}
			})
		})
		return
	}
}

// thresholdAbort reports whether a job ended because an abort_on_fail
// threshold failed.
func thresholdAbort(status wire.JobStatus, reason string) bool {
	return status == wire.JobFailed && strings.HasPrefix(reason, ThresholdAbortPrefix)
}

func describeResult(r wire.ThresholdResult) string {
	s := r.Expr + " (actual " + r.Actual + ")"
	if r.Step != "" {
		s += " on step " + r.Step
	}
	return s
}
