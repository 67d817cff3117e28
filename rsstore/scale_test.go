package rsstore

import (
	"slices"
	"testing"

	"tempest/wire"
)

// A pipeline's autoscaling record shares its header record: whichever way
// a header comes in (a group with an open's column names, a sync that
// read a peer behind), the newest scale record met is the one kept, on
// disk as in memory, and a record with no column names is no header.
func TestScaleRecordNewestKept(t *testing.T) {
	dir := t.TempDir()
	s := openSolo(t, dir)
	rec := func(term, seq uint64, want ...int) *wire.RainstormScale {
		return &wire.RainstormScale{Term: term, Seq: seq, Want: want, Resizes: []wire.RainstormResize{{Stage: "count", From: 1, To: want[0]}}}
	}
	put := func(h wire.RainstormHeader) {
		t.Helper()
		if _, err := s.HandleReplicate("m1", &wire.RainstormReplicate{Term: 2, Headers: []wire.RainstormHeader{h}}); err != nil {
			t.Fatal(err)
		}
	}
	put(wire.RainstormHeader{Job: "j", Workflow: "pipe", Scale: rec(2, 3, 2)})
	if _, ok := s.Header("j", "pipe"); ok {
		t.Fatal("a scale record alone reads as the source's header")
	}
	// An open's header, written with no scale record, keeps the decision.
	put(wire.RainstormHeader{Job: "j", Workflow: "pipe", Header: []string{"a"}, HasHeader: true})
	// A sync that read a peer holding an older decision keeps the newer.
	if err := s.store(nil, []wire.RainstormHeader{{Job: "j", Workflow: "pipe", Scale: rec(1, 9, 3)}}); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store, when string) {
		t.Helper()
		sc := s.Scale("j", "pipe")
		if sc == nil || sc.Term != 2 || sc.Seq != 3 || !slices.Equal(sc.Want, []int{2}) || len(sc.Resizes) != 1 {
			t.Fatalf("%s: scale record %+v, want term 2's third write asking [2]", when, sc)
		}
		if h, ok := s.Header("j", "pipe"); !ok || !slices.Equal(h, []string{"a"}) {
			t.Fatalf("%s: header %v (%v), want [a]", when, h, ok)
		}
	}
	check(s, "stored")
	// A newer term's record replaces it.
	put(wire.RainstormHeader{Job: "j", Workflow: "pipe", Scale: rec(3, 1, 3)})
	if sc := s.Scale("j", "pipe"); sc.Term != 3 || !slices.Equal(sc.Want, []int{3}) {
		t.Fatalf("a newer term's record not kept: %+v", sc)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openSolo(t, dir)
	defer s.Close()
	if sc := s.Scale("j", "pipe"); sc == nil || sc.Term != 3 || !slices.Equal(sc.Want, []int{3}) {
		t.Fatalf("reopened: scale record %+v, want term 3's", sc)
	}
	if h, ok := s.Header("j", "pipe"); !ok || !slices.Equal(h, []string{"a"}) {
		t.Fatalf("reopened: header %v (%v), want [a]", h, ok)
	}
}
