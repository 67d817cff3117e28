package worker

import (
	"context"
	"slices"
	"testing"
	"time"

	"tempest/transport"
	"tempest/wire"
	"tempest/workflow"
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

// A task takes pipeline data only from the node its routes show hosting
// the sending task: a batch from its upstream's node, an ack from its
// downstream's. A sender the table does not show gets one fresh table
// (a replacement may have moved), then is refused and counted; a flood of
// them costs the leader one route request per rsRefreshEvery.
func TestPipelineDataOnlyFromTheSendingTasksNode(t *testing.T) {
	now := time.Unix(1000, 0)
	tables := [][]wire.RainstormRoute{{
		{Stage: 0, Index: 0, Addr: "10.0.0.1:7000", Node: "w-up", Incarnation: 1},
		{Stage: 1, Index: 0, Addr: "10.0.0.2:7000", Node: "w-me", Incarnation: 2},
		{Stage: 2, Index: 0, Addr: "10.0.0.3:7000", Node: "w-down", Incarnation: 3},
	}}
	fetches := 0
	d := &rsDriver{
		task: wire.RainstormTask{Job: "j", Workflow: "p", Stage: 1}, reroute: make(chan int, 8),
		env: workflow.Env{Now: func() time.Time { return now }},
		fetchRoutes: func(context.Context) ([]wire.RainstormRoute, error) {
			fetches++
			return tables[len(tables)-1], nil
		},
	}
	d.setRoutes(tables[0])
	w := &Worker{now: func() time.Time { return now }, log: testLogger(t)}
	task := &rsTask{key: rsKey{"j", "p", 1, 0}, sentBy: d.sentBy}
	w.rs.add(task)
	ctx := context.Background()
	peer := func(id, addr string) transport.Peer { return transport.Peer{NodeID: id, Addr: addr} }

	if !w.rsAccept(ctx, peer("w-up", "10.0.0.1:7000"), wire.TypeRainstormBatch, task.key, 0, 0) {
		t.Fatal("a batch from the upstream task's node was refused")
	}
	if !w.rsAccept(ctx, peer("w-down", "10.0.0.3:7000"), wire.TypeRainstormBatchAck, task.key, 2, 0) {
		t.Fatal("an ack from the downstream task's node was refused")
	}
	if fetches != 0 {
		t.Fatalf("%d route fetches for senders the table shows", fetches)
	}
	// A worker-key holder under its own id, and one naming the downstream
	// node as the sender of a batch (it hosts no upstream task).
	if w.rsAccept(ctx, peer("evil", "10.0.0.9:7000"), wire.TypeRainstormBatch, task.key, 0, 0) {
		t.Fatal("a batch from a node hosting no upstream task was taken")
	}
	if fetches != 1 {
		t.Fatalf("route fetches before the first refusal: %d, want 1", fetches)
	}
	if w.rsAccept(ctx, peer("w-down", "10.0.0.3:7000"), wire.TypeRainstormBatch, task.key, 0, 0) {
		t.Fatal("a batch claiming the upstream task from the downstream's node was taken")
	}
	if w.rsAccept(ctx, peer("w-up", "10.0.0.1:7000"), wire.TypeRainstormBatchAck, task.key, 2, 0) {
		t.Fatal("an ack claiming the downstream task from the upstream's node was taken")
	}
	if fetches != 1 {
		t.Fatalf("refusals within %s fetched the routes %d times, want once", rsRefreshEvery, fetches)
	}
	got := w.refused.Snapshot()
	if got[wire.TypeRainstormBatch] != 2 || got[wire.TypeRainstormBatchAck] != 1 {
		t.Fatalf("refusals counted %v, want 2 batches and 1 ack", got)
	}

	// The upstream task was replaced on w-new: the table is stale until a
	// refresh, which the replacement's first batch gets.
	now = now.Add(rsRefreshEvery)
	moved := slices.Clone(tables[0])
	moved[0] = wire.RainstormRoute{Stage: 0, Index: 0, Addr: "10.0.0.4:7000", Node: "w-new", Incarnation: 9}
	tables = append(tables, moved)
	if !w.rsAccept(ctx, peer("w-new", "10.0.0.4:7000"), wire.TypeRainstormBatch, task.key, 0, 0) {
		t.Fatal("a batch from the upstream's replacement was refused")
	}
	if fetches != 2 {
		t.Fatalf("route fetches: %d, want 2", fetches)
	}
	if w.rsAccept(ctx, peer("w-up", "10.0.0.1:7000"), wire.TypeRainstormBatch, task.key, 0, 0) {
		t.Fatal("a batch from the replaced upstream's old node was taken")
	}

	// A leader that sends no node ids: the sender's address decides.
	d.setRoutes([]wire.RainstormRoute{{Stage: 0, Index: 0, Addr: "10.0.0.1:7000", Incarnation: 1}})
	if !d.hosts(peer("any", "10.0.0.1:7000"), 0, 0) || d.hosts(peer("w-up", "10.0.0.5:7000"), 0, 0) {
		t.Fatal("without node ids the route's address should decide")
	}
}
