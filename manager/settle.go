package manager

import (
	"context"

	"tempest/internal/lifecycle"
	"tempest/leadership"
	"tempest/wire"
)

// Two states are shown but never stored: a job's record holds its end as
// soon as it is decided (so a crash cannot resurrect it), while what
// clients see says whether that end has settled.
//
//   - CANCELLING: the job is cancelled, but some worker it ran on has not
//     confirmed that the workflow stopped (by answering the cancel,
//     reporting the attempt's end, or being declared dead).
//   - COMPLETING: every workflow has ended, and the job's final status and
//     results are not yet stored on a majority of managers.
//
// Both live only on the leader that decided the end; a leader taking over
// shows the stored status (its predecessor's stops and stores either
// happened or are no longer anyone's to wait for).
//
// A status never goes backwards for a client: an end this manager learnt
// from another (a peer's snapshot in its state sync, or a leader's
// replication) is shown as it is, never COMPLETING, even while this leader
// stores it on a majority again. The leader that decided it showed it
// COMPLETED once a majority held it, so a client may have seen it; a
// successor that missed it and re-stores it must not show it unsettled
// (the chaos checker caught that: "ended COMPLETED, later seen
// COMPLETING").

// shownStatusLocked is the status clients see for j.
func shownStatusLocked(j *jobState) wire.JobStatus {
	switch {
	case j.rec.Status == wire.JobCancelled && len(j.stopping) > 0:
		return wire.JobCancelling
	case j.finalizing && !j.endLearned && (j.rec.Status == wire.JobCompleted || j.rec.Status == wire.JobFailed):
		return wire.JobCompleting
	}
	return j.rec.Status
}

// show marks j changed for its watchers (and its gate) without writing it:
// its shown status moved.
func (tx *txn) show(j *jobState) {
	tx.touchJob(j, false)
	tx.visible[j] = true
	if j.rec.Submission.Origin != "" {
		tx.afterCommit(tx.m.kickGates)
	}
}

// awaitStops records the workflows a cancel stops on their workers: the
// job shows CANCELLING until each is confirmed.
func (m *Manager) awaitStopsLocked(j *jobState, targets []cancelTarget) {
	if len(targets) == 0 {
		return
	}
	j.stopping = make(map[string]string, len(targets))
	for _, t := range targets {
		j.stopping[t.workflowID] = t.worker
	}
}

// stopConfirmedLocked notes that workflow wfID of j stopped on its worker.
func stopConfirmedLocked(tx *txn, j *jobState, wfID string) {
	if _, ok := j.stopping[wfID]; !ok {
		return
	}
	delete(j.stopping, wfID)
	if len(j.stopping) == 0 {
		j.stopping = nil
		tx.show(j)
	}
}

// stopConfirmed is stopConfirmedLocked for a worker's answer to a cancel.
func (m *Manager) stopConfirmed(jobID, wfID string) {
	m.update(func(tx *txn) {
		if j, ok := m.jobs[jobID]; ok {
			stopConfirmedLocked(tx, j, wfID)
		}
	})
}

// stopsEndedWithLocked confirms every stop awaited on worker: it is dead,
// so nothing of it runs.
func (m *Manager) stopsEndedWithLocked(tx *txn, worker string) {
	for _, j := range m.jobs {
		for wf, on := range j.stopping {
			if on == worker {
				stopConfirmedLocked(tx, j, wf)
			}
		}
	}
}

// finalizeLocked is called when j has just ended by its workflows: until its
// final status is on a majority of managers it shows COMPLETING. The store
// runs on the term's goroutine and is retried while the term lasts (the
// progress path stores most ends on a majority itself; an end decided here,
// by a lost worker, for one, is stored by this).
func (m *Manager) finalizeLocked(tx *txn, j *jobState) {
	lt := tx.leading
	if lt == nil || len(m.group.Load().VoterIDs) == 0 || !j.rec.Confirmed {
		// An unconfirmed job ending (refused at intake) has no results to
		// settle: it was never acknowledged.
		return
	}
	j.finalizing = true
	id := j.rec.ID()
	tx.afterCommit(func() {
		if !lt.Go(func(ctx context.Context) { m.storeEnd(ctx, lt, id) }) {
			m.finalized(id) // the term is over: nobody here waits for the store
		}
	})
}

// storeEnd stores job id's final status on a majority, until it is there or
// the term ends.
func (m *Manager) storeEnd(ctx context.Context, lt *leadership.Term, id string) {
	for {
		m.mu.Lock()
		j, ok := m.jobs[id]
		if !ok || !j.finalizing {
			m.mu.Unlock()
			return
		}
		jp := m.jobProgressLocked(j, false)
		m.mu.Unlock()
		err := m.statusOnMajority(ctx, jp)
		if err == nil {
			return // statusOnMajority marked it finalized
		}
		m.log.Warn("job's end not yet on a majority of managers; it shows COMPLETING", "job_id", id, "err", err)
		if !lifecycle.Sleep(ctx, m.cfg.QuorumTimeout) || m.leading() != lt {
			return
		}
	}
}

// finalized notes that job id's final status is on a majority.
func (m *Manager) finalized(id string) {
	m.update(func(tx *txn) {
		if j, ok := m.jobs[id]; ok && j.finalizing && j.rec.Status.Terminal() {
			j.finalizing = false
			tx.show(j)
		}
	})
}

// forgetSettlingLocked drops what only a leader waits for, when its term
// ends: the next leader shows the stored statuses.
func (m *Manager) forgetSettlingLocked(tx *txn) {
	for _, j := range m.jobs {
		if j.finalizing || len(j.stopping) > 0 {
			j.finalizing, j.stopping = false, nil
			tx.show(j)
		}
	}
}
