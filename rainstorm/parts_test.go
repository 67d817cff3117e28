package rainstorm

import (
	"testing"

	"tempest/wire"
)

// An autoscaled stage is dispatched as its maximum of parts, each a task
// the runtime may place once an epoch has it; its starting epoch has the
// minimum. A stage that resizes is never chained into the source (its
// tasks would not run), and a pipeline with one keeps epochs.
func TestAutoscaledStageParts(t *testing.T) {
	pol := &Autoscale{Min: 1, Max: 4, Low: 10, High: 100}
	spec := Spec{Source: Source{Generate: &Generate{Records: 10, Keys: 2}}, Stages: []Stage{
		{Name: "odd", Op: OpFilter, Field: "value", Matches: "[13579]$", Autoscale: pol},
		{Name: "count", Op: OpCount, Key: "key", Tasks: 2},
	}}
	parts := expandSpec(t, spec)
	if len(parts) != 1+4+2 {
		t.Fatalf("%d parts, want 7: the source, the filter's maximum of 4 and the count's 2", len(parts))
	}
	if err := (Type{}).CheckParts(parts); err != nil {
		t.Fatal(err)
	}
	first, err := DecodeTaskParams(parts[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Spec.Source.Chain) != 0 || len(first.Spec.Stages) != 2 {
		t.Fatalf("the autoscaled filter was chained into the source: %d chained, %d stages", len(first.Spec.Source.Chain), len(first.Spec.Stages))
	}
	if !first.Spec.Resizable() {
		t.Fatal("a pipeline with an autoscaled stage is not resizable")
	}
	whole, err := Resolve(parts[0], parts[4])
	if err != nil {
		t.Fatalf("the filter's fourth task: %v", err)
	}
	if p, _ := DecodeTaskParams(whole); p.Stage != 1 || p.Index != 3 {
		t.Fatalf("part 5 is task %d.%d, want 1.3", p.Stage, p.Index)
	}
	start := SpecStartEpochs(&first.Spec)
	if len(start) != 1 || start[0].Tasks[0] != 1 || start[0].Tasks[1] != 2 {
		t.Fatalf("start epochs %+v, want the filter at its minimum (1) and the count at 2", start)
	}
	fixed := Spec{Source: spec.Source, Stages: []Stage{{Name: "count", Op: OpCount, Key: "key", Tasks: 2}}}
	if fixed.Resizable() || fixed.Stages[0].PartCount() != 2 {
		t.Fatal("a pipeline of fixed sizes resizes, or has other parts than its tasks")
	}
}

// A split source is dispatched as one part per range, first in task
// order: the first carries the pipeline, the others refer to it like a
// stage's tasks, and each resolves to its own range's index.
func TestSplitSourceParts(t *testing.T) {
	spec := Spec{Source: Source{Path: "/in.csv", Header: true, Split: 3}, Stages: []Stage{
		{Name: "count", Op: OpCount, Key: "k", Tasks: 2},
	}}
	parts := expandSpec(t, spec)
	if len(parts) != 3+2 {
		t.Fatalf("%d parts, want 5: the 3 ranges' source tasks and the count's 2", len(parts))
	}
	if err := (Type{}).CheckParts(parts); err != nil {
		t.Fatal(err)
	}
	for k := range 3 {
		whole, err := Resolve(parts[0], parts[k])
		if err != nil {
			t.Fatalf("part %d: %v", k, err)
		}
		p, err := DecodeTaskParams(whole)
		if err != nil {
			t.Fatal(err)
		}
		if p.Stage != 0 || p.Index != k || p.Spec.Source.Splits() != 3 {
			t.Fatalf("part %d resolves to task %d.%d of a %d-way split", k, p.Stage, p.Index, p.Spec.Source.Splits())
		}
	}
	bad, err := wire.Marshal(&TaskParams{Spec: spec, Stage: 0, Index: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeTaskParams(bad); err == nil {
		t.Fatal("a fourth range of a 3-way split was accepted")
	}
}

// expandSpec is spec's dispatched parts, as the manager expands them.
func expandSpec(t *testing.T, spec Spec) [][]byte {
	t.Helper()
	b, err := wire.Marshal(&PipelineParams{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	parts, err := Type{}.Expand(b)
	if err != nil {
		t.Fatal(err)
	}
	return parts
}
