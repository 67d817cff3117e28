package worker

import (
	"fmt"
	"slices"
	"testing"

	"tempest/rainstorm"
	"tempest/wire"
)

// A task's handover requests ride its route requests until answered; each
// answer reaches the machine once, and one nobody asked for (a stale or
// forged answer) not at all. The sizes the leader wants reach a source
// only, the newest replacing an older one not yet taken.
func TestRSResizeCarriesHandoversAndSizes(t *testing.T) {
	r := newRSResize()
	if r.want(nil) {
		t.Fatal("no requests counted as some")
	}
	r.want([]rainstorm.HandoverWant{{Task: wire.RainstormTask{Stage: 1, Index: 1}, Epoch: 3}, {Task: wire.RainstormTask{Stage: 1, Index: 0}, Epoch: 3}})
	r.want([]rainstorm.HandoverWant{{Task: wire.RainstormTask{Stage: 1, Index: 1}, Epoch: 3}}) // asked again
	got := r.pending()
	want := []wire.RainstormHandoverWant{{Stage: 1, Index: 0, Epoch: 3}, {Stage: 1, Index: 1, Epoch: 3}}
	if !slices.Equal(got, want) {
		t.Fatalf("pending %v, want %v", got, want)
	}
	groups := []wire.RainstormGroupState{{Group: 7}}
	r.answered(false, &wire.RainstormRoutes{Resize: []int{3}, Handovers: []wire.RainstormHandover{
		{Stage: 1, Index: 1, Epoch: 3, Groups: groups},
		{Stage: 1, Index: 1, Epoch: 3, Groups: groups}, // twice in one answer
		{Stage: 1, Index: 5, Epoch: 3},                 // never asked for
	}})
	if n := len(r.handovers); n != 1 {
		t.Fatalf("%d handovers for the machine, want 1", n)
	}
	if h := <-r.handovers; h.Index != 1 || len(h.Groups) != 1 {
		t.Fatalf("handover %+v", h)
	}
	if got := r.pending(); !slices.Equal(got, want[:1]) {
		t.Fatalf("pending after the answer %v, want %v", got, want[:1])
	}
	if len(r.resize) != 0 {
		t.Fatal("a stage task was handed sizes to resize to")
	}
	r.answered(true, &wire.RainstormRoutes{Resize: []int{2}})
	r.answered(true, &wire.RainstormRoutes{Resize: []int{4}})
	if s := <-r.resize; !slices.Equal(s, []int{4}) {
		t.Fatalf("the source is handed %v, want the newest [4]", s)
	}

	spec := &rainstorm.Spec{Stages: []rainstorm.Stage{{Name: "c", Op: rainstorm.OpCount, Autoscale: &rainstorm.Autoscale{Min: 2, Max: 3, High: 1}}}}
	if e := r.machineEpochs(spec, nil); len(e) != 1 || e[0].Tasks[0] != 2 {
		t.Fatalf("epochs without the leader's %v, want the start at 2 tasks", e)
	}
	fixed := &rainstorm.Spec{Stages: []rainstorm.Stage{{Name: "c", Op: rainstorm.OpCount, Tasks: 2}}}
	if e := r.machineEpochs(fixed, []wire.RainstormEpoch{{Tasks: []int{2}}}); e != nil {
		t.Fatalf("a pipeline that cannot resize gets epochs %v", e)
	}
}

// A handover in pages is asked for page by page, from where the last one
// ended; the machine gets it once, whole, a group cut between two pages
// joined again; a page answered twice (or from elsewhere than asked) is
// dropped.
func TestRSResizeGathersHandoverPages(t *testing.T) {
	r := newRSResize()
	r.want([]rainstorm.HandoverWant{{Task: wire.RainstormTask{Stage: 1, Index: 0}, Epoch: 2}})
	agg := func(keys ...string) []wire.RainstormAggregate {
		var out []wire.RainstormAggregate
		for _, k := range keys {
			out = append(out, wire.RainstormAggregate{Key: k, Count: 1})
		}
		return out
	}
	first := wire.RainstormHandover{Stage: 1, Epoch: 2, More: true, NextGroup: 9, NextEntry: 1,
		Groups: []wire.RainstormGroupState{{Group: 3, Entries: agg("a")}, {Group: 9, Entries: agg("b")}}}
	if !r.answered(false, &wire.RainstormRoutes{Handovers: []wire.RainstormHandover{first}}) {
		t.Fatal("a page with more to come asked for no more")
	}
	if len(r.handovers) != 0 {
		t.Fatal("a part of a handover reached the machine")
	}
	if got, want := r.pending(), []wire.RainstormHandoverWant{{Stage: 1, Epoch: 2, FromGroup: 9, FromEntry: 1}}; !slices.Equal(got, want) {
		t.Fatalf("pending %v, want %v", got, want)
	}
	// The first page again (a late answer): dropped.
	r.answered(false, &wire.RainstormRoutes{Handovers: []wire.RainstormHandover{first}})
	last := wire.RainstormHandover{Stage: 1, Epoch: 2, FromGroup: 9, FromEntry: 1,
		Groups: []wire.RainstormGroupState{{Group: 9, Entries: agg("c")}, {Group: 12, Entries: agg("d")}}}
	if r.answered(false, &wire.RainstormRoutes{Handovers: []wire.RainstormHandover{last}}) {
		t.Fatal("the last page asked for more")
	}
	if n := len(r.handovers); n != 1 {
		t.Fatalf("%d handovers for the machine, want 1", n)
	}
	h := <-r.handovers
	var got []string
	for _, g := range h.Groups {
		for _, e := range g.Entries {
			got = append(got, fmt.Sprint(g.Group, e.Key))
		}
	}
	if want := []string{"3a", "9b", "9c", "12d"}; !slices.Equal(got, want) || len(h.Groups) != 3 {
		t.Fatalf("the machine got %v in %d groups, want %v in 3", got, len(h.Groups), want)
	}
	if p := r.pending(); len(p) != 0 {
		t.Fatalf("still pending %v", p)
	}
}
