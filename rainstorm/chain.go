package rainstorm

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"tempest/workflow"
)

// Operator chaining, as Flink chains operators: the stateless stages that
// follow the source run inside the source task, and an aggregate first
// stage gets a combiner there, so a filter → count pipeline sends one
// small (key, partial) batch per count task per segment instead of every
// record, each record encoded, sealed, sent, decoded and checkpointed once
// more per stage.
//
// Exactly-once is unchanged because a source's batch j stays a function of
// the input: segment j is read, run through the chained operators (which
// are deterministic per record) and combined (keys in sorted order, exact
// sums), so a restarted source regenerates identical batches (I1), and
// sequence de-duplication and replay work as before. See docs/rainstorm.md.

// chainable reports whether a stage may run inside the source task: a
// built-in record operator (an exec program is a process of its own and
// runs in its own tasks) not switched off by `chain: false`.
func chainable(st *Stage) bool {
	if st.Autoscale != nil {
		return false // a stage that resizes runs in tasks of its own
	}
	switch st.Op {
	case OpFilter, OpProject, OpReplace:
		return !st.NoChain
	}
	return false
}

// Chained returns the spec as it runs: the chainable stages that follow
// the source moved into Source.Chain — never the last stage, which makes
// the output — and an aggregate that then follows the source directly
// marked Combined (unless `chain: false`). The tasks of a chained stage
// are not run. A spec already chained is returned as it is, so Chained is
// idempotent; the result is what the managers store and dispatch.
func (s *Spec) Chained() Spec {
	out := *s
	if s.IsChained() {
		return out
	}
	k := 0
	for k < len(s.Stages)-1 && chainable(&s.Stages[k]) {
		k++
	}
	if k > 0 {
		out.Source.Chain = slices.Clone(s.Stages[:k])
	}
	out.Stages = slices.Clone(s.Stages[k:])
	if len(out.Stages) > 0 && out.Stages[0].Op.Aggregate() && !out.Stages[0].NoChain {
		out.Stages[0].Combined = true
	}
	return out
}

// Unchained is the pipeline as the job file wrote it: the chained stages
// back in front of the stages, no combiner. Checks and compilation resolve
// fields against it, so a chained spec means what its job file said.
func (s *Spec) Unchained() Spec {
	out := *s
	out.Source.Chain = nil
	out.Stages = append(slices.Clone(s.Source.Chain), s.Stages...)
	for i := range out.Stages {
		out.Stages[i].Combined = false
	}
	return out
}

// IsChained reports whether stages run in the source task or a combiner
// feeds the first stage (Chained did something).
func (s *Spec) IsChained() bool {
	if len(s.Source.Chain) > 0 {
		return true
	}
	for i := range s.Stages {
		if s.Stages[i].Combined {
			return true
		}
	}
	return false
}

