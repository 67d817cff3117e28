package worker

import (
	"context"
	"sync/atomic"
	"time"

	"tempest/wire"
)

// DefaultFenceAfter is the default self-fencing lease (Config.FenceAfter).
// Long enough that a leader election (a few seconds) does not stop healthy
// work; short enough that a cut-off worker's double load is bounded to a few
// seconds beyond failure detection.
const DefaultFenceAfter = 10 * time.Second

// contactClock is the last time a manager leader showed this worker it
// still stands behind its work: a progress acknowledged (only a leader
// acknowledges progress), a dispatch or a cancel received, a state sync
// from a leader. Unix nanoseconds. It never moves backwards: a late answer
// vouching for an earlier moment must not undo a newer one.
type contactClock struct{ last atomic.Int64 }

func (c *contactClock) touch(t time.Time) {
	n := t.UnixNano()
	for {
		old := c.last.Load()
		if n <= old || c.last.CompareAndSwap(old, n) {
			return
		}
	}
}

// ackedContact is the moment a progress acknowledgement vouches for: not
// when it arrived, but when the leader was last confirmed by a majority of
// its peers. The leader measured that as quorumAge before answering, which
// was after sent; so sent-quorumAge is no later than that confirmation, on
// this worker's clock and with durations only (no clock agreement needed).
// A leader cut off from its peers thus keeps a worker's lease only as long
// as its own standing with a majority lasts, however late its check-quorum
// steps it down, and that standing ends before a majority can elect a
// successor.
func ackedContact(sent, now time.Time, quorumAge time.Duration) time.Time {
	at := sent.Add(-max(quorumAge, 0))
	if at.After(now) {
		return now
	}
	return at
}
func (c *contactClock) since(now time.Time) time.Duration {
	return now.Sub(time.Unix(0, c.last.Load()))
}

// selfFenceLoop is the worker's half of the bound on double load: while
// workflows run, a worker that has not heard from a leader for a quarter of
// FenceAfter re-sends one workflow's latest progress (a quiet run, such as
// a long sleep, otherwise says nothing); one that has not for FenceAfter
// stops every running workflow. A leader re-dispatches a lost worker's
// workflows only FenceAfter (its worker_fence_after) after it last heard
// from it, by which time a worker cut off from it has stopped them.
func (w *Worker) selfFenceLoop(ctx context.Context) {
	// Checked ten times a period, so a fence comes at most a tenth of the
	// period late (managers allow a margin over fence_after for that).
	step := w.cfg.FenceAfter / 4
	t := time.NewTicker(w.cfg.FenceAfter / 10)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.checkSelfFence(ctx, step)
	}
}

func (w *Worker) checkSelfFence(ctx context.Context, step time.Duration) {
	now := w.now()
	w.mu.Lock()
	var running []*execution
	for _, e := range w.execs {
		if !e.finished {
			running = append(running, e)
		}
	}
	w.mu.Unlock()
	if len(running) == 0 {
		// Nothing to fence; the next dispatch is itself a leader's word.
		w.contact.touch(now)
		return
	}
	since := w.contact.since(now)
	if since >= w.cfg.FenceAfter {
		var stopped []string
		w.mu.Lock()
		for _, e := range running {
			if w.stopLocked(e, wire.WorkflowCancelled, "fenced: no manager leader answered for "+w.cfg.FenceAfter.String()) {
				stopped = append(stopped, e.workflowID)
			}
		}
		w.mu.Unlock()
		if len(stopped) > 0 {
			w.log.Warn("fenced myself: no manager leader answered within fence_after; stopped every running workflow, a leader re-runs them elsewhere",
				"silent_for", since.Round(time.Millisecond), "fence_after", w.cfg.FenceAfter, "workflows", stopped)
		}
		return
	}
	if since >= step && w.keepAlive.CompareAndSwap(false, true) {
		e := running[0]
		w.mu.Lock()
		p := e.latest
		w.mu.Unlock()
		if p.WorkflowID == "" {
			w.keepAlive.Store(false)
			return
		}
		// Off this loop: a call to an unreachable leader waits out its
		// timeout, and the fence must not wait with it.
		if !w.spawn(nil, func() {
			defer w.keepAlive.Store(false)
			w.sendProgress(ctx, e, &p)
		}) {
			w.keepAlive.Store(false) // shutting down: nothing to keep alive
		}
	}
}
