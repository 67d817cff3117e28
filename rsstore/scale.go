package rsstore

import (
	"context"
	"slices"

	"tempest/wire"
)

// A pipeline's autoscaling record (wire.RainstormScale) rides on its
// header record: replicated with a group, read in a sync, kept in the
// same bucket. Whatever path brings a header in, the newest scale record
// of the ones met is kept (newestLocked), so an open's header, written
// without one, never erases a decision, and a sync that meets a peer
// behind keeps the later decision.

// Scale returns the pipeline's stored autoscaling record (nil when none).
// The caller may keep it: the slices are copies.
func (s *Store) Scale(job, workflow string) *wire.RainstormScale {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := s.headers[[2]string{job, workflow}].Scale
	if sc == nil {
		return nil
	}
	c := *sc
	c.Want, c.Resizes = slices.Clone(sc.Want), slices.Clone(sc.Resizes)
	return &c
}

// RecordScale stores the pipeline's autoscaling record here and on a
// majority of the managers, in term, which this manager leads and has
// synced: it returns only once the record is as durable as a checkpoint
// (or with the error that it may not be). sc should be newer than the
// stored one (wire.RainstormScale.Newer); an older one is dropped.
func (s *Store) RecordScale(ctx context.Context, term uint64, job, workflow string, sc *wire.RainstormScale) error {
	if !s.Synced(term) {
		return wire.Errorf(wire.CodeUnavailable, "this manager does not lead term %d, or has not read its peers' checkpoints in it", term)
	}
	return s.replicate(ctx, term, nil, nil, []wire.RainstormHeader{{Job: job, Workflow: workflow, Scale: sc}})
}

// newest returns hs as they should be stored: each with the column names
// of the last that has them and the newest scale record of the stored
// header and every earlier one of hs for the same pipeline.
func (s *Store) newest(hs []wire.RainstormHeader) []wire.RainstormHeader {
	if len(hs) == 0 {
		return hs
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]wire.RainstormHeader, len(hs))
	seen := map[[2]string]wire.RainstormHeader{}
	for i, h := range hs {
		k := [2]string{h.Job, h.Workflow}
		prev, ok := seen[k]
		if !ok {
			prev = s.headers[k]
		}
		if !h.HasHeader && prev.HasHeader {
			h.Header, h.HasHeader = prev.Header, true
		}
		if !h.Scale.Newer(prev.Scale) {
			h.Scale = prev.Scale
		}
		seen[k] = h
		out[i] = h
	}
	return out
}
