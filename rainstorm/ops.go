package rainstorm

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Pipeline is a spec resolved against its input's columns: field names
// turned into indexes, patterns compiled. It is immutable and shared by
// every task of the pipeline; NewTransform and NewAggregate give each task
// its own operator.
type Pipeline struct {
	Spec   *Spec
	Stages []*CompiledStage
	// Chain are the stages chained into the source (Spec.Source.Chain),
	// Combiner the first stage as its combiner in the source resolves it
	// (nil unless that stage is Combined; Stages[0] is then its merging
	// side). See chain.go.
	Chain    []*CompiledStage
	Combiner *CompiledStage
}

// CompiledStage is one stage with its fields resolved.
type CompiledStage struct {
	Stage
	// keyIdx is the index of Key in the stage's input, -1 for stages that
	// route by input id.
	keyIdx   int
	fieldIdx int
	fields   []int // project
	equals   string
	re       *regexp.Regexp
	// keep marks the input columns this stage and the stages after it
	// read; nil when every column may matter (an exec stage, a project
	// of everything, a last stage that outputs records, a match over the
	// whole record). See Narrow.
	keep []bool
	// from, for a stage whose tasks receive compact records (compact):
	// the sender's positions of the columns the stage's input keeps, in
	// order; the stage's own indexes are positions in that record. Nil:
	// the stage receives its input's whole width.
	from []int
	// merge: the stage reads a combiner's partials (chain.go).
	merge bool
}

// Compile resolves spec against header, the source's column names (nil for
// a CSV input without a header, whose fields are named by number).
func Compile(spec *Spec, header []string) (*Pipeline, error) {
	if err := spec.Check(header); err != nil {
		return nil, err
	}
	p, err := compile(spec, header)
	if err != nil {
		return nil, err
	}
	if spec.IsChained() {
		// Resolved as the job file wrote it, then split at the source.
		n := len(spec.Source.Chain)
		p.Spec, p.Chain, p.Stages = spec, p.Stages[:n:n], p.Stages[n:]
		if spec.Stages[0].Combined {
			p.Combiner = p.Stages[0]
			p.Stages[0] = p.Combiner.merged()
		}
	}
	p.compact()
	return p, nil
}

// compile resolves a spec (chained ones as the job file wrote them) with
// every stage reading whole-width records.
func compile(spec *Spec, header []string) (*Pipeline, error) {
	if spec.IsChained() {
		flat := spec.Unchained()
		spec = &flat
	}
	cols := header
	if spec.Source.Generate != nil {
		cols = GenerateColumns
	} else if spec.Source.SourceFormat() == FormatLines {
		cols = []string{LineField}
	}
	p := &Pipeline{Spec: spec}
	for i, st := range spec.Stages {
		cs := &CompiledStage{Stage: st, keyIdx: -1, fieldIdx: -1}
		path := fmt.Sprintf("stages[%d]", i)
		var err error
		resolve := func(key, name string) int {
			if err != nil {
				return -1
			}
			var j int
			j, err = columnIndex(cols, name)
			if err != nil {
				err = fmt.Errorf("%s.%s: %w", path, key, err)
			}
			return j
		}
		switch st.Op {
		case OpFilter:
			if st.Field != "" {
				cs.fieldIdx = resolve("field", st.Field)
			}
			if st.Equals != nil {
				cs.equals = *st.Equals
			} else {
				cs.re, err = regexp.Compile(st.Matches)
			}
		case OpProject:
			for _, name := range st.Fields {
				cs.fields = append(cs.fields, resolve("fields", name))
			}
		case OpReplace:
			cs.fieldIdx = resolve("field", st.Field)
			if err == nil {
				cs.re, err = regexp.Compile(st.Pattern)
			}
		case OpCount:
			cs.keyIdx = resolve("key", st.Key)
		case OpSum:
			cs.keyIdx = resolve("key", st.Key)
			cs.fieldIdx = resolve("field", st.Field)
		}
		if err != nil {
			return nil, err
		}
		switch st.Op {
		case OpProject:
			// Without a header the kept columns keep their numbers as names.
			cols = slices.Clone(st.Fields)
		case OpExec:
			cols = nil
		}
		p.Stages = append(p.Stages, cs)
	}
	p.markKept()
	return p, nil
}

