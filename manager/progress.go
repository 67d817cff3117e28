package manager

import (
	"context"
	"fmt"
	"slices"

	"tempest/internal/store"
	"tempest/leadership"
	"tempest/transport"
	"tempest/wire"
)

// handleProgress serves a worker's WorkflowProgress. Only the leader tracks
// progress; a follower answers NotLeader naming the leader, which is how a
// worker that reported to a deposed leader finds the new one. The ack tells
// the worker who leads and whether to stop (the job ended, or this attempt
// was superseded by a newer one).
func (m *Manager) handleProgress(ctx context.Context, from transport.Peer, p *wire.WorkflowProgress) (wire.Message, error) {
	answers, err := m.takeProgress(ctx, from, []wire.WorkflowProgress{*p})
	if err != nil {
		return nil, err
	}
	if a := answers[0]; a.Err != nil {
		return nil, a.Err
	}
	return answers[0].Ack, nil
}

// applyProgress folds one progress report into the job table and reports
// whether the worker should stop the workflow.
func (m *Manager) applyProgress(p *wire.WorkflowProgress, worker string) (cancel bool) {
	m.update(func(tx *txn) {
		cancel = m.applyProgressLocked(tx, p, worker)
	})
	return cancel
}

func (m *Manager) applyProgressLocked(tx *txn, p *wire.WorkflowProgress, worker string) (cancel bool) {
	w, ok := m.wfs[p.WorkflowID]
	if !ok || w.rec.JobID != p.JobID {
		// Not ours (a job this leader has no record of). Before this
		// leader's state sync is done it may yet learn of it, so it is left
		// running. After, a majority of managers has been read, and every
		// acknowledged job is on a majority: this one never was, or was
		// withdrawn or pruned. It is fenced, never left to run unseen.
		if lt := m.leading(); lt != nil && lt.Synced() && !(p.Final || p.Status.Terminal()) {
			m.log.Warn("progress for a job no majority of managers holds; stopping it", "job_id", p.JobID, "workflow_id", p.WorkflowID, "worker", worker)
			return true
		}
		m.log.Debug("progress for an unknown workflow", "job_id", p.JobID, "workflow_id", p.WorkflowID, "worker", worker)
		return false
	}
	log := m.log.With("job_id", p.JobID, "workflow_id", p.WorkflowID, "worker", worker)
	final := p.Final || p.Status.Terminal()
	p.Lost = nil // a manager's to say, never a worker's
	if known, changed := lostWordLocked(&w.rec, p, worker); known {
		// An attempt given up on that ran on (cut off, or fenced after a
		// dispatch with an unknown outcome): what it did is kept, and it
		// stops.
		if changed {
			log.Info("a lost attempt reported; its counts are kept", "fence_token", p.FenceToken,
				"completed", p.CompletedCount, "failed", p.FailedCount, "final", final)
			tx.touchWorkflow(w, final)
		}
		if final {
			m.workers.freed(worker, len(p.AssignedCores))
		}
		return !final
	}
	if p.FenceToken != 0 && p.FenceToken < w.rec.FenceToken {
		// A superseded attempt (its worker was presumed dead, or the
		// dispatch outcome was unknown and it was retried): stop it.
		log.Info("progress from a superseded attempt; cancelling it", "fence_token", p.FenceToken, "current", w.rec.FenceToken)
		if final {
			m.workers.freed(worker, len(p.AssignedCores))
		}
		return !final
	}
	if !final && p.FenceToken != 0 && p.FenceToken == w.ended {
		// That attempt reported its end already; this is an older word of
		// it: a new leader's state-sync snapshot taken while its worker
		// stopped it, or a report that crossed the final one. Adopted, it
		// would make the workflow RUNNING on a worker that no longer runs
		// it, and no report would ever say otherwise.
		log.Info("progress from an attempt that already ended; not adopting it", "fence_token", p.FenceToken)
		return true
	}
	if p.FenceToken == w.rec.FenceToken && w.rec.Worker != "" && w.rec.Worker != worker {
		// This attempt was dispatched to another worker: whoever runs it
		// here got the dispatch replayed, not placed. Stop it.
		log.Warn("progress from a worker the attempt was not dispatched to; cancelling it", "dispatched_to", w.rec.Worker, "fence_token", p.FenceToken)
		return !final
	}
	if w.rec.Status.Terminal() {
		if final && p.FenceToken == w.rec.FenceToken && w.rec.Worker == worker {
			// The last word on an attempt that ended here first (the job
			// was cancelled): keep its counts for the results. It has
			// stopped.
			keepProgress(&w.rec, p, true)
			tx.touchWorkflow(w, true)
			stopConfirmedLocked(tx, w.job, w.rec.WorkflowID)
		}
		return !final
	}
	if lt := tx.leading; lt != nil && p.FenceToken > w.rec.FenceToken && leadership.TokenTerm(p.FenceToken) >= lt.Number() {
		// A newer attempt can only come from an older term's leader this
		// one did not sync with: every placement of this term is recorded
		// before its dispatch leaves. A token of this term or a later one
		// that the record lacks is made up (any worker key can report),
		// and adopting it would make its sender the workflow's worker, to
		// whom a pipeline task's state is served (authz.go). Ignored, not
		// cancelled: no such attempt runs, and a leader deposed by a later
		// term is about to learn so.
		m.unauthorized(wire.TypeWorkflowProgress, transport.Peer{NodeID: worker}, p.JobID, p.WorkflowID,
			fmt.Sprintf("fence token %d of term %d is not one this leader of term %d placed", p.FenceToken, leadership.TokenTerm(p.FenceToken), lt.Number()))
		return false
	}
	if p.FenceToken > w.rec.FenceToken || (w.rec.Worker == "" && p.FenceToken == w.rec.FenceToken) {
		// A newer attempt than we know of (placed by a leader we have not
		// synced with) or one we lost track of: the worker is the truth,
		// if a manager did place it there. Its dispatch carried the
		// placing leader's proof, which a worker key cannot make; without
		// one, any worker-key holder could claim a pending workflow, or one
		// placed before the last election, by naming a token of an older
		// term, and be served its pipeline task's state.
		if err := m.placedByAManager(p, worker); err != nil {
			m.unauthorized(wire.TypeWorkflowProgress, transport.Peer{NodeID: worker}, p.JobID, p.WorkflowID,
				fmt.Sprintf("fence token %d (term %d) is not recorded and not proven placed on the sender: %v", p.FenceToken, leadership.TokenTerm(p.FenceToken), err))
			return false
		}
		if p.FenceToken > w.rec.FenceToken || w.rec.Attempts == 0 {
			w.rec.Attempts++
		}
		w.rec.FenceToken = p.FenceToken
		w.rec.Worker = worker
		tx.touchWorkflow(w, true)
	}
	if len(p.AssignedCores) > 0 {
		w.rec.Cores = p.AssignedCores
	}
	keepProgress(&w.rec, p, final)
	tx.touchWorkflow(w, false)

	if final {
		w.ended = p.FenceToken
	}
	switch p.Status {
	case wire.WorkflowCompleted:
		w.rec.Status = wire.WorkflowCompleted
		w.rec.Error = ""
		m.workers.freed(worker, releasedCoresLocked(w, worker))
		tx.touchWorkflow(w, true)
		log.Info("workflow completed", "completed", p.CompletedCount, "failed", p.FailedCount)
	case wire.WorkflowFailed, wire.WorkflowCancelled:
		// The worker gave up on it (the run failed, or the worker is
		// draining and handed it back): another worker gets a try.
		m.workers.freed(worker, releasedCoresLocked(w, worker))
		reason := p.Error
		if reason == "" {
			reason = "worker reported " + string(p.Status)
		}
		switch {
		case m.rsTaskFailedLocked(tx, w, p.Status, reason):
		case p.Status == wire.WorkflowFailed && p.Permanent:
			// Another worker would fail the same way (a setup step the
			// target refused): failed now, not after every retry.
			w.rec.Status, w.rec.Error = wire.WorkflowFailed, reason
			w.rec.Worker, w.rec.Cores = "", nil
			tx.touchWorkflow(w, true)
			log.Warn("workflow failed; not retried, another attempt would fail the same way", "reason", reason)
		case p.Status == wire.WorkflowCancelled:
			// The worker stopped it (it fenced itself when no leader
			// answered): nothing the workflow did.
			m.notItsFaultLocked(tx, w, worker, reason)
		default:
			m.retryLocked(tx, w, worker, reason)
		}
	default:
		if w.rec.Status == wire.WorkflowAssigned || w.rec.Status == wire.WorkflowPending {
			w.rec.Status = wire.WorkflowRunning
			tx.touchWorkflowLazily(w)
		}
		if !final {
			m.checkAbortLocked(tx, w)
		}
	}
	return false
}

