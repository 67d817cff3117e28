package worker

import (
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