// markKept computes each stage's keep set, from the last stage back: a
// stage's input needs the columns it reads itself plus what the stages
// after it read, mapped back through a project.
func (p *Pipeline) markKept() {
	var next []bool // what the stage after reads, in its input's columns; nil = all
	for i := len(p.Stages) - 1; i >= 0; i-- {
		cs := p.Stages[i]
		last := i == len(p.Stages)-1
		var keep []bool
		mark := func(k int) {
			if k < 0 {
				return
			}
			if k >= len(keep) {
				keep = append(keep, make([]bool, k+1-len(keep))...)
			}
			keep[k] = true
		}
		all := false
		switch cs.Op {
		case OpExec:
			all = true
		case OpCount, OpSum:
			mark(cs.keyIdx)
			mark(cs.fieldIdx)
		case OpFilter, OpReplace:
			if last || next == nil || cs.fieldIdx < 0 {
				all = true
				break
			}
			mark(cs.fieldIdx)
			for k, ok := range next {
				if ok {
					mark(k)
				}
			}
		case OpProject:
			if last || next == nil {
				for _, k := range cs.fields {
					mark(k)
				}
				break
			}
			for j, k := range cs.fields {
				if j < len(next) && next[j] {
					mark(k)
				}
			}
		}
		if all {
			keep = nil
		}
		cs.keep = keep
		next = keep
	}
}

// compact makes the stages that run in tasks of their own receive compact
// records: only the columns their input keeps, in order, so that a batch
// carries, and its receiver decodes into its field table, two fields of a
// record where the stage and those after it read two of twenty (an empty
// field still cost a length and a slot). Each such stage's indexes are
// renumbered to positions in the compact record, and its Narrow picks the
// columns from the sender's layout: the source's (and its chain's), a
// project's or an exec's output is whole width; a compact filter's or
// replace's output is its compact input. Stages chained into the source,
// a combiner, and every stage after an exec (whose records may be short,
// which the stage must still see to count them bad) read whole width.
func (p *Pipeline) compact() {
	var sender []int // the previous task stage's output columns by position; nil: whole width
	exec := len(p.Chain) > 0 && slices.ContainsFunc(p.Chain, func(cs *CompiledStage) bool { return cs.Op == OpExec })
	for _, cs := range p.Stages {
		exec = exec || cs.Op == OpExec
		if cs.merge || cs.keep == nil || exec {
			sender = nil // such a stage follows a whole-width output (markKept)
			continue
		}
		var in []int
		for k, ok := range cs.keep {
			if ok {
				in = append(in, k)
			}
		}
		at := func(k int) int { // k's position in the compact record, -1: not kept
			if k < 0 {
				return -1
			}
			i, found := slices.BinarySearch(in, k)
			if !found {
				return -1
			}
			return i
		}
		cs.from = make([]int, len(in))
		for i, k := range in {
			cs.from[i] = k
			if sender != nil {
				cs.from[i] = slices.Index(sender, k)
			}
		}
		cs.keyIdx, cs.fieldIdx = at(cs.keyIdx), at(cs.fieldIdx)
		for j, k := range cs.fields {
			cs.fields[j] = at(k)
		}
		sender = nil
		if cs.Op == OpFilter || cs.Op == OpReplace {
			sender = in
		}
	}
}

