package rainstorm

import (
	"bytes"
	"slices"
	"testing"

	"tempest/wire"
)

func TestExpandOnePartPerTask(t *testing.T) {
	spec := &Spec{
		Source: Source{Generate: &Generate{Records: 5, Keys: 1}},
		// Unchained, so every stage has tasks of its own (chain_test.go
		// expands a chained pipeline).
		Stages: []Stage{{Name: "f", Op: OpFilter, Tasks: 3, Matches: ".", NoChain: true}, {Name: "c", Op: OpCount, Tasks: 2, Key: "key", NoChain: true}},
	}
	b, err := wire.Marshal(&PipelineParams{Spec: *spec})
	if err != nil {
		t.Fatal(err)
	}
	parts, err := Type{}.Expand(b)
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]int{{0, 0}, {1, 0}, {1, 1}, {1, 2}, {2, 0}, {2, 1}}
	if len(parts) != len(want) {
		t.Fatalf("%d parts, want %d", len(parts), len(want))
	}
	for i, p := range parts {
		tp, err := DecodeTaskParams(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := [2]int{tp.Stage, tp.Index}; got != want[i] {
			t.Errorf("part %d is task %v, want %v", i, got, want[i])
		}
	}
	bad, _ := wire.Marshal(&TaskParams{Spec: *spec, Stage: 1, Index: 3})
	if _, err := DecodeTaskParams(bad); err == nil {
		t.Error("a task index past the stage's tasks was accepted")
	}
}

func TestColumnsFollowTheStages(t *testing.T) {
	spec := &Spec{Source: Source{Path: "/x", Header: true}, Stages: []Stage{
		{Name: "p", Op: OpProject, Fields: []string{"b"}}, {Name: "e", Op: OpExec, Command: []string{"cat"}}, {Name: "c", Op: OpCount, Key: "1"}}}
	h := []string{"a", "b"}
	for i, want := range [][]string{h, {"b"}, nil, AggregateHeader} {
		if got := Columns(spec, h, i); !slices.Equal(got, want) {
			t.Errorf("columns before stage %d: %v, want %v", i, got, want)
		}
	}
}

// FuzzDecodeTaskParams: task params arrive from the network in dispatches.
func FuzzDecodeTaskParams(f *testing.F) {
	spec := &Spec{Source: Source{Generate: &Generate{Records: 5, Keys: 1}}, Stages: []Stage{{Name: "c", Op: OpCount, Key: "key"}}}
	b, _ := wire.Marshal(&TaskParams{Spec: *spec, Stage: 1})
	f.Add(b)
	f.Add([]byte{0xa0})
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := DecodeTaskParams(data)
		if err != nil {
			return
		}
		if p.Stage < 0 || p.Stage > len(p.Spec.Stages) {
			t.Fatalf("accepted stage %d of %d", p.Stage, len(p.Spec.Stages))
		}
		_ = TaskOrder(&p.Spec)
	})
}

// Expand puts the pipeline's spec in the first task's params only; the
// others refer to it, CheckParts takes the parts only in task order, and
// Resolve gives each task its whole params back. Parts written by the
// version that copied the spec into every task are taken as they are.
func TestExpandKeepsTheSpecOnce(t *testing.T) {
	spec := &Spec{Source: Source{Generate: &Generate{Records: 5, Keys: 1}},
		Stages: []Stage{{Name: "f", Op: OpProject, Tasks: 30, Fields: []string{"key"}, NoChain: true}, {Name: "c", Op: OpCount, Tasks: 30, Key: "key", NoChain: true}}}
	pp, err := wire.Marshal(&PipelineParams{Spec: *spec, Blob: "ab"})
	if err != nil {
		t.Fatal(err)
	}
	parts, err := Type{}.Expand(pp)
	if err != nil || len(parts) != 61 {
		t.Fatalf("expand: %d parts, %v", len(parts), err)
	}
	for k, part := range parts[1:] {
		if len(part) > 16 {
			t.Fatalf("task %d's params are %d bytes (the first's %d): more than a (stage, index) reference", k+2, len(part), len(parts[0]))
		}
	}
	if err := (Type{}).CheckParts(parts); err != nil {
		t.Fatal(err)
	}
	order := TaskOrder(spec)
	for k, part := range parts {
		b, err := Resolve(parts[0], part)
		if err != nil {
			t.Fatal(err)
		}
		p, err := DecodeTaskParams(b)
		if err != nil || p.Ref || p.Stage != order[k].Stage || p.Index != order[k].Index || p.Blob != "ab" || len(p.Spec.Stages) != 2 {
			t.Fatalf("task %d resolved to %+v, %v", k+1, p, err)
		}
	}

	swapped := slices.Clone(parts)
	swapped[3], swapped[4] = swapped[4], swapped[3]
	if err := (Type{}).CheckParts(swapped); err == nil {
		t.Fatal("parts out of task order were taken")
	}
	if err := (Type{}).CheckParts(parts[:60]); err == nil {
		t.Fatal("a pipeline missing a task was taken")
	}
	if err := (Type{}).CheckParts(append([][]byte{parts[1]}, parts[1:]...)); err == nil {
		t.Fatal("a pipeline whose first task refers to another was taken")
	}
	bad, _ := wire.Marshal(&TaskParams{Stage: 1, Ref: true, Blob: "ab"})
	if _, err := DecodeTaskParams(bad); err == nil {
		t.Fatal("a referring task that names a blob was taken")
	}

	old := make([][]byte, len(order))
	for k, o := range order {
		old[k], _ = wire.Marshal(&TaskParams{Spec: *spec, Stage: o.Stage, Index: o.Index, Blob: "ab"})
	}
	if err := (Type{}).CheckParts(old); err != nil {
		t.Fatalf("parts of the earlier format: %v", err)
	}
	if b, err := Resolve(old[0], old[7]); err != nil || !bytes.Equal(b, old[7]) {
		t.Fatalf("a task of the earlier format is not dispatched as it is: %v", err)
	}
}
