package manager

import (
	"context"
	"fmt"
	"sync"
	"time"

	"tempest/transport"
	"tempest/wire"
)

// cancelTarget is one running attempt to stop on its worker.
type cancelTarget struct {
	worker     string
	jobID      string
	workflowID string
	fence      uint64
}

// cancelJob ends job id with status (CANCELLED or TIMEOUT): its unfinished
// workflows are CANCELLED, their cores counted free, and every worker
// running one is told to stop. The job's terminal state is durable before
// the workers are told, so a crash in between cannot resurrect the job.
func (m *Manager) cancelJob(ctx context.Context, id string, status wire.JobStatus, reason string) (*wire.CancelAck, error) {
	ack := &wire.CancelAck{JobID: id}
	var targets []cancelTarget
	var jp wire.JobProgress
	found, again := false, false
	m.update(func(tx *txn) {
		j, ok := m.jobs[id]
		if !ok {
			return
		}
		found = true
		if j.rec.Status.Terminal() {
			ack.Error = fmt.Sprintf("job already %s", j.rec.Status)
			jp = m.jobProgressLocked(j, true)
			again = true
			return
		}
		for _, w := range j.wfs {
			if !w.rec.Status.Terminal() {
				ack.WorkflowsCancelled++
			}
		}
		targets = m.endJobLocked(tx, j, status, reason)
		if status == wire.JobCancelled {
			m.awaitStopsLocked(j, targets)
		}
		ack.Cancelled = true
		jp = m.jobProgressLocked(j, true)
	})
	if !found {
		return nil, wire.Errorf(wire.CodeNotFound, "job %s not found", id)
	}
	fitJobSeries(&jp)
	if again {
		// Asked again (perhaps after "not yet stored on a majority"): make
		// sure of the end before saying so.
		if err := m.statusOnMajority(ctx, jp); err != nil {
			return nil, wire.Errorf(wire.CodeNoQuorum, "job %s ended here, but not yet stored on a majority of managers (%v); ask again to confirm", id, err)
		}
	}
	if ack.Cancelled {
		m.log.Info("job ended", "job_id", id, "status", status, "reason", reason, "workflows", ack.WorkflowsCancelled)
		// The end must be on a majority before the answer: a successor
		// reading a stale majority would otherwise run the job again.
		// The workers are told either way: the job is over here.
		err := m.statusOnMajority(ctx, jp)
		m.cancelOnWorkers(ctx, targets, reason)
		if err != nil {
			return nil, wire.Errorf(wire.CodeNoQuorum, "job %s %s here, but not yet stored on a majority of managers (%v); ask again to confirm", id, status, err)
		}
	}
	return ack, nil
}

// cancelOnWorkers tells each target's worker to stop, concurrently, with the
// attempt's own fence token (a worker refuses a cancel older than what it
// runs). Failures are logged: a worker that misses the cancel is told again
// by the ProgressAck of its next report.
func (m *Manager) cancelOnWorkers(ctx context.Context, targets []cancelTarget, reason string) {
	if len(targets) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.DispatchTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, t := range targets {
		wv, ok := m.workers.get(t.worker)
		if !ok || wv.Addr == "" {
			// A worker this leader cannot name an address for has nothing
			// to wait on: it is not in the table that places work.
			m.stopConfirmed(t.jobID, t.workflowID)
			continue
		}
		wg.Go(func() {
			_, err := m.tr.Call(ctx, wv.Addr, &wire.CancelJob{JobID: t.jobID, WorkflowID: t.workflowID, FenceToken: t.fence, Reason: reason})
			if err != nil {
				m.log.Warn("cancel not delivered; the worker's next progress report will be told",
					"job_id", t.jobID, "workflow_id", t.workflowID, "worker", t.worker, "err", err)
				return
			}
			// The worker answers once the workflow stopped (or it gave up
			// waiting, and its final report follows).
			m.stopConfirmed(t.jobID, t.workflowID)
		})
	}
	wg.Wait()
}

// handleCancel serves CancelJob from gates and clients on the data plane.
func (m *Manager) handleCancel(ctx context.Context, _ transport.Peer, c *wire.CancelJob) (wire.Message, error) {
	if _, err := m.awaitLeader(ctx, m.elector.NotLeaderError); err != nil {
		return nil, err
	}
	if err := m.checkFence(c.JobID, c.FenceToken); err != nil {
		return nil, err
	}
	reason := c.Reason
	if reason == "" {
		reason = "cancelled"
	}
	return m.cancelJob(ctx, c.JobID, wire.JobCancelled, reason)
}

// armTimeoutLocked starts j's timeout timer. Every manager arms it (any may
// lead when it fires); only the leader acts on it, and a new leader checks
// for deadlines that passed while nobody led (resume).
func (m *Manager) armTimeoutLocked(j *jobState) {
	if j.rec.Status.Terminal() || j.rec.Submission.Timeout <= 0 || j.timer != nil {
		return
	}
	id := j.rec.ID()
	timeout := j.rec.Submission.Timeout
	left := j.rec.Created().Add(timeout).Sub(m.clock.Now())
	j.timer = m.clock.AfterFunc(max(left, 0), func() {
		m.spawn(func(ctx context.Context) { m.timeoutJob(ctx, id, timeout) })
	})
}

func (m *Manager) timeoutJob(ctx context.Context, id string, timeout time.Duration) {
	lt := m.leading()
	if lt == nil || !lt.Synced() {
		return // not leading: the leader's timer, or a new leader's resume, handles it
	}
	if _, err := m.cancelJob(ctx, id, wire.JobTimeout, fmt.Sprintf("timed out after %s", timeout)); err != nil {
		m.log.Debug("timeout of a job that is gone", "job_id", id, "err", err)
	}
}

// stopTimers stops every job's timer (Shutdown).
func (m *Manager) stopTimers() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, j := range m.jobs {
		if j.timer != nil {
			j.timer.Stop()
			j.timer = nil
		}
	}
}
