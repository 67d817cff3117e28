package manager

import (
	"context"
	"sync"
	"time"

	"tempest/transport"
	"tempest/wire"
)

// Batched traffic with workers. Placements running at once that chose the
// same worker share their dispatch message (a WorkflowDispatchBatch per
// round, internal/rounds), and a worker's progress reports made at once
// arrive as one WorkflowProgressBatch, applied in one change to the job
// table. Each dispatch and report is still judged and answered on its own,
// exactly as a lone one; a lone one travels as the single type.

// maxWorkerBatch bounds the dispatches (or reports) one message carries. A
// dispatch is small unless its job file's params are large; one whose
// params and context pass dispatchBatchLimit goes alone, so a batch stays
// far inside wire.MaxMessageSize.
const (
	maxWorkerBatch     = 64
	dispatchBatchLimit = 32 << 10
)

// sendDispatch sends d to the worker at addr, in a round shared with the
// dispatches to the same worker made at the same time, bounded by the
// dispatch timeout.
func (m *Manager) sendDispatch(ctx context.Context, addr string, d *wire.WorkflowDispatch) (wire.Message, error) {
	if len(d.Workflow.Params)+len(d.Context) > dispatchBatchLimit {
		cctx, cancel := context.WithTimeout(ctx, m.cfg.DispatchTimeout)
		defer cancel()
		return m.tr.Call(cctx, addr, d)
	}
	a := m.batch.dispatch.Do(ctx, addr, d)
	return a.Msg, a.Err
}

// dispatchRound sends one round of dispatches to one worker.
func (m *Manager) dispatchRound(ctx context.Context, addr string, ds []*wire.WorkflowDispatch) []wire.Reply {
	// The round runs on when one caller leaves (it carries the others'
	// calls), but not past the timeout, nor past the node's own shutdown.
	ctx, cancel := context.WithTimeout(ctx, m.cfg.DispatchTimeout)
	defer cancel()
	defer context.AfterFunc(m.life.Context(), cancel)()
	out := make([]wire.Reply, len(ds))
	if len(ds) == 1 {
		out[0].Msg, out[0].Err = m.tr.Call(ctx, addr, ds[0])
		return out
	}
	b := &wire.WorkflowDispatchBatch{Dispatches: make([]wire.WorkflowDispatch, len(ds))}
	for i, d := range ds {
		b.Dispatches[i] = *d
	}
	resp, err := m.tr.Call(ctx, addr, b)
	if wire.NotServed(err) {
		// A worker of an older release: each dispatch goes alone.
		var wg sync.WaitGroup
		for i, d := range ds {
			wg.Go(func() { out[i].Msg, out[i].Err = m.tr.Call(ctx, addr, d) })
		}
		wg.Wait()
		return out
	}
	return wire.BatchReplies(len(ds), resp, err)
}

// handleProgressBatch serves a worker's WorkflowProgressBatch: each report
// is checked and answered as a lone WorkflowProgress would be.
func (m *Manager) handleProgressBatch(ctx context.Context, from transport.Peer, b *wire.WorkflowProgressBatch) (wire.Message, error) {
	answers, err := m.takeProgress(ctx, from, b.Reports)
	if err != nil {
		return nil, err
	}
	return &wire.ProgressBatchAck{Answers: answers}, nil
}

// takeProgress checks reports from one worker (progressLease), applies
// them in one change to the job table and answers each: its ack, or why
// its end is not yet stored. The ends among them wait for a majority
// together: the worker forgets a workflow once its final is acknowledged,
// so the end must be on a majority of managers first, or a successor
// reading a majority would find it still placed, not on its worker, and
// run it again.
func (m *Manager) takeProgress(ctx context.Context, from transport.Peer, reports []wire.WorkflowProgress) ([]wire.ProgressAnswer, error) {
	ptrs := make([]*wire.WorkflowProgress, len(reports))
	for i := range reports {
		ptrs[i] = &reports[i]
	}
	age, err := m.progressLease(from, ptrs...)
	if err != nil {
		return nil, err
	}
	worker := from.NodeID
	answers := make([]wire.ProgressAnswer, len(reports))
	cancels := make([]bool, len(reports))
	m.workers.seen(worker)
	m.update(func(tx *txn) {
		for i, p := range ptrs {
			cancels[i] = m.applyProgressLocked(tx, p, worker)
		}
	})
	var wg sync.WaitGroup
	for i, p := range ptrs {
		answers[i].Ack = &wire.ProgressAck{WorkflowID: p.WorkflowID, Leader: m.cfg.ID, Cancel: cancels[i], QuorumAge: age}
		if (p.Final || p.Status.Terminal()) && !cancels[i] {
			wg.Go(func() {
				if err := m.endOnMajority(ctx, p.JobID, p.WorkflowID); err != nil {
					answers[i] = wire.ProgressAnswer{Err: finalNotStored(p.WorkflowID, err)}
				}
			})
		}
	}
	wg.Wait()
	return answers, nil
}

// progressLease is the check every progress report passes before it is
// applied, and returns the age of the leader's confirmation, for the acks.
// Only the leader takes progress; a follower answers NotLeader naming the
// leader, which is how a worker that reported to a deposed leader finds the
// new one. The sender is proven by the transport, and a report naming
// another worker is refused: a worker speaks only for itself. The lease:
// the worker counts its contact from when a majority last confirmed this
// leader, not from this answer (worker/selffence.go); a leader that no
// majority has confirmed for a worker's whole fence period may already have
// a successor re-running the work, so it answers as a manager that knows no
// leader, and the worker looks for the real one.
func (m *Manager) progressLease(from transport.Peer, reports ...*wire.WorkflowProgress) (time.Duration, error) {
	if m.leading() == nil {
		return 0, m.elector.NotLeaderError()
	}
	for _, p := range reports {
		if p.WorkerID != "" && p.WorkerID != from.NodeID {
			return 0, wire.Errorf(wire.CodeRejected, "progress for %s names worker %s but comes from %s", p.WorkflowID, p.WorkerID, from.NodeID)
		}
	}
	age, leading := m.elector.QuorumAge()
	if !leading {
		return 0, m.elector.NotLeaderError()
	}
	if age > m.leaseLimit {
		p := reports[0]
		m.log.Warn("refusing progress: no majority of managers has confirmed this leader for longer than workers' fence period",
			"job_id", p.JobID, "workflow_id", p.WorkflowID, "worker", from.NodeID, "reports", len(reports),
			"quorum_age", age.Round(time.Millisecond), "limit", m.leaseLimit)
		return 0, wire.Errorf(wire.CodeNotLeader, "%s has not heard from a majority of managers for %s", m.cfg.ID, age.Round(time.Millisecond))
	}
	return age, nil
}

func finalNotStored(workflowID string, err error) *wire.Error {
	return wire.Errorf(wire.CodeUnavailable, "final progress of %s not yet stored on a majority of managers: %v", workflowID, err)
}
