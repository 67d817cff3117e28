package manager

import (
	"context"
	"slices"
	"time"

	"tempest/api"
	"tempest/wire"
)

// Durable autoscaling decisions (docs/rainstorm.md, "Leader changes"). A
// decision is stored on a majority of the managers, in the pipeline's
// record of the replicated RainStorm store, before the source hears of it
// in a route answer: the store is what a new leader reads (its sync) before
// it answers any task, and its term fencing already keeps a deposed
// leader's late writes out. A new leader loads the record once per term,
// stores the sizes it holds again in its own term (the copy it read may be
// a minority's, of a write its leader dropped), and goes on asking the
// source for them until the source's checkpoint records them; the
// decisions it holds are the status's history whoever leads.

// rsScaleRecordLocked is the record of ps as it stands, one write later
// than the last this leader made or loaded, in term.
func rsScaleRecordLocked(ps *rsPipeScale, term uint64) *wire.RainstormScale {
	sc := &wire.RainstormScale{Term: term, Seq: ps.seq + 1, Want: slices.Clone(ps.want)}
	for _, r := range ps.resizes {
		sc.Resizes = append(sc.Resizes, rsResizeToWire(r))
	}
	return sc
}

// rsLoadScaleLocked fills a term's fresh pipeline state from the stored
// record, given the epochs the source's durable checkpoint records: the
// decisions, with the figures this manager measured of them when it led
// before, and the sizes an earlier leader asked for, to be stored again in
// this term before the source is asked for them (rsStoreScale).
func rsLoadScaleLocked(ps *rsPipeScale, sc *wire.RainstormScale, epochs []wire.RainstormEpoch) {
	ps.loaded = true
	// Whatever an earlier load inherited is dropped first: with no record
	// stored, nobody asks the source for anything, and sizes kept from
	// an earlier term would be asked for on that term's word alone.
	ps.inherit, ps.inheritAt = nil, 0
	if sc == nil {
		return
	}
	ps.seq = sc.Seq
	if n := len(sc.Resizes); len(sc.Want) > 0 && n > 0 && sc.Resizes[n-1].Epoch == uint64(len(epochs)) {
		// The wanted sizes are the last decision's, taken when the
		// source recorded the epochs it records now: still the next
		// epoch's sizes. Once the source records them, or any other
		// epoch, they are history.
		ps.inherit, ps.inheritAt = slices.Clone(sc.Want), len(epochs)
	}
	mine := map[rsResizeKey]api.PipelineResize{}
	for _, r := range ps.resizes {
		mine[rsResizeKey{r.Stage, r.Epoch}] = r
	}
	ps.resizes = ps.resizes[:0]
	for _, w := range sc.Resizes {
		r := rsResizeFromWire(w)
		if m, ok := mine[rsResizeKey{r.Stage, r.Epoch}]; ok && m.At.Equal(r.At) {
			// Figures this manager measured and the record lacks (its
			// write was lost with a term): kept, and stored with the
			// term's next write.
			if r.InForce == 0 {
				r.InForce, r.GroupsMoved = m.InForce, m.GroupsMoved
			}
			if r.Handover == 0 {
				r.KeysMoved, r.BytesMoved, r.Handover = m.KeysMoved, m.BytesMoved, m.Handover
			}
		}
		ps.resizes = append(ps.resizes, r)
	}
}

// rsScaleWrite is a write of a pipeline's autoscaling record the scale
// loop asks for: with decided, a decision; with inherited, the sizes an
// earlier leader asked for, stored again in this term; figures is the
// count of measured figures rec holds (rsPipeScale.figures).
type rsScaleWrite struct {
	rec       *wire.RainstormScale
	decided   *api.PipelineResize
	inherited bool
	figures   uint64
	at        time.Time // the scale round that asked for it
}

// rsStoreScale stores w's record for pipeline key on a majority, then, if
// this leader's term still holds, makes it the pipeline's state: only then
// is a wanted size asked of the source. A record that could not be stored
// is dropped, decision and all: the scaler decides again after its
// cooldown. Its write number is spent all the same: the record may be on
// some managers (this one's disk, a peer whose answer was lost), and the
// term's next write must supersede that copy everywhere, not tie with it
// (a store keeps the copy it met first of one (term, write)), or a sync
// that reads the copy brings back a decision nobody acted on.
func (m *Manager) rsStoreScale(ctx context.Context, term uint64, key rsPipeKey, w rsScaleWrite) bool {
	rec := w.rec
	err := m.rs.RecordScale(ctx, term, key.job, key.wf, rec)
	s := &m.rsScale
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := s.pipeNoTermLocked(key)
	if ps.term != term {
		return false
	}
	if err != nil {
		ps.seq = max(ps.seq, rec.Seq)
		wait := ps.retry.failed(w.at, err)
		m.log.Warn("rainstorm: autoscale record not stored on a majority; dropped", "job_id", key.job, "workflow", key.wf,
			"err", err, "failures", ps.retry.failures, "next_write_in", wait)
		return false
	}
	ps.retry = rsRetry{}
	if rec.Seq <= ps.seq {
		return false
	}
	ps.seq = rec.Seq
	ps.storedFigures = max(ps.storedFigures, w.figures)
	if w.inherited && ps.inherit != nil {
		ps.want, ps.inherit = slices.Clone(rec.Want), nil
		m.log.Info("rainstorm: autoscale continues an earlier leader's decision", "job_id", key.job, "workflow", key.wf, "want", ps.want)
	}
	if decided := w.decided; decided != nil {
		ps.want = slices.Clone(rec.Want)
		ps.resizes = rsKeepHistory(append(ps.resizes, *decided))
	}
	return true
}

func rsResizeToWire(r api.PipelineResize) wire.RainstormResize {
	return wire.RainstormResize{At: r.At.UnixNano(), Stage: r.Stage, From: r.From, To: r.To, Decision: r.Decision,
		Epoch: r.Epoch, InForce: int64(r.InForce), GroupsMoved: r.GroupsMoved,
		KeysMoved: r.KeysMoved, BytesMoved: r.BytesMoved, Handover: int64(r.Handover)}
}

func rsResizeFromWire(r wire.RainstormResize) api.PipelineResize {
	return api.PipelineResize{At: time.Unix(0, r.At).UTC(), Stage: r.Stage, From: r.From, To: r.To, Decision: r.Decision,
		Epoch: r.Epoch, InForce: time.Duration(r.InForce), GroupsMoved: r.GroupsMoved,
		KeysMoved: r.KeysMoved, BytesMoved: r.BytesMoved, Handover: time.Duration(r.Handover)}
}

// rsStoredResizes is the decisions the store holds for a pipeline, for the
// status of one this leader has no state of (a job that ended before it
// led).
func (m *Manager) rsStoredResizes(job, wf string) []api.PipelineResize {
	var out []api.PipelineResize
	if sc := m.rs.Scale(job, wf); sc != nil {
		for _, r := range sc.Resizes {
			out = append(out, rsResizeFromWire(r))
		}
	}
	return out
}