// Narrow returns rec as this stage's task should receive it. For a compact
// stage (compact), a record of just the columns its input keeps; else the
// columns no later stage reads are emptied (the record keeps its length,
// so column positions and the checks on them do not change). Records then
// carry, store and replicate only what the rest of the pipeline uses —
// for a filter before a count, the filter's field and the key. rec itself
// is not changed: its fields may be shared with a batch that is stored.
func (cs *CompiledStage) Narrow(rec Record) Record {
	if cs.from != nil {
		fields := make([]string, len(cs.from))
		for i, k := range cs.from {
			if k >= len(rec.Fields) {
				// Too short for a column the stage reads: cut here, so
				// the stage still finds the record short and counts it
				// bad (never the case of a source's validated records).
				fields = fields[:i]
				break
			}
			fields[i] = rec.Fields[k]
		}
		rec.Fields = fields
		return rec
	}
	if cs.keep == nil {
		return rec
	}
	fields := make([]string, len(rec.Fields))
	for k := range min(len(rec.Fields), len(cs.keep)) {
		if cs.keep[k] {
			fields[k] = rec.Fields[k]
		}
	}
	rec.Fields = fields
	return rec
}

// columnIndex finds name among cols; nil cols name fields by number.
func columnIndex(cols []string, name string) (int, error) {
	if cols == nil {
		n, err := parseColumnNumber(name)
		if err != nil || n < 1 {
			return -1, fmt.Errorf("field %q: without a header (or after exec) fields are named by column number from 1", name)
		}
		return n - 1, nil
	}
	if j := slices.Index(cols, name); j >= 0 {
		return j, nil
	}
	return -1, fmt.Errorf("field %q is not in the input's columns (%s)", name, strings.Join(cols, ", "))
}

// Route returns the task of this stage (of tasks tasks) that rec goes to:
// by its key's group for a keyed stage, else by its input id's group.
func (cs *CompiledStage) Route(rec *Record, tasks int) int {
	if cs.keyIdx >= 0 && cs.keyIdx < len(rec.Fields) {
		return GroupTask(KeyGroup(rec.Fields[cs.keyIdx]), tasks)
	}
	return GroupTask(IDGroup(rec.ID), tasks)
}

// FieldError is a record that lacks a field an operator needs, or whose
// value it cannot use (a sum over a non-number): a bad record.
type FieldError struct {
	Stage  string
	Record uint64
	Msg    string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("stage %s: record %d: %s", e.Stage, e.Record+1, e.Msg)
}

// Transform is a record-at-a-time operator (filter, project, replace,
// exec) for one task. Apply appends the outputs of in to out, in input
// order, keeping each output's input id. A *FieldError for one record is
// reported through bad and the record dropped; any other error fails the
// batch (an exec program that keeps crashing).
type Transform interface {
	Apply(in []Record, out []Record, bad func(error)) ([]Record, error)
	Close() error
}

// NewTransform returns the operator of a record stage for one task. exec
// stages need a runner: see NewExec.
func (cs *CompiledStage) NewTransform() (Transform, error) {
	switch cs.Op {
	case OpFilter, OpProject, OpReplace:
		return &builtin{cs: cs}, nil
	case OpExec:
		return nil, fmt.Errorf("stage %s: exec operators are made by NewExec", cs.Name)
	}
	return nil, fmt.Errorf("stage %s: %s is not a record operator", cs.Name, cs.Op)
}

type builtin struct {
	cs  *CompiledStage
	buf bytes.Buffer
	w   *csv.Writer
}

func (b *builtin) Close() error { return nil }

