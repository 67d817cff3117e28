package worker

import (
	"slices"
	"testing"

	"tempest/wire"
)

// A route table showing a downstream task under a new incarnation (a
// replacement) tells the machine to resend to it now; an unchanged task, an
// unplaced one or another stage's does not.
func TestRoutesRerouteReplacedDownstream(t *testing.T) {
	d := &rsDriver{task: wire.RainstormTask{Job: "j", Workflow: "w", Stage: 1}, reroute: make(chan int, 8)}
	routes := []wire.RainstormRoute{
		{Stage: 0, Index: 0, Addr: "a", Incarnation: 1},
		{Stage: 2, Index: 0, Addr: "b", Incarnation: 2},
		{Stage: 2, Index: 1, Addr: "c", Incarnation: 3},
	}
	d.setRoutes(routes)
	if len(d.reroute) != 0 {
		t.Fatalf("the first table rerouted %d tasks", len(d.reroute))
	}
	routes = slices.Clone(routes)
	routes[0].Incarnation = 9                           // upstream replaced: not ours to resend to
	routes[1] = wire.RainstormRoute{Stage: 2, Index: 0} // its worker died, not placed yet
	routes[2].Addr, routes[2].Incarnation = "d", 7      // replaced
	d.setRoutes(routes)
	var got []int
	for len(d.reroute) > 0 {
		got = append(got, <-d.reroute)
	}
	if !slices.Equal(got, []int{1}) {
		t.Fatalf("rerouted %v, want [1]", got)
	}
	if r, ok := d.route(2, 1); !ok || r.Addr != "d" {
		t.Fatalf("route to 2.1 is %+v", r)
	}
	d.setRoutes(routes)
	if len(d.reroute) != 0 {
		t.Fatal("an unchanged table rerouted")
	}

	// The leader's hint that 2.1 opened (and 0.0, not downstream): the
	// next table reroutes to 2.1 though its incarnation did not change,
	// since what an earlier resend sent may have arrived before it could
	// take it.
	d.kick = make(chan struct{}, 1)
	d.downstreamOpened([]wire.RainstormTask{{Stage: 2, Index: 1}, {Stage: 0, Index: 0}})
	if len(d.kick) != 1 {
		t.Fatal("the hint did not ask for the routes")
	}
	d.setRoutes(routes)
	got = nil
	for len(d.reroute) > 0 {
		got = append(got, <-d.reroute)
	}
	if !slices.Equal(got, []int{1}) {
		t.Fatalf("after the hint rerouted %v, want [1]", got)
	}
	d.setRoutes(routes)
	if len(d.reroute) != 0 {
		t.Fatal("a hint rerouted twice")
	}
}
