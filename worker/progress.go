package worker

import (
	"context"
	"errors"
	"slices"
	"time"

	"tempest/wire"
	"tempest/workflow"
)

// failoverAfter is how many progress calls in a row must fail to reach the
// leader before the worker stops believing in it and registers with another
// manager. One lost call is noise; three at 100 ms apart is a dead manager
// or a partition, and the transport's breaker is open by then anyway.
const failoverAfter = 3

// maxRedirects bounds how many times in a row a final progress follows a
// leader redirect without pausing, so two managers naming each other cannot
// spin the sender.
const maxRedirects = 3

// Final progress is retried with exponential backoff from finalBackoffBase
// up to finalBackoffMax until a manager acknowledges it.
const (
	finalBackoffBase = 100 * time.Millisecond
	finalBackoffMax  = 5 * time.Second
)

// delivery is what came of one progress send.
type delivery int

const (
	delivered  delivery = iota // the leader has it
	redirected                 // the leader changed: send again at once
	retryLater                 // no answer, or an answer worth retrying
	dropped                    // refused for good; resending cannot help
)

// report is the runner's Report callback. It runs on the runner's reporter
// goroutine, so it only records the snapshot and wakes the sender: the
// network is never touched here.
func (w *Worker) report(e *execution, s workflow.Snapshot) {
	steps := stepStats(e, s)
	w.mu.Lock()
	if !e.finished {
		p := w.progressLocked(e, s, wire.WorkflowRunning)
		p.StepStats = steps
		e.latest = p
		e.seq++
	}
	w.mu.Unlock()
	e.signal()
}

// progressLocked builds e's progress message from a snapshot, without step
// stats (encoding histograms is left outside the lock).
func (w *Worker) progressLocked(e *execution, s workflow.Snapshot, status wire.WorkflowStatus) wire.WorkflowProgress {
	p := wire.WorkflowProgress{
		JobID:             e.jobID,
		WorkflowID:        e.workflowID,
		WorkflowName:      e.name,
		Status:            status,
		CompletedCount:    s.Completed,
		FailedCount:       s.Failed,
		DroppedIterations: s.DroppedIterations,
		Iterations:        s.Iterations,
		Offered:           s.Offered,
		Elapsed:           s.Elapsed,
		Timestamp:         w.now().UnixNano(),
		AssignedCores:     slices.Clone(e.cores),
		WorkerID:          w.cfg.ID,
		FenceToken:        e.fence,
		Placement:         e.placement,
	}
	if s.Elapsed > 0 {
		p.RatePerSecond = float64(s.Completed+s.Failed) / s.Elapsed.Seconds()
	}
	p.Series = seriesFor(s.Series, status)
	return p
}

// seriesFor converts the runner's per-second series for the wire. A running
// workflow sends only the newest wire.SeriesLiveWindow seconds: resending a
// whole hour every ProgressInterval would dwarf the rest of the message, and
// nothing mid-run needs more than a live window. The final progress (any
// other status) carries the whole series, which the manager keeps.
func seriesFor(series []workflow.SecondStats, status wire.WorkflowStatus) []wire.SecondStats {
	limit := wire.MaxSeriesEntries
	if status == wire.WorkflowRunning {
		limit = wire.SeriesLiveWindow
	}
	if len(series) > limit {
		series = series[len(series)-limit:]
	}
	if len(series) == 0 {
		return nil
	}
	out := make([]wire.SecondStats, len(series))
	for i, pt := range series {
		out[i] = wire.SecondStats{Second: pt.Second, Completed: pt.Completed, Failed: pt.Failed,
			Dropped: pt.Dropped, VUs: pt.VUs, P50: pt.P50, P99: pt.P99}
	}
	return out
}

func stepStats(e *execution, s workflow.Snapshot) []wire.StepStats {
	if len(s.Steps) == 0 {
		return nil
	}
	steps, err := s.StepStats()
	if err != nil {
		e.log.Warn("encode step stats; progress sent without them", "err", err)
		return nil
	}
	return steps
}

// progressLoop sends e's progress to the leader, at most one message per
// ProgressInterval (the newest snapshot wins; older ones are skipped), then
// delivers the final progress and retires the execution.
func (w *Worker) progressLoop(e *execution) {
	ctx := w.ctx
	var sentSeq uint64
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.notify:
		}
		if wait := time.Until(last.Add(w.cfg.ProgressInterval)); !last.IsZero() && wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-e.done:
				t.Stop() // the final is due now: it is not throttled
			case <-t.C:
			}
		}
		w.mu.Lock()
		p, seq, final := e.latest, e.seq, e.finished
		w.mu.Unlock()
		if final {
			w.deliverFinal(ctx, e)
			return
		}
		if seq == sentSeq {
			continue
		}
		sentSeq, last = seq, time.Now()
		w.sendProgress(ctx, e, &p)
	}
}

