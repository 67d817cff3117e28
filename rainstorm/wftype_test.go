package rainstorm

import (
	"slices"
	"testing"

	"tempest/wire"
)

func TestExpandOnePartPerTask(t *testing.T) {
	spec := &Spec{
		Source: Source{Generate: &Generate{Records: 5, Keys: 1}},
		Stages: []Stage{{Name: "f", Op: OpFilter, Tasks: 3, Matches: "."}, {Name: "c", Op: OpCount, Tasks: 2, Key: "key"}},
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
