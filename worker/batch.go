package worker

import (
	"context"
	"sync"

	"tempest/transport"
	"tempest/wire"
)

// Batched traffic with the manager leader. Progress reports made at the same
// time (many workflows running here) share one message per round
// (internal/rounds), and dispatches the leader sends together arrive as one
// WorkflowDispatchBatch. Each report and each dispatch is still judged and
// answered on its own; a lone one travels as the single type.

// maxProgressBatch bounds the reports one message carries, and
// progressBatchBudget the size of a report that may share one: a running
// HTTP workflow's histograms, or a final report's whole series, can reach
// hundreds of KiB, and those go alone. 64 reports of at most 16 KiB keep a
// batch far inside wire.MaxMessageSize.
const (
	maxProgressBatch    = 64
	progressInFlight    = 2
	progressBatchBudget = 16 << 10
)

// progressBatchable reports whether p is small enough to share a message.
func progressBatchable(p *wire.WorkflowProgress) bool {
	return progressSize(p) <= progressBatchBudget
}

// progressSize bounds p's encoded size from the lengths it carries, without
// encoding it: the fixed fields in one allowance, then the variable ones
// with room for their CBOR headers.
func progressSize(p *wire.WorkflowProgress) int {
	n := 512 + len(p.JobID) + len(p.WorkflowID) + len(p.WorkflowName) + len(p.WorkerID) + len(p.Error) + len(p.Waiting) +
		8*len(p.AssignedCores) + 96*len(p.Series)
	for i := range p.StepStats {
		st := &p.StepStats[i]
		n += 64 + len(st.StepName) + len(st.Histogram) + len(st.CorrectedHistogram) + 32*(len(st.Errors)+len(st.Statuses))
		for class := range st.Errors {
			n += len(class)
		}
	}
	return n
}

// callProgress sends p to the manager at addr, in a round shared with the
// reports sent to it at the same time when p is small enough to share one.
func (w *Worker) callProgress(ctx context.Context, addr string, p *wire.WorkflowProgress) (wire.Message, error) {
	if !progressBatchable(p) {
		cctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
		defer cancel()
		return w.tr.Call(cctx, addr, p)
	}
	a := w.progress.Do(ctx, addr, p)
	return a.Msg, a.Err
}

// progressRound sends one round of reports to the manager at addr, bounded
// by the call timeout.
func (w *Worker) progressRound(ctx context.Context, addr string, ps []*wire.WorkflowProgress) []wire.Reply {
	// The round runs on when one caller leaves (it carries the others'
	// calls), but not past the timeout, nor past the node's own shutdown.
	ctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
	defer cancel()
	defer context.AfterFunc(w.life.Context(), cancel)()
	out := make([]wire.Reply, len(ps))
	if len(ps) == 1 {
		out[0].Msg, out[0].Err = w.tr.Call(ctx, addr, ps[0])
		return out
	}
	b := &wire.WorkflowProgressBatch{Reports: make([]wire.WorkflowProgress, len(ps))}
	for i, p := range ps {
		b.Reports[i] = *p
	}
	resp, err := w.tr.Call(ctx, addr, b)
	if wire.NotServed(err) {
		// A manager of an older release: each report goes alone.
		return w.progressAlone(ctx, addr, ps)
	}
	return wire.BatchReplies(len(ps), resp, err)
}

// progressAlone sends each report as its own message, at the same time.
func (w *Worker) progressAlone(ctx context.Context, addr string, ps []*wire.WorkflowProgress) []wire.Reply {
	out := make([]wire.Reply, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		if !w.spawn(&wg, func() { out[i].Msg, out[i].Err = w.tr.Call(ctx, addr, p) }) {
			out[i].Err = wire.Errorf(wire.CodeUnavailable, "worker %s is shutting down", w.cfg.ID)
		}
	}
	wg.Wait()
	return out
}

// handleDispatchBatch serves a WorkflowDispatchBatch: each dispatch is
// handled as a lone one would be, at the same time (a dispatch is answered
// once its run is prepared, which may read blobs), and answered in order.
func (w *Worker) handleDispatchBatch(ctx context.Context, from transport.Peer, b *wire.WorkflowDispatchBatch) (wire.Message, error) {
	out := &wire.WorkflowDispatchBatchAck{Answers: make([]wire.DispatchAnswer, len(b.Dispatches))}
	var wg sync.WaitGroup
	for i := range b.Dispatches {
		started := w.spawn(&wg, func() {
			resp, err := w.handleDispatch(ctx, from, &b.Dispatches[i])
			switch ack, ok := resp.(*wire.WorkflowDispatchAck); {
			case err != nil:
				out.Answers[i].Err = wire.AsError(err)
			case ok:
				out.Answers[i].Ack = ack
			default:
				out.Answers[i].Err = wire.Errorf(wire.CodeInternal, "dispatch of %s answered with %T", b.Dispatches[i].WorkflowID, resp)
			}
		})
		if !started {
			out.Answers[i].Err = wire.Errorf(wire.CodeUnavailable, "worker %s is shutting down", w.cfg.ID)
		}
	}
	wg.Wait()
	return out, nil
}
