package rainstorm

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"tempest/wire"
)

// millionCSV writes a 1,000,000-record CSV made from the full traffic-signs
// file (header and BOM kept, records repeated with new OBJECTIDs) into dir.
func millionCSV(b *testing.B, dir string) string {
	b.Helper()
	data := sharedData(b, fullCSV)
	r := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(data, utf8BOM)))
	all, err := r.ReadAll()
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, "signs-1m.csv")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	bw.Write(utf8BOM)
	w := csv.NewWriter(bw)
	w.Write(all[0])
	rec := make([]string, len(all[0]))
	for i := range 1_000_000 {
		copy(rec, all[1+i%(len(all)-1)])
		rec[2] = strconv.Itoa(i + 1) // OBJECTID
		w.Write(rec)
	}
	w.Flush()
	if err := errors.Join(w.Error(), bw.Flush(), f.Close()); err != nil {
		b.Fatal(err)
	}
	return path
}

// benchPipeline runs a pipeline's machines in one goroutine with messages
// delivered in order and checkpoints written to a MemStore that encodes
// them: the machinery's own cost, without a network. One tick (and so at
// most one checkpoint per task) per tickSegments source segments.
func benchPipeline(b *testing.B, path string, spec *Spec) ([]Record, int64) {
	const segRecords, tickSegments = 4096, 4
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	ropts := ReaderOptions{Format: FormatCSV, Header: true}
	rd, err := NewReader(f, ropts)
	if err != nil {
		b.Fatal(err)
	}
	p, err := Compile(spec, rd.Header())
	if err != nil {
		b.Fatal(err)
	}
	store := NewMemStore()
	store.Encode = true
	ntasks := func(stage int) int {
		if stage == 0 {
			return 1
		}
		return p.Stages[stage-1].TaskCount()
	}
	id := func(stage, i int) wire.RainstormTask { return wire.RainstormTask{Stage: stage, Index: i} }
	for st := 0; st <= len(p.Stages); st++ {
		for i := range ntasks(st) {
			if _, err := store.Fence(id(st, i), 1); err != nil {
				b.Fatal(err)
			}
		}
	}
	src, err := NewSourceMachine(SourceConfig{Task: id(0, 0), Incarnation: 1, Downstream: ntasks(1), Next: p.Stages[0],
		SegmentRecords: segRecords, Window: 16, CheckpointTicks: 1}, nil)
	if err != nil {
		b.Fatal(err)
	}
	stages := make([][]*TaskMachine, len(p.Stages)+1)
	for st := 1; st <= len(p.Stages); st++ {
		for i := range ntasks(st) {
			cs := p.Stages[st-1]
			cfg := TaskConfig{Task: id(st, i), Incarnation: 1, Upstream: ntasks(st - 1), Stage: cs,
				AtLeastOnce: spec.AtLeastOnce, CheckpointTicks: 1, ResendTicks: 1 << 30}
			if st < len(p.Stages) {
				cfg.Downstream, cfg.Next = ntasks(st+1), p.Stages[st]
			}
			if !cs.Op.Aggregate() {
				cfg.Transform, _ = cs.NewTransform()
			}
			m, err := NewTaskMachine(cfg, nil)
			if err != nil {
				b.Fatal(err)
			}
			stages[st] = append(stages[st], m)
		}
	}
	type delivery struct {
		stage int
		r     Ready
	}
	var queue []delivery
	var drain func(stage int, r Ready)
	drain = func(stage int, r Ready) {
		if r.Failed != nil {
			b.Fatal(r.Failed)
		}
		for _, bt := range r.Batches {
			m := stages[stage+1][bt.To]
			m.Batch(bt)
			queue = append(queue, delivery{stage + 1, m.Ready()})
		}
		for _, a := range r.Acks {
			if stage == 1 {
				src.Ack(a)
				queue = append(queue, delivery{0, src.Ready()})
			} else {
				m := stages[stage-1][a.To]
				m.Ack(a)
				queue = append(queue, delivery{stage - 1, m.Ready()})
			}
		}
		if c := r.Checkpoint; c != nil {
			ack := store.Put(c)
			if stage == 0 {
				src.CheckpointResult(ack)
				queue = append(queue, delivery{0, src.Ready()})
			} else {
				m := stages[stage][c.Task.Index]
				m.CheckpointResult(ack)
				queue = append(queue, delivery{stage, m.Ready()})
			}
		}
	}
	flush := func() {
		for len(queue) > 0 {
			d := queue[0]
			queue = queue[1:]
			drain(d.stage, d.r)
		}
	}
	last := len(p.Stages)
	done := func() bool {
		for i := range ntasks(last) {
			if !store.Done(id(last, i)) {
				return false
			}
		}
		return true
	}
	for !done() {
		for range tickSegments {
			idx, ok := src.Want()
			if !ok {
				break
			}
			seg, err := ReadSegment(rd, idx, segRecords)
			if err != nil {
				b.Fatal(err)
			}
			src.Segment(seg)
			queue = append(queue, delivery{0, src.Ready()})
			flush()
		}
		src.Tick()
		queue = append(queue, delivery{0, src.Ready()})
		for st := 1; st <= last; st++ {
			for _, m := range stages[st] {
				m.Tick()
				queue = append(queue, delivery{st, m.Ready()})
			}
		}
		flush()
	}
	var rows []Record
	for i := range ntasks(last) {
		rows = append(rows, store.Output(id(last, i))...)
	}
	p.SortRows(rows)
	return rows, store.Bytes
}