// checkChain refuses a chained spec Chained could not have made (it comes
// from the network).
func (s *Spec) checkChain() error {
	var errs workflow.FieldErrors
	for i := range s.Source.Chain {
		if !chainable(&s.Source.Chain[i]) {
			errs = append(errs, workflow.FieldError{Path: workflow.IndexPath("source.chain", i),
				Message: fmt.Sprintf("a %s stage cannot run in the source task", s.Source.Chain[i].Op)})
		}
	}
	if len(s.Source.Chain) > 0 && len(s.Stages) == 0 {
		errs = append(errs, workflow.FieldError{Path: "stages", Message: "a chained pipeline keeps its last stage"})
	}
	for i := range s.Stages {
		st := &s.Stages[i]
		if st.Combined && (i != 0 || !st.Op.Aggregate() || st.NoChain) {
			errs = append(errs, workflow.FieldError{Path: workflow.IndexPath("stages", i) + ".combined",
				Message: "only an aggregate first stage is fed by a combiner"})
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// Chain is what a source task runs on each segment before routing it: the
// chained stages' operators, then the combiner of an aggregate first
// stage. One per source task; not safe for concurrent use.
type Chain struct {
	transforms []Transform
	bufs       [2][]Record
	comb       *combiner
}

// NewChain returns the source task's chain, nil when the pipeline chains
// nothing into its source.
func (p *Pipeline) NewChain() (*Chain, error) {
	if len(p.Chain) == 0 && p.Combiner == nil {
		return nil, nil
	}
	c := &Chain{}
	for _, cs := range p.Chain {
		t, err := cs.NewTransform()
		if err != nil {
			return nil, err
		}
		c.transforms = append(c.transforms, t)
	}
	if p.Combiner != nil {
		c.comb = &combiner{cs: p.Combiner, vals: map[string]*partial{}}
	}
	return c, nil
}

// Apply runs a segment's records through the chain and returns what the
// source sends: new records (the caller may keep them in batches), in
// input order, or for a combiner one (key, partial) record per key in key
// order. A record an operator refuses goes to bad; any other error fails
// the segment.
func (c *Chain) Apply(in []Record, bad func(error)) ([]Record, error) {
	recs := in
	for i, t := range c.transforms {
		// The last result leaves in batches, so only the ones between
		// operators reuse a buffer.
		last := i == len(c.transforms)-1 && c.comb == nil
		var buf []Record
		if !last {
			buf = c.bufs[i%2][:0]
		}
		out, err := t.Apply(recs, buf, bad)
		if err != nil {
			return nil, err
		}
		if !last {
			c.bufs[i%2] = out
		}
		recs = out
	}
	if c.comb != nil {
		recs = c.comb.combine(recs, bad)
	}
	for i := range c.bufs {
		clear(c.bufs[i])
		c.bufs[i] = c.bufs[i][:0]
	}
	return recs, nil
}

// Streams reports whether the chain ends in a combiner, which keeps no
// record it is given: the source then reads a segment through it record by
// record (ReadChainedSegment), and the reader may reuse its field slices.
func (c *Chain) Streams() bool { return c != nil && c.comb != nil }

// ReadChainedSegment is ReadSegment through a chain that Streams: each
// well-formed record goes through the chained operators and into the
// combiner as it is read, and the segment's Records are the combiner's
// partials (Chained). The result is what Chain.Apply makes of the records
// ReadSegment returns, so a source cuts the same batches either way; src
// may reuse a record's fields once the next is read.
func ReadChainedSegment(src RecordSource, index uint64, n int, c *Chain) (Segment, error) {
	if !c.Streams() {
		return Segment{}, errors.New("rainstorm: a segment is read through a chain only when it ends in a combiner")
	}
	seg := Segment{Index: index, Start: src.Pos(), Chained: true}
	bad := func(err error) {
		var fe *FieldError
		if errors.As(err, &fe) {
			seg.Refused = append(seg.Refused, fe.Record)
		}
		if seg.RefusedErr == nil {
			seg.RefusedErr = err
		}
	}
	c.comb.reset()
	defer func() {
		for i := range c.bufs {
			clear(c.bufs[i]) // the reader's reused fields
		}
	}()
	one := make([]Record, 1)
	end := (index + 1) * uint64(n)
	var br *BadRecordError // one for the segment, as in ReadSegment
	for src.Pos().Record < end {
		rec, err := src.Next()
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			seg.EOF = true
			seg.End = src.Pos()
			seg.Records = c.comb.result()
			return seg, nil
		case errors.As(err, &br):
			seg.Bad = append(seg.Bad, br.Record)
			continue
		case err != nil:
			return seg, err
		}
		one[0] = rec
		recs := one
		for i, t := range c.transforms {
			out, err := t.Apply(recs, c.bufs[i%2][:0], bad)
			if err != nil {
				return seg, err
			}
			c.bufs[i%2] = out
			recs = out
		}
		c.comb.add(recs, bad)
	}
	seg.End = src.Pos()
	seg.Records = c.comb.result()
	return seg, nil
}

// Close closes the chained operators.
func (c *Chain) Close() error {
	var errs []error
	for _, t := range c.transforms {
		errs = append(errs, t.Close())
	}
	return errors.Join(errs...)
}

// partial is one key's pre-aggregate within a segment.
type partial struct {
	first uint64 // the id of the key's first record in the segment
	v     aggValue
}

// combiner pre-aggregates a segment for an aggregate stage (cs resolved
// against the records' columns, as the stage would be without chaining).
type combiner struct {
	cs   *CompiledStage
	vals map[string]*partial
	keys []string
}

// combine returns one record per key of in, sorted by key: (key, count)
// for a count, (key, sum, count) for a sum — what mergeAdd folds in. Sorted
// keys and exact sums make the result a function of in alone.
func (c *combiner) combine(in []Record, bad func(error)) []Record {
	c.reset()
	c.add(in, bad)
	return c.result()
}

func (c *combiner) reset() {
	clear(c.vals)
	c.keys = c.keys[:0]
}

// add folds records in. It keeps no record, only the keys (strings, which
// a reader never reuses), so its input may be reused afterwards.
func (c *combiner) add(in []Record, bad func(error)) {
	cs := c.cs
	for i := range in {
		rec := &in[i]
		if cs.keyIdx >= len(rec.Fields) || cs.fieldIdx >= len(rec.Fields) {
			bad(&FieldError{Stage: cs.Name, Record: rec.ID, Msg: fmt.Sprintf("has %d fields, too few for key %s", len(rec.Fields), cs.Key)})
			continue
		}
		var text string
		if cs.Op == OpSum {
			text = strings.TrimSpace(rec.Fields[cs.fieldIdx])
			if err := checkAddend(text); err != nil {
				bad(&FieldError{Stage: cs.Name, Record: rec.ID, Msg: fmt.Sprintf("field %s: %v", cs.Field, err)})
				continue
			}
		}
		key := rec.Fields[cs.keyIdx]
		p := c.vals[key]
		if p == nil {
			p = &partial{first: rec.ID}
			c.vals[key] = p
			c.keys = append(c.keys, key)
		}
		if cs.Op == OpSum {
			_ = p.v.add(text) // checked above
		}
		p.v.count++
	}
}

// result is the partials of what add took since reset, sorted by key.
func (c *combiner) result() []Record {
	cs := c.cs
	slices.Sort(c.keys)
	out := make([]Record, 0, len(c.keys))
	for _, key := range c.keys {
		p := c.vals[key]
		count := strconv.FormatInt(p.v.count, 10)
		fields := []string{key, count}
		if cs.Op == OpSum {
			fields = []string{key, p.v.text(), count}
		}
		out = append(out, Record{ID: p.first, Fields: fields})
	}
	return out
}

// unchained lists the stages as the job file wrote them: the chained ones,
// then an aggregate as it would run without its combiner.
func (p *Pipeline) unchained() []*CompiledStage {
	out := slices.Concat(p.Chain, p.Stages)
	if p.Combiner != nil {
		out[len(p.Chain)] = p.Combiner
	}
	return out
}

// merged is an aggregate stage as it runs behind a combiner: it reads the
// combiner's (key, partial) records.
func (cs *CompiledStage) merged() *CompiledStage {
	m := *cs
	m.keyIdx, m.fieldIdx, m.keep, m.merge = 0, -1, nil, true
	return &m
}

// mergeAdd folds in a combiner's partials; a record that is not one (it
// cannot come from a combiner of this pipeline) goes to bad.
func (a *Aggregate) mergeAdd(in []Record, bad func(error)) {
	cs := a.cs
	want := 2
	if cs.Op == OpSum {
		want = 3
	}
	for i := range in {
		rec := &in[i]
		if len(rec.Fields) != want {
			bad(&FieldError{Stage: cs.Name, Record: rec.ID, Msg: fmt.Sprintf("a partial has %d fields, want %d", len(rec.Fields), want)})
			continue
		}
		n, err := strconv.ParseInt(rec.Fields[want-1], 10, 64)
		if err != nil || n < 1 {
			bad(&FieldError{Stage: cs.Name, Record: rec.ID, Msg: fmt.Sprintf("a partial's count %q", truncate(rec.Fields[want-1], 40))})
			continue
		}
		if cs.Op == OpSum {
			if err := checkAddend(rec.Fields[1]); err != nil {
				bad(&FieldError{Stage: cs.Name, Record: rec.ID, Msg: fmt.Sprintf("a partial's sum: %v", err)})
				continue
			}
		}
		key := rec.Fields[0]
		v, g := a.value(key)
		if cs.Op == OpSum {
			_ = v.add(rec.Fields[1]) // checked above
		}
		v.count += n
		a.touch(key, v, g)
	}
}
