package rainstorm

import (
	"bytes"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"tempest/wire"
)

// Chained moves the stateless stages after the source into it (never the
// last one), marks an aggregate that then follows the source Combined, and
// honours `chain: false`; Expand makes the chained pipeline's tasks.
func TestChainedSpec(t *testing.T) {
	eq := "x"
	filter := Stage{Name: "f", Op: OpFilter, Tasks: 3, Field: "key", Equals: &eq}
	project := Stage{Name: "p", Op: OpProject, Tasks: 2, Fields: []string{"key"}}
	count := Stage{Name: "c", Op: OpCount, Tasks: 3, Key: "key"}
	exec := Stage{Name: "e", Op: OpExec, Tasks: 2, Command: []string{"cat"}}
	byNumber := Stage{Name: "n", Op: OpProject, Fields: []string{"1"}} // after exec
	gen := Source{Generate: &Generate{Records: 10, Keys: 2}}
	off := func(st Stage) Stage { st.NoChain = true; return st }
	combined := func(st Stage) Stage { st.Combined = true; return st }
	for _, c := range []struct {
		name          string
		stages        []Stage
		chain, remain []Stage
	}{
		{"filter-count", []Stage{filter, count}, []Stage{filter}, []Stage{combined(count)}},
		{"filter-project", []Stage{filter, project}, []Stage{filter}, []Stage{project}},
		{"count alone", []Stage{count}, nil, []Stage{combined(count)}},
		{"filter off", []Stage{off(filter), count}, nil, []Stage{off(filter), count}},
		{"count off", []Stage{filter, off(count)}, []Stage{filter}, []Stage{off(count)}},
		{"exec stops the chain", []Stage{filter, exec, byNumber}, []Stage{filter}, []Stage{exec, byNumber}},
	} {
		s := &Spec{Source: gen, Stages: c.stages}
		got := s.Chained()
		if !reflect.DeepEqual(got.Source.Chain, c.chain) || !reflect.DeepEqual(got.Stages, c.remain) {
			t.Errorf("%s: chained to %+v then %+v, want %+v then %+v", c.name, got.Source.Chain, got.Stages, c.chain, c.remain)
			continue
		}
		if again := got.Chained(); !reflect.DeepEqual(again, got) {
			t.Errorf("%s: chaining twice changed the spec", c.name)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("%s: chained spec invalid: %v", c.name, err)
		}
		if back := got.Unchained(); !reflect.DeepEqual(back.Stages, s.Stages) {
			t.Errorf("%s: unchained to %+v, want %+v", c.name, back.Stages, s.Stages)
		}
	}

	// What a chained pipeline needs of a worker names the job file's field.
	withExec := (&Spec{Source: gen, Stages: []Stage{filter, exec, byNumber}}).Chained()
	if needs := PipelineNeeds(&withExec, nil); len(needs) != 1 || needs[0].Field != "stages[1].command" || needs[0].Stage != 1 {
		t.Errorf("needs of a chained exec pipeline: %+v, want stages[1].command of task stage 1", needs)
	}

	b, _ := wire.Marshal(&PipelineParams{Spec: Spec{Source: gen, Stages: []Stage{filter, count}}})
	parts, err := Type{}.Expand(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 1+count.Tasks {
		t.Fatalf("%d parts, want the source and %d count tasks", len(parts), count.Tasks)
	}
	if err := (Type{}).CheckParts(parts); err != nil {
		t.Fatal(err)
	}

	// A chained spec from the network that Chained could not have made.
	for _, bad := range []Spec{
		{Source: Source{Generate: gen.Generate, Chain: []Stage{count}}, Stages: []Stage{project}},
		{Source: gen, Stages: []Stage{filter, combined(count)}},
		{Source: gen, Stages: []Stage{combined(filter), count}},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("invalid chained spec %+v accepted", bad)
		}
	}
}