// BenchmarkPipeline measures records/s through source → filter → count
// (3 tasks each) over 1,000,000 records, exactly-once and at-least-once,
// beside one sequential pass (Reference) over the same file.
func BenchmarkPipeline(b *testing.B) {
	path := millionCSV(b, b.TempDir())
	eq := "Punched Telespar"
	spec := func(eo bool) *Spec {
		return &Spec{Source: Source{File: "signs-1m.csv", Header: true}, AtLeastOnce: !eo, Stages: []Stage{
			{Name: "telespar", Op: OpFilter, Tasks: 3, Field: "Sign_Post", Equals: &eq},
			{Name: "count", Op: OpCount, Tasks: 3, Key: "Category"}}}
	}
	var want []Record
	b.Run("sequential", func(b *testing.B) {
		for b.Loop() {
			f, err := os.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			rd, err := NewReader(f, ReaderOptions{Format: FormatCSV, Header: true})
			if err != nil {
				b.Fatal(err)
			}
			p, _ := Compile(spec(true), rd.Header())
			out, err := Reference(p, rd, ExecOptions{})
			f.Close()
			if err != nil {
				b.Fatal(err)
			}
			want = out.Rows
		}
		b.ReportMetric(1e6*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	})
	for _, mode := range []struct {
		name string
		eo   bool
	}{{"exactly-once", true}, {"at-least-once", false}} {
		b.Run(mode.name, func(b *testing.B) {
			var ckptBytes int64
			for b.Loop() {
				rows, n := benchPipeline(b, path, spec(mode.eo))
				ckptBytes = n
				if want != nil && mode.eo && !equalRows(rows, want) {
					b.Fatalf("output differs from the sequential pass")
				}
			}
			b.ReportMetric(1e6*float64(b.N)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64(ckptBytes), "checkpoint-bytes")
		})
	}
}

func equalRows(a, b []Record) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || len(a[i].Fields) != len(b[i].Fields) {
			return false
		}
		for j := range a[i].Fields {
			if a[i].Fields[j] != b[i].Fields[j] {
				return false
			}
		}
	}
	return true
}

// BenchmarkNarrowedBatch measures what a source does with each record
// after reading it — narrow it for the next stage, cut it into a batch
// and encode that once — and what the receiver does — decode the batch
// into its field table — over the full traffic-signs file in 1024-record
// batches, for compact records (the columns the rest of the pipeline
// reads, alone) and, for comparison, the whole-width narrowing the layout
// replaced (every column, the unread ones empty). filter → count runs
// the filter in tasks of its own (it and the count read 2 of 20 columns);
// filter → project chains the filter, and the project keeps 2.
func BenchmarkNarrowedBatch(b *testing.B) {
	data := sharedData(b, fullCSV)
	eq := "Punched Telespar"
	for _, pc := range []struct {
		name string
		spec *Spec
	}{
		{"filter-count", &Spec{Source: Source{File: "s.csv", Header: true}, Stages: []Stage{
			{Name: "f", Op: OpFilter, Tasks: 3, Field: "Sign_Post", Equals: &eq, NoChain: true},
			{Name: "c", Op: OpCount, Tasks: 3, Key: "Category", NoChain: true}}}},
		{"filter-project", &Spec{Source: Source{File: "s.csv", Header: true}, Stages: []Stage{
			{Name: "f", Op: OpFilter, Tasks: 3, Field: "Sign_Post", Equals: &eq},
			{Name: "p", Op: OpProject, Tasks: 3, Fields: []string{"OBJECTID", "Category"}}}}},
	} {
		rd, err := NewReader(bytes.NewReader(data), ReaderOptions{Format: FormatCSV, Header: true})
		if err != nil {
			b.Fatal(err)
		}
		chained := pc.spec.Chained()
		p, err := Compile(&chained, rd.Header())
		if err != nil {
			b.Fatal(err)
		}
		rd.SetKeep(p.ReadKeep())
		var in []Record
		for {
			rec, err := rd.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err == nil {
				in = append(in, rec)
			}
		}
		next := p.Stages[0]
		for _, layout := range []string{"compact", "whole-width"} {
			cs := *next
			if layout == "whole-width" {
				cs.from = nil
			}
			b.Run(pc.name+"/"+layout, func(b *testing.B) {
				b.ReportAllocs()
				var wireBytes int
				for b.Loop() {
					wireBytes = 0
					for start := 0; start < len(in); start += 1024 {
						batch := &wire.RainstormBatch{Seq: 1}
						for _, rec := range in[start:min(start+1024, len(in))] {
							batch.Records = append(batch.Records, cs.Narrow(rec))
						}
						batch.Freeze()
						raw, err := wire.Marshal(batch)
						if err != nil {
							b.Fatal(err)
						}
						wireBytes += len(raw)
						if _, err := wire.Decode(wire.TypeRainstormBatch, raw); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(float64(wireBytes)/float64(len(in)), "wire-B/record")
				b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(b.N)/float64(len(in)), "ns/record")
			})
		}
	}
}
