package worker

import (
	"errors"
	"slices"
	"testing"
)

func TestCoreSet(t *testing.T) {
	type step struct {
		op    string // "alloc" or "free"
		wf    string
		n     int
		want  []int // alloc: cores granted; nil means refused
		freed int   // free: cores released
	}
	for _, tc := range []struct {
		name  string
		total int
		steps []step
		avail int
	}{
		{"lowest first", 4, []step{
			{op: "alloc", wf: "a", n: 1, want: []int{0}},
			{op: "alloc", wf: "b", n: 2, want: []int{1, 2}},
		}, 1},
		{"holes are reused", 4, []step{
			{op: "alloc", wf: "a", n: 1, want: []int{0}},
			{op: "alloc", wf: "b", n: 2, want: []int{1, 2}},
			{op: "free", wf: "a", freed: 1},
			{op: "alloc", wf: "c", n: 2, want: []int{0, 3}},
		}, 0},
		{"too big", 2, []step{
			{op: "alloc", wf: "a", n: 3},
		}, 2},
		{"exactly full", 3, []step{
			{op: "alloc", wf: "a", n: 3, want: []int{0, 1, 2}},
			{op: "alloc", wf: "b", n: 1},
		}, 0},
		{"free twice and unknown", 2, []step{
			{op: "alloc", wf: "a", n: 2, want: []int{0, 1}},
			{op: "free", wf: "a", freed: 2},
			{op: "free", wf: "a", freed: 0},
			{op: "free", wf: "zz", freed: 0},
		}, 2},
		{"one allocation per workflow", 4, []step{
			{op: "alloc", wf: "a", n: 1, want: []int{0}},
			{op: "alloc", wf: "a", n: 1},
		}, 3},
		{"bad requests", 4, []step{
			{op: "alloc", wf: "", n: 1},
			{op: "alloc", wf: "a", n: 0},
			{op: "alloc", wf: "a", n: -1},
		}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewCoreSet(tc.total)
			for i, st := range tc.steps {
				switch st.op {
				case "alloc":
					got, err := s.Allocate(st.wf, st.n)
					if st.want == nil {
						if err == nil {
							t.Fatalf("step %d: allocate %s %d = %v, want refusal", i, st.wf, st.n, got)
						}
						continue
					}
					if err != nil || !slices.Equal(got, st.want) {
						t.Fatalf("step %d: allocate %s %d = %v, %v; want %v", i, st.wf, st.n, got, err, st.want)
					}
					for _, c := range got {
						if s.Owner(c) != st.wf {
							t.Fatalf("step %d: core %d owned by %q, want %q", i, c, s.Owner(c), st.wf)
						}
					}
					if !slices.Equal(s.Cores(st.wf), st.want) {
						t.Fatalf("step %d: Cores(%s) = %v", i, st.wf, s.Cores(st.wf))
					}
				case "free":
					if got := s.Free(st.wf); got != st.freed {
						t.Fatalf("step %d: free %s = %d, want %d", i, st.wf, got, st.freed)
					}
					if s.Cores(st.wf) != nil {
						t.Fatalf("step %d: %s still holds %v", i, st.wf, s.Cores(st.wf))
					}
				}
			}
			if s.Available() != tc.avail || s.Total() != tc.total {
				t.Fatalf("available %d of %d, want %d of %d", s.Available(), s.Total(), tc.avail, tc.total)
			}
		})
	}
}

func TestCoreSetRefusalSaysWhy(t *testing.T) {
	s := NewCoreSet(4)
	if _, err := s.Allocate("a", 3); err != nil {
		t.Fatal(err)
	}
	_, err := s.Allocate("b", 2)
	var ic *InsufficientCoresError
	if !errors.As(err, &ic) || ic.Need != 2 || ic.Free != 1 || err.Error() != "needs 2 cores, 1 free" {
		t.Fatalf("err = %v", err)
	}
	// The returned slice is the caller's: changing it does not corrupt the set.
	got, _ := s.Allocate("c", 1)
	got[0] = 99
	if s.Owner(3) != "c" || s.Cores("c")[0] != 3 {
		t.Fatalf("set changed through a returned slice")
	}
	if s.Owner(-1) != "" || s.Owner(4) != "" {
		t.Fatal("out-of-range cores must have no owner")
	}
}

// The tasks of one pipeline slot share one allocation: the first takes the
// slot's cores, later ones join without taking more, and the cores come
// back only when the last of them ends.
func TestCoreSetSlotShares(t *testing.T) {
	s := NewCoreSet(2)
	a, err := s.AllocateIn("j-1", "j/p/0", 1)
	if err != nil || !slices.Equal(a, []int{0}) {
		t.Fatalf("first of slot: %v, %v", a, err)
	}
	for _, wf := range []string{"j-2", "j-3"} {
		got, err := s.AllocateIn(wf, "j/p/0", 1)
		if err != nil || !slices.Equal(got, []int{0}) {
			t.Fatalf("%s joins slot: %v, %v", wf, got, err)
		}
	}
	if s.Available() != 1 || s.Owner(0) != "slot j/p/0" {
		t.Fatalf("three tasks of one slot: %d free, core 0 held by %q", s.Available(), s.Owner(0))
	}
	if _, err := s.AllocateIn("j-2", "j/p/0", 1); err == nil {
		t.Fatal("a workflow joined its slot twice")
	}
	// Another slot takes the other core; a third finds none.
	if got, err := s.AllocateIn("j-4", "j/p/1", 1); err != nil || !slices.Equal(got, []int{1}) {
		t.Fatalf("second slot: %v, %v", got, err)
	}
	var ic *InsufficientCoresError
	if _, err := s.AllocateIn("j-5", "j/p/2", 1); !errors.As(err, &ic) {
		t.Fatalf("third slot on a full worker: %v", err)
	}
	for _, wf := range []string{"j-1", "j-3"} {
		if n := s.Free(wf); n != 0 {
			t.Fatalf("free %s while its slot still runs = %d, want 0", wf, n)
		}
		if s.Available() != 0 {
			t.Fatalf("a slot's core came free with a task still in it")
		}
	}
	if !slices.Equal(s.Cores("j-2"), []int{0}) || s.Cores("j-1") != nil {
		t.Fatalf("Cores after partial free: j-2 %v, j-1 %v", s.Cores("j-2"), s.Cores("j-1"))
	}
	if n := s.Free("j-2"); n != 1 || s.Available() != 1 || s.Owner(0) != "" {
		t.Fatalf("the slot's last task freed %d; %d available, core 0 held by %q", n, s.Available(), s.Owner(0))
	}
	// The slot can start again on this worker (a replacement).
	if got, err := s.AllocateIn("j-1", "j/p/0", 1); err != nil || !slices.Equal(got, []int{0}) {
		t.Fatalf("slot again: %v, %v", got, err)
	}
}
