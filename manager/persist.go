package manager

import (
	"context"
	"fmt"
	"time"

	"tempest/internal/lifecycle"
	"tempest/wire"
)

// load rebuilds the job table from the store, so a restarted manager knows
// every job it knew. Nothing is resumed here: placement is the leader's,
// and a leader resumes only after state sync has told it what the workers
// actually run.
func (m *Manager) load() error {
	jobs, err := m.store.Jobs()
	if err != nil {
		return fmt.Errorf("load jobs: %w", err)
	}
	wfs, err := m.store.AllWorkflows()
	if err != nil {
		return fmt.Errorf("load workflows: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, rec := range jobs {
		j := &jobState{rec: *rec, attempted: true}
		m.jobs[rec.ID()] = j
		m.rev = max(m.rev, rec.Rev)
	}
	for _, rec := range wfs {
		j, ok := m.jobs[rec.JobID]
		if !ok {
			m.log.Warn("stored workflow of an unknown job; ignoring it", "job_id", rec.JobID, "workflow_id", rec.WorkflowID)
			continue
		}
		w := &workflowState{rec: *rec, job: j}
		j.wfs = append(j.wfs, w)
		m.wfs[rec.WorkflowID] = w
		m.countLocked(w)
		m.rev = max(m.rev, rec.Rev)
	}
	for _, j := range m.jobs {
		if len(j.wfs) != len(j.rec.Submission.Workflows) {
			m.log.Warn("stored job has a different number of workflows than its submission",
				"job_id", j.rec.ID(), "stored", len(j.wfs), "submitted", len(j.rec.Submission.Workflows))
		}
		// Derived statuses that depend on in-memory state (DISPATCHING
		// while a placement ran) are recomputed from the workflows.
		if !j.rec.Status.Terminal() {
			m.refreshJobLocked(j)
		}
		m.armTimeoutLocked(j)
	}
	return nil
}

// housekeepingLoop enforces retention (finished jobs older than Retention
// are forgotten, in memory and on disk) and ages out heartbeat versions of
// nodes long gone.
func (m *Manager) housekeepingLoop(ctx context.Context) {
	every := min(max(m.cfg.Retention/10, time.Second), time.Minute)
	lifecycle.Every(ctx, every, func() {
		m.expireFinished()
		m.workers.cleanup(10 * time.Minute)
		m.mu.Lock()
		m.pruneOrphanCommitsLocked(m.clock.Now())
		m.mu.Unlock()
	})
}

// expireFinished drops finished jobs past retention.
func (m *Manager) expireFinished() {
	cutoff := m.clock.Now().Add(-m.cfg.Retention)
	ids, err := m.store.DeleteFinishedBefore(cutoff)
	if err != nil {
		m.log.Error("retention", "err", err)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, j := range m.jobs {
		if j.rec.Status.Terminal() && j.rec.FinishedAt != 0 && j.rec.FinishedAt < cutoff.UnixNano() {
			m.forgetLocked(j)
		}
	}
	if len(ids) > 0 {
		m.log.Info("finished jobs expired", "count", len(ids))
	}
}

// forgetLocked drops j from memory: a finished job past retention, or one
// that never became durable here (its first write failed), which nothing
// may place or report. Its entries go only if they are still j's own.
func (m *Manager) forgetLocked(j *jobState) {
	if j.timer != nil {
		j.timer.Stop()
		j.timer = nil
	}
	for _, w := range j.wfs {
		if m.wfs[w.rec.WorkflowID] == w {
			delete(m.wfs, w.rec.WorkflowID)
		}
	}
	m.uncountLocked(j)
	if m.jobs[j.rec.ID()] == j {
		delete(m.jobs, j.rec.ID())
	}
	for w := range j.watchers {
		w.wake() // they find the job gone and close
	}
}

// Bounds on commits kept for jobs whose submission has not arrived. A
// successor reads a majority of managers and the workers, so an old orphan
// tells it nothing the others do not: past the TTL its submission is not
// coming (it was withdrawn, or this manager missed it and will learn the
// job from a successor's sync instead).
const (
	orphanCommitTTL  = 10 * time.Minute
	maxOrphanCommits = 4096
)

// orphanCommit is a commit kept aside, with when it arrived.
type orphanCommit struct {
	c  wire.ProvisionCommit
	at time.Time
}

// keepOrphanCommitLocked sets c aside until its job's submission arrives,
// newest token per workflow, evicting the oldest when full.
func (m *Manager) keepOrphanCommitLocked(c *wire.ProvisionCommit) {
	if old, seen := m.orphanCommits[c.WorkflowID]; seen && old.c.FenceToken >= c.FenceToken {
		return
	}
	now := m.clock.Now()
	if _, seen := m.orphanCommits[c.WorkflowID]; !seen && len(m.orphanCommits) >= maxOrphanCommits {
		m.pruneOrphanCommitsLocked(now)
		if len(m.orphanCommits) >= maxOrphanCommits {
			oldest, at := "", now
			for id, o := range m.orphanCommits {
				if !o.at.After(at) {
					oldest, at = id, o.at
				}
			}
			delete(m.orphanCommits, oldest)
		}
	}
	m.orphanCommits[c.WorkflowID] = orphanCommit{c: *c, at: now}
}

// pruneOrphanCommitsLocked drops orphan commits older than orphanCommitTTL.
func (m *Manager) pruneOrphanCommitsLocked(now time.Time) {
	for id, o := range m.orphanCommits {
		if now.Sub(o.at) > orphanCommitTTL {
			delete(m.orphanCommits, id)
		}
	}
}
