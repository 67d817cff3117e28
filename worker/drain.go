package worker

import (
	"context"
	"fmt"
	"time"

	"tempest/wire"
)

// errDrainTimeout is the cause given to workflows still running when a
// drain's patience runs out. They report FAILED, not CANCELLED: nobody asked
// for them to stop, the work is simply not done, and the manager should
// place it elsewhere ("hand back", docs/datacenter.md).
var errDrainTimeout = &stopReason{status: wire.WorkflowFailed, reason: "handed back: worker drained before the workflow finished"}

// Drain shuts the worker down gracefully, as on SIGTERM: it reports
// DRAINING and refuses new dispatches, lets running workflows finish for up
// to DrainTimeout and then stops the rest (reporting them FAILED, handed
// back), waits up to DrainTimeout more for their final progress to be
// acknowledged, leaves SWIM and makes Run return. ctx bounds the whole
// drain. Calling Drain again waits for the first call's outcome.
//
// The error says what could not be done cleanly (workflows stopped, final
// progress undelivered); the worker stops either way.
func (w *Worker) Drain(ctx context.Context) error {
	w.mu.Lock()
	switch {
	case !w.running && !w.stopping:
		w.mu.Unlock()
		return ErrNotRunning
	case w.stopping:
		w.mu.Unlock()
		return ErrStopped
	}
	first := !w.draining
	if first {
		w.draining = true
		w.bumpLocked()
	}
	w.mu.Unlock()

	if first {
		w.drainErr = w.drain(ctx)
		close(w.drained) // publishes drainErr to later callers
		return w.drainErr
	}
	select {
	case <-w.drained:
		return w.drainErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *Worker) drain(ctx context.Context) error {
	w.mu.Lock()
	runCtx, members := w.ctx, w.members
	running, pending := w.countLocked(false), w.countLocked(true)
	w.mu.Unlock()
	w.log.Info("draining: refusing new workflows", "running", running, "pending_final", pending-running, "drain_timeout", w.cfg.DrainTimeout)

	// Drain's own ctx or Run's, whichever ends first.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(runCtx, cancel)
	defer stop()

	var problems []string
	noneRunning := func() bool { return w.countLocked(false) == 0 }
	if !w.waitFor(ctx, timer(w.cfg.DrainTimeout), noneRunning) {
		w.mu.Lock()
		stopped := 0
		for _, e := range w.execs {
			if w.stopLocked(e, errDrainTimeout.status, errDrainTimeout.reason) {
				stopped++
			}
		}
		w.mu.Unlock()
		if stopped > 0 {
			w.log.Warn("drain timeout: handing back unfinished workflows", "workflows", stopped, "drain_timeout", w.cfg.DrainTimeout)
			problems = append(problems, fmt.Sprintf("%d workflows stopped unfinished", stopped))
		}
		w.waitFor(ctx, nil, noneRunning)
	}

	noneLeft := func() bool { return len(w.execs) == 0 }
	if !w.waitFor(ctx, timer(w.cfg.DrainTimeout), noneLeft) {
		w.mu.Lock()
		ids := sortedKeys(w.execs)
		w.mu.Unlock()
		w.log.Warn("drain: final progress not acknowledged by any manager", "workflows", ids)
		problems = append(problems, fmt.Sprintf("final progress of %d workflows not acknowledged", len(ids)))
	}

	if err := members.Leave(leaveTimeout); err != nil {
		w.log.Warn("leave SWIM", "err", err)
		problems = append(problems, "leave SWIM: "+err.Error())
	}
	if len(problems) > 0 {
		return fmt.Errorf("drain %s: %v", w.cfg.ID, problems)
	}
	w.log.Info("drained")
	return nil
}

// timer returns a channel that fires once after d. The timer is left to the
// garbage collector (since Go 1.23 an unreferenced timer is collected even
// if it has not fired), which keeps the call sites to one line.
func timer(d time.Duration) <-chan time.Time {
	return time.NewTimer(d).C
}
