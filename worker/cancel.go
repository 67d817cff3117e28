package worker

import (
	"context"
	"time"

	"tempest/transport"
	"tempest/wire"
)

// cancelWait bounds how long a CancelJob reply waits for the cancelled
// runners to return. Waiting lets the ack mean "stopped, cores free" in the
// normal case (runners stop within milliseconds); the bound keeps a runner
// that ignores its context from holding the manager's call.
const cancelWait = 2 * time.Second

// handleCancel serves CancelJob: by workflow when WorkflowID is set, else
// every workflow of JobID on this worker. A cancel whose fence token is
// older than the dispatch it would stop is refused with ErrStaleFence (when
// it would stop nothing else). Cancelling what is not running here succeeds
// with WorkflowsCancelled 0: afterwards nothing of it runs, which is what
// the caller wants to know.
func (w *Worker) handleCancel(ctx context.Context, _ transport.Peer, c *wire.CancelJob) (wire.Message, error) {
	if c.JobID == "" && c.WorkflowID == "" {
		return nil, wire.Errorf(wire.CodeRejected, "cancel names neither a job nor a workflow")
	}
	if c.FenceToken == 0 {
		return nil, errNoFence("cancel", c.JobID+"/"+c.WorkflowID)
	}
	reason := "cancelled by manager"
	if c.Reason != "" {
		reason = "cancelled: " + c.Reason
	}

	w.mu.Lock()
	var stopped []*execution
	var stale error
	consider := func(e *execution) {
		if err := w.fences.CheckCancel(e.workflowID, c.FenceToken); err != nil {
			stale = err
			return
		}
		if w.stopLocked(e, wire.WorkflowCancelled, reason) {
			stopped = append(stopped, e)
		}
	}
	jobID := c.JobID
	if c.WorkflowID != "" {
		e, ok := w.execs[c.WorkflowID]
		switch {
		case ok && (c.JobID == "" || c.JobID == e.jobID):
			jobID = e.jobID
			consider(e)
		case !ok:
			if err := w.fences.CheckCancel(c.WorkflowID, c.FenceToken); err != nil {
				stale = err
			} else {
				// The dispatch may still be on its way: make sure it is
				// refused when it arrives.
				w.fences.Tombstone(c.WorkflowID, c.FenceToken, w.now())
			}
		}
	} else {
		for _, id := range sortedKeys(w.execs) {
			if e := w.execs[id]; e.jobID == c.JobID {
				consider(e)
			}
		}
	}
	w.mu.Unlock()

	if len(stopped) == 0 && stale != nil {
		w.log.Info("stale cancel refused", "job_id", c.JobID, "workflow_id", c.WorkflowID, "err", stale)
		return nil, stale
	}
	for _, e := range stopped {
		e.log.Info("cancelling workflow", "reason", reason)
	}
	wctx, cancel := context.WithTimeout(ctx, cancelWait)
	defer cancel()
	for _, e := range stopped {
		select {
		case <-e.done:
		case <-wctx.Done():
			e.log.Warn("workflow still running after cancel", "waited", cancelWait)
		}
	}
	return &wire.CancelAck{JobID: jobID, Cancelled: true, WorkflowsCancelled: len(stopped)}, nil
}
