package worker

import (
	"testing"
	"time"

	"tempest/rainstorm"
	"tempest/wire"
	"tempest/workflow"
)

// A chained source's tuples out are the records it sent after its chain,
// what the first stage takes in, while its progress stays the well-formed
// records it read: a pipeline's completed count is its input.
func TestChainedSourceCountsWhatItSent(t *testing.T) {
	const records, segN = 5000, 1000
	spec := &rainstorm.Spec{Source: rainstorm.Source{Generate: &rainstorm.Generate{Records: records, Keys: 100}}, Stages: []rainstorm.Stage{
		{Name: "f", Op: rainstorm.OpFilter, Field: "key", Matches: "^k[0-9]$"},
		{Name: "p", Op: rainstorm.OpProject, Fields: []string{"key"}}}}
	chained := spec.Chained()
	p, err := rainstorm.Compile(&chained, nil)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := p.NewChain()
	if err != nil || chain == nil {
		t.Fatalf("chain %v: %v", chain, err)
	}
	m, err := rainstorm.NewSourceMachine(rainstorm.SourceConfig{Task: wire.RainstormTask{}, Incarnation: 1, Downstream: 1,
		Next: p.Stages[0], Chain: chain, SegmentRecords: segN, Window: 64}, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := &rsDriver{t: &rsTask{}, env: workflow.Env{Now: time.Now}, start: time.Now()}
	g := rainstorm.NewGenerator(chained.Source.Generate, 0)
	for {
		idx, want := m.Want()
		if !want {
			break
		}
		seg, err := rainstorm.ReadSegment(g, idx, segN)
		if err != nil {
			t.Fatal(err)
		}
		m.Segment(seg)
		d.sourceCounts(m)
	}
	var sent int64
	for _, b := range m.Ready().Batches {
		sent += int64(len(b.Records))
	}
	if sent == 0 || sent >= records {
		t.Fatalf("the chained filter passed on %d of %d records", sent, records)
	}
	if in, out := d.t.records.Load(), d.t.emitted.Load(); in != records || out != sent {
		t.Fatalf("tuples in %d out %d, want %d in and %d out (what the batches carried)", in, out, records, sent)
	}
	if got := d.snapshot().Completed; got != records {
		t.Fatalf("progress completed %d, want the %d records read", got, records)
	}
}