func (b *builtin) Apply(in []Record, out []Record, bad func(error)) ([]Record, error) {
	cs := b.cs
	for i := range in {
		rec := &in[i]
		if cs.fieldIdx >= len(rec.Fields) {
			bad(&FieldError{Stage: cs.Name, Record: rec.ID, Msg: fmt.Sprintf("has %d fields, no field %s", len(rec.Fields), cs.Field)})
			continue
		}
		switch cs.Op {
		case OpFilter:
			var keep bool
			switch {
			case cs.fieldIdx >= 0 && cs.re == nil:
				keep = rec.Fields[cs.fieldIdx] == cs.equals
			case cs.fieldIdx >= 0:
				keep = cs.re.MatchString(rec.Fields[cs.fieldIdx])
			default:
				keep = cs.re.Match(b.line(rec.Fields))
			}
			if keep {
				out = append(out, *rec)
			}
		case OpProject:
			fields := make([]string, len(cs.fields))
			ok := true
			for j, k := range cs.fields {
				if k < 0 {
					continue // a column no later stage reads: left empty, as narrowing leaves it
				}
				if k >= len(rec.Fields) {
					bad(&FieldError{Stage: cs.Name, Record: rec.ID, Msg: fmt.Sprintf("has %d fields, no field %s", len(rec.Fields), cs.Fields[j])})
					ok = false
					break
				}
				fields[j] = rec.Fields[k]
			}
			if ok {
				out = append(out, Record{ID: rec.ID, Fields: fields})
			}
		case OpReplace:
			v := rec.Fields[cs.fieldIdx]
			nv := cs.re.ReplaceAllString(v, cs.With)
			if nv == v {
				out = append(out, *rec)
				continue
			}
			fields := slices.Clone(rec.Fields)
			fields[cs.fieldIdx] = nv
			out = append(out, Record{ID: rec.ID, Fields: fields})
		}
	}
	return out, nil
}

// line is the record as one CSV line (RFC 4180 quoting, no line end):
// what `matches` without a field is tried against.
func (b *builtin) line(fields []string) []byte {
	b.buf.Reset()
	if b.w == nil {
		b.w = csv.NewWriter(&b.buf)
	}
	_ = b.w.Write(fields) // into a bytes.Buffer: cannot fail
	b.w.Flush()
	return bytes.TrimSuffix(b.buf.Bytes(), []byte{'\n'})
}

// FormatRecordsCSV writes records as CSV text, one per line.
func FormatRecordsCSV(header []string, recs []Record) []byte {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	if header != nil {
		_ = w.Write(header)
	}
	for _, r := range recs {
		_ = w.Write(r.Fields)
	}
	w.Flush()
	return buf.Bytes()
}

func (v *aggValue) add(text string) error {
	if n, err := strconv.ParseInt(text, 10, 64); err == nil && v.rat == nil {
		s := v.n + n
		if (n > 0 && s < v.n) || (n < 0 && s > v.n) {
			v.rat = new(big.Rat).SetInt64(v.n)
			v.rat.Add(v.rat, new(big.Rat).SetInt64(n))
			return nil
		}
		v.n = s
		return nil
	}
	if !isDecimal(text) {
		return fmt.Errorf("%q is not a decimal number", truncate(text, 40))
	}
	r, ok := new(big.Rat).SetString(text)
	if !ok {
		return fmt.Errorf("%q is not a decimal number", truncate(text, 40))
	}
	if dot := strings.IndexByte(text, '.'); dot >= 0 {
		v.scale = max(v.scale, len(text)-dot-1)
	}
	if v.rat == nil {
		v.rat = new(big.Rat).SetInt64(v.n)
	}
	v.rat.Add(v.rat, r)
	return nil
}

// isDecimal accepts [+-]digits[.digits]: no exponents, fractions or hex,
// which big.Rat would take but which would make the printed sum ambiguous.
func isDecimal(s string) bool {
	if s != "" && (s[0] == '+' || s[0] == '-') {
		s = s[1:]
	}
	digits, dot := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && !dot:
			dot = true
		default:
			return false
		}
	}
	return digits > 0 && len(s) <= 64
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func (v *aggValue) text() string {
	if v.rat == nil {
		return strconv.FormatInt(v.n, 10)
	}
	return v.rat.FloatString(v.scale)
}

// AggregateHeader is the header of an aggregate's output.
var AggregateHeader = []string{"key", "value"}