// deliverFinal sends e's final progress until a manager acknowledges it or
// the worker stops, then forgets e.
func (w *Worker) deliverFinal(ctx context.Context, e *execution) {
	redirects := 0
	for attempt := 0; ; attempt++ {
		w.mu.Lock()
		current, p := w.execs[e.workflowID] == e, e.latest
		w.mu.Unlock()
		if !current {
			return // superseded by a newer attempt of the workflow
		}
		d := w.sendProgress(ctx, e, &p)
		switch {
		case d == delivered || d == dropped:
			w.mu.Lock()
			w.forgetLocked(e)
			w.mu.Unlock()
			e.log.Debug("final progress handed over", "status", p.Status, "attempts", attempt+1, "acknowledged", d == delivered)
			return
		case d == redirected && redirects < maxRedirects:
			redirects++
			continue
		}
		redirects = 0
		changed := w.leader.changedCh()
		t := time.NewTimer(backoff(attempt, finalBackoffBase, finalBackoffMax))
		select {
		case <-ctx.Done():
			t.Stop()
			e.log.Warn("final progress not delivered: worker stopped", "status", p.Status)
			return
		case <-changed: // a new leader: try it now
			t.Stop()
		case <-t.C:
		}
	}
}

// sendProgress sends one progress message to the leader and acts on the
// answer: cancel requests, leader redirects, fencing, failover.
func (w *Worker) sendProgress(ctx context.Context, e *execution, p *wire.WorkflowProgress) delivery {
	_, addr := w.leader.current()
	if addr == "" {
		w.requestRegistration("")
		return retryLater
	}
	sent := w.now()
	resp, err := w.callProgress(ctx, addr, p)
	if err != nil {
		return w.progressFailed(ctx, e, addr, err)
	}
	w.leader.callSucceeded(addr)
	ack, ok := resp.(*wire.ProgressAck)
	if !ok {
		e.log.Warn("manager answered progress with an unexpected message", "manager", addr, "type", resp.Type())
		return retryLater
	}
	// Only a leader acknowledges progress: it stood behind this worker's
	// work as of its last confirmation by a majority (selffence.go).
	w.contact.touch(ackedContact(sent, w.now(), ack.QuorumAge))
	if ack.Cancel {
		w.mu.Lock()
		// The cancel answers the attempt p reported. A newer dispatch may
		// have adopted the run since (e.fence moved on): the manager wants
		// that attempt, and stopping it here would fail it in the old
		// one's place.
		stopped := e.fence == p.FenceToken && w.stopLocked(e, wire.WorkflowCancelled, "cancelled by manager")
		w.mu.Unlock()
		if stopped {
			e.log.Info("manager asked to cancel workflow", "manager", addr)
		}
	}
	if ack.Leader != "" && !w.leader.isLeader(ack.Leader) {
		if id, _ := w.leader.current(); id == "" {
			// The leader was known by address only (a registration that
			// named none); only a leader acknowledges progress, so the id
			// in its ack is its own.
			w.leader.set(ack.Leader, addr, 0)
			return delivered
		}
		// Reported to a manager that is no longer the leader.
		if changed, resolved := w.leader.setByID(ack.Leader, 0); resolved {
			if changed {
				e.log.Info("leader changed (progress ack)", "leader", ack.Leader)
			}
			return redirected
		}
		// Named by an id we cannot reach yet: registering again asks a
		// manager for the leader's address.
		w.leader.lost(addr)
		w.requestRegistration(addr)
		return retryLater
	}
	return delivered
}

func (w *Worker) progressFailed(ctx context.Context, e *execution, addr string, err error) delivery {
	var we *wire.Error
	if !errors.As(err, &we) {
		if ctx.Err() != nil {
			return retryLater // stopping, not the manager's fault
		}
		e.log.Debug("progress not delivered", "manager", addr, "err", err)
		if w.leader.callFailed(addr, failoverAfter) && w.leader.lost(addr) {
			w.log.Warn("leader unreachable; registering with another manager", "manager", addr, "err", err)
			w.requestRegistration(addr)
		}
		return retryLater
	}
	w.leader.callSucceeded(addr) // it answered
	switch we.Code {
	case wire.CodeNotLeader:
		if we.LeaderAddr != "" && we.LeaderAddr != addr {
			if w.leader.set(we.Leader, we.LeaderAddr, 0) {
				w.log.Info("leader changed (not-leader reply)", "leader", we.Leader, "addr", we.LeaderAddr)
			}
			return redirected
		}
		// It knows no leader either: ask the other managers.
		w.leader.lost(addr)
		w.requestRegistration(addr)
		return retryLater
	case wire.CodeStaleFence:
		// A newer dispatch of this workflow exists elsewhere; this run
		// is a zombie and must stop.
		w.mu.Lock()
		stopped := w.stopLocked(e, wire.WorkflowCancelled, "fenced out: the manager holds a newer dispatch of this workflow")
		w.mu.Unlock()
		if stopped {
			e.log.Warn("workflow fenced out by manager; stopping it", "manager", addr)
		}
		return dropped
	case wire.CodeRejected, wire.CodeMalformed, wire.CodeTooLarge, wire.CodeUnknownType:
		e.log.Error("manager refused progress", "manager", addr, "err", err)
		return dropped
	}
	e.log.Debug("progress not accepted; will retry", "manager", addr, "err", err)
	return retryLater
}
