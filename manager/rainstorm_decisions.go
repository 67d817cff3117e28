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
// leader's late writes out. A new leader loads the record once per term
// and goes on asking the source for the sizes it holds until the source's
// checkpoint records them; the decisions it holds are the status's
// history whoever leads.

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
// record: the sizes still to ask for, unless the source recorded them
// already, and the decisions, with the figures this manager measured of
// them when it led before.
func rsLoadScaleLocked(ps *rsPipeScale, sc *wire.RainstormScale, recorded []int) {
	ps.loaded = true
	if sc == nil {
		return
	}
	ps.seq = sc.Seq
	if len(sc.Want) > 0 && !slices.Equal(sc.Want, recorded) {
		ps.want = slices.Clone(sc.Want)
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

// rsStoreScale stores rec for pipeline key on a majority, then, if this
// leader's term still holds, makes it the pipeline's state: only then is
// a wanted size asked of the source. A record that could not be stored is
// dropped, decision and all: the scaler decides again after its cooldown.
// figures is the pipeline's count of measured figures rec holds
// (rsPipeScale.figures): once stored, no write is owed for them.
func (m *Manager) rsStoreScale(ctx context.Context, term uint64, key rsPipeKey, rec *wire.RainstormScale, decided *api.PipelineResize, figures uint64) bool {
	if err := m.rs.RecordScale(ctx, term, key.job, key.wf, rec); err != nil {
		m.log.Warn("rainstorm: autoscale record not stored on a majority; dropped", "job_id", key.job, "workflow", key.wf, "err", err)
		return false
	}
	s := &m.rsScale
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := s.pipeNoTermLocked(key)
	if ps.term != term || rec.Seq <= ps.seq {
		return false
	}
	ps.seq = rec.Seq
	ps.storedFigures = max(ps.storedFigures, figures)
	if decided != nil {
		ps.want = slices.Clone(rec.Want)
		ps.resizes = append(ps.resizes, *decided)
		if len(ps.resizes) > rsResizeHistory {
			ps.resizes = slices.Delete(ps.resizes, 0, len(ps.resizes)-rsResizeHistory)
		}
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
