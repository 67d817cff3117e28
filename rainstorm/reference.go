package rainstorm

import (
	"cmp"
	"errors"
	"io"
	"slices"
	"strings"
)

// Operator returns the record operator of a transform stage for one task:
// a built-in, or for exec a program started with opts.
func (cs *CompiledStage) Operator(opts ExecOptions) (Transform, error) {
	if cs.Op == OpExec {
		return cs.NewExec(opts)
	}
	return cs.NewTransform()
}

// Output is a pipeline's result: for an aggregate last stage the rows
// key,value sorted by key; otherwise the output records in input order
// (by input id), which is the order one sequential pass produces.
type Output struct {
	Header     []string
	Rows       []Record
	BadRecords uint64
}

// SortRows puts rows gathered from a pipeline's sinks in Output's order.
func (p *Pipeline) SortRows(rows []Record) {
	if p.Stages[len(p.Stages)-1].Op.Aggregate() {
		slices.SortFunc(rows, func(a, b Record) int { return strings.Compare(a.Fields[0], b.Fields[0]) })
		for i := range rows {
			rows[i].ID = uint64(i)
		}
		return
	}
	slices.SortFunc(rows, func(a, b Record) int { return cmp.Compare(a.ID, b.ID) })
}

// Reference runs the pipeline in one sequential pass over src with one
// task per stage and no machinery: the output a pipeline run must equal.
func Reference(p *Pipeline, src RecordSource, opts ExecOptions) (*Output, error) {
	stages := p.unchained()
	ops := make([]Transform, len(stages))
	var agg *Aggregate
	defer func() {
		for _, op := range ops {
			if op != nil {
				_ = op.Close()
			}
		}
	}()
	for i, cs := range stages {
		var err error
		if cs.Op.Aggregate() {
			agg, err = cs.NewAggregate()
		} else {
			ops[i], err = cs.Operator(opts)
		}
		if err != nil {
			return nil, err
		}
	}
	out := &Output{}
	var failed error
	bad := func(err error) {
		out.BadRecords++
		if p.Spec.FailOnBadRecord && failed == nil {
			failed = err
		}
	}
	batch := make([]Record, 0, 1)
	for {
		rec, err := src.Next()
		var be *BadRecordError
		switch {
		case errors.Is(err, io.EOF):
			if agg != nil {
				out.Rows = agg.Rows()
				out.Header = AggregateHeader
			}
			return out, failed
		case errors.As(err, &be):
			bad(be)
			continue
		case err != nil:
			return nil, err
		}
		recs := append(batch[:0], rec)
		for i, cs := range stages {
			for j := range recs {
				recs[j] = cs.Narrow(recs[j]) // as the stage's tasks receive them
			}
			if cs.Op.Aggregate() {
				agg.Add(recs, bad)
				recs = nil
				break
			}
			recs, err = ops[i].Apply(recs, nil, bad)
			if err != nil {
				return nil, err
			}
		}
		out.Rows = append(out.Rows, recs...)
	}
}