// keepProgress stores p as rec's latest progress. The per-second series is
// kept apart, and only from a final progress: mid-run messages carry just a
// live window (wire.SeriesLiveWindow), which the report has no use for, and
// keeping it out of LastProgress stops every progress write from
// persisting it. LastProgress keeps only the window's newest point, a few
// bytes, which is what a live display shows as "now" (api
// WorkflowStatus.Recent). A longer series than wire.MaxSeriesEntries is
// clipped.
//
// A progress that lists lost attempts is a manager's, with their counts
// already folded in (a leader's replication); one from a worker is its
// attempt's own, and the lost attempts' counts are folded into it.
func keepProgress(rec *store.WorkflowRecord, p *wire.WorkflowProgress, final bool) {
	kept := *p
	kept.Placement = nil // evidence for this leader, not state to keep
	kept.Series = slices.Clone(wire.ClipSeries(p.Series, 1))
	if final {
		rec.Series = slices.Clone(wire.ClipSeries(p.Series, 0))
	}
	if len(p.Lost) > 0 {
		rec.Lost, rec.AttemptProgress = p.Lost, nil
		kept.Lost = lostSummaries(p.Lost)
		rec.LastProgress = kept
		return
	}
	if len(rec.Lost) == 0 {
		rec.LastProgress = kept
		return
	}
	rec.AttemptProgress = &kept
	foldLost(rec)
}