// TestParseChainOff: `chain: false` in the job file.
func TestParseChainOff(t *testing.T) {
	s, err := parseJob(t, `name: c
workflows:
  - name: g
    type: rainstorm
    source: {generate: {records: 10, keys: 2}}
    stages:
      - {name: f, op: filter, field: key, equals: k1, chain: false}
      - {name: c, op: count, key: key}
`, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Stages[0].NoChain || s.Stages[1].NoChain {
		t.Fatalf("stages %+v", s.Stages)
	}
	if got := s.Chained(); len(got.Source.Chain) != 0 || len(got.Stages) != 2 {
		t.Fatalf("a stage with chain: false was chained: %+v", got)
	}
}

// A combined source sends one partial per key per batch: filter → count
// over 100 keys sends at most 100 records per segment, where unchained it
// sends every record that passes; the count's total is the same.
func TestSourceCombinesEachSegment(t *testing.T) {
	const records, keys, segN = 20000, 100, 1024
	spec := &Spec{Source: Source{Generate: &Generate{Records: records, Keys: keys}}, Stages: []Stage{
		{Name: "f", Op: OpFilter, Field: "key", Matches: "^k[0-9]$"},
		{Name: "c", Op: OpCount, Tasks: 2, Key: "key"}}}
	sent := func(s *Spec) (batches, recs int, total int64) {
		p, err := Compile(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		chain, err := p.NewChain()
		if err != nil {
			t.Fatal(err)
		}
		m, err := NewSourceMachine(SourceConfig{Task: wire.RainstormTask{}, Incarnation: 1, Downstream: 2, Next: p.Stages[0],
			Chain: chain, SegmentRecords: segN, Window: 1 << 10}, nil)
		if err != nil {
			t.Fatal(err)
		}
		g := NewGenerator(s.Source.Generate, 0)
		for {
			idx, want := m.Want()
			if !want {
				break
			}
			seg, err := ReadSegment(g, idx, segN)
			if err != nil {
				t.Fatal(err)
			}
			m.Segment(seg)
		}
		for _, b := range m.Ready().Batches {
			batches++
			recs += len(b.Records)
			for _, r := range b.Records {
				if chain == nil {
					total++
					continue
				}
				n, err := strconv.ParseInt(r.Fields[1], 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				total += n
			}
		}
		return batches, recs, total
	}
	// Unchained, the source sends every record on to the filter's tasks.
	off := *spec
	off.Stages = []Stage{spec.Stages[0], spec.Stages[1]}
	off.Stages[0].NoChain = true
	_, plainRecs, _ := sent(&off)
	chained := spec.Chained()
	batches, recs, total := sent(&chained)
	if total != records/10 || plainRecs != records {
		t.Fatalf("combined counts %d records, want %d; unchained sent %d, want %d", total, records/10, plainRecs, records)
	}
	if segs := (records + segN - 1) / segN; recs > segs*10 || batches != 2*segs {
		t.Fatalf("combined: %d records in %d batches over %d segments, want at most 10 keys a segment", recs, batches, segs)
	}
	t.Logf("records sent: %d combined, %d unchained", recs, plainRecs)
}

// ReadChainedSegment, reading through the chain record by record with the
// reader reusing its field slices, cuts exactly the segments ReadSegment
// then Chain.Apply cut: same partials, bad ids and positions. A source may
// use either, and a restarted one regenerates the same batches.
func TestReadChainedSegmentMatchesApply(t *testing.T) {
	data := append(bytes.Clone(sharedData(t, fullCSV)), "1,2,3\n\"unterminated,4\n"...)
	eq := "Punched Telespar"
	spec := (&Spec{Source: Source{File: "signs.csv", Header: true}, Stages: []Stage{
		{Name: "telespar", Op: OpFilter, Field: "Sign_Post", Equals: &eq},
		{Name: "n", Op: OpSum, Key: "Category", Field: "X"}}}).Chained()
	open := func(reuse bool) (*Reader, *Chain) {
		rd, err := NewReader(bytes.NewReader(data), ReaderOptions{Format: FormatCSV, Header: true})
		if err != nil {
			t.Fatal(err)
		}
		if reuse {
			rd.ReuseFields()
		}
		p, err := Compile(&spec, rd.Header())
		if err != nil {
			t.Fatal(err)
		}
		c, err := p.NewChain()
		if err != nil || !c.Streams() {
			t.Fatalf("chain %v, %v: want one ending in a combiner", c, err)
		}
		return rd, c
	}
	plainRd, plainChain := open(false)
	rd, chain := open(true)
	const n = 700
	segs, bad := 0, 0
	for idx := uint64(0); ; idx++ {
		want, err := ReadSegment(plainRd, idx, n)
		if err != nil {
			t.Fatal(err)
		}
		if want.Records, err = plainChain.Apply(want.Records, func(error) { t.Fatal("refused") }); err != nil {
			t.Fatal(err)
		}
		got, err := ReadChainedSegment(rd, idx, n, chain)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Chained || got.Start != want.Start || got.End != want.End || got.EOF != want.EOF ||
			!slices.Equal(got.Bad, want.Bad) || !reflect.DeepEqual(got.Records, want.Records) {
			t.Fatalf("segment %d read through the chain:\n got %+v\nwant %+v", idx, got, want)
		}
		segs++
		bad += len(got.Bad)
		if got.EOF {
			break
		}
	}
	if segs < 20 || bad != 2 {
		t.Fatalf("%d segments, %d bad records: the input is not what the test means", segs, bad)
	}
}

// A record the combiner refuses (a sum over a value that is not a number)
// counts with the source's bad records, by its input id, in the segment it
// belongs to; with on_bad_record: fail it fails the source.
func TestCombinerRefusalIsABadRecord(t *testing.T) {
	data := []byte("k,v\na,1\nb,x\na,2.5\n")
	for _, fail := range []bool{false, true} {
		spec := (&Spec{Source: Source{Path: "/in.csv", Header: true}, FailOnBadRecord: fail,
			Stages: []Stage{{Name: "s", Op: OpSum, Key: "k", Field: "v"}}}).Chained()
		rd, err := NewReader(bytes.NewReader(data), ReaderOptions{Format: FormatCSV, Header: true})
		if err != nil {
			t.Fatal(err)
		}
		rd.SetKeep([]bool{true, true})
		rd.ReuseFields()
		p, err := Compile(&spec, rd.Header())
		if err != nil {
			t.Fatal(err)
		}
		chain, err := p.NewChain()
		if err != nil {
			t.Fatal(err)
		}
		m, err := NewSourceMachine(SourceConfig{Incarnation: 1, Downstream: 1, Next: p.Stages[0], Chain: chain,
			FailOnBadRecord: fail}, nil)
		if err != nil {
			t.Fatal(err)
		}
		seg, err := ReadChainedSegment(rd, 0, DefaultSegmentRecords, chain)
		if err != nil {
			t.Fatal(err)
		}
		m.Segment(seg)
		r := m.Ready()
		if fail {
			if r.Failed == nil {
				t.Fatal("on_bad_record: fail, and a value that is not a number did not fail the source")
			}
			continue
		}
		bad, first := m.BadRecords()
		if r.Failed != nil || bad != 1 || !slices.Equal(first, []uint64{1}) {
			t.Fatalf("failed %v, bad %d %v: want record 2 (id 1) counted bad", r.Failed, bad, first)
		}
		if len(r.Batches) != 1 || !reflect.DeepEqual(r.Batches[0].Records, []Record{{ID: 0, Fields: []string{"a", "3.5", "2"}}}) {
			t.Fatalf("sent %+v, want a's partial sum 3.5 of 2 records", r.Batches)
		}
	}
}
