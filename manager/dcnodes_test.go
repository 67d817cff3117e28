package manager

import (
	"context"
	"errors"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/swim"
	"tempest/wire"
)

// A gate asking for the datacenter's workers gets every worker the leader
// knows with its cores; a dead worker is listed dead with no free cores
// (whatever it last reported), in the answer and in the manager's own
// cluster view, and the heartbeat's totals count only the live one.
func TestDatacenterNodesShowDeadWorkerWithoutFreeCores(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	c.addWorker("w1", 3)
	c.addWorker("w2", 2)
	l := c.leader()
	c.killWorker("w2")

	gate := c.hub.Node("gate-1")
	t.Cleanup(func() { gate.Close() })
	var got *wire.DatacenterNodes
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		reply, err := gate.Call(ctx, l.ID(), &wire.DatacenterNodesRequest{Datacenter: "dc1"})
		if err != nil {
			return err
		}
		got = reply.(*wire.DatacenterNodes)
		return nil
	})
	want := map[string]wire.DatacenterNode{
		"w1": {ID: "w1", State: string(wire.WorkerHealthy), AvailableCores: 3, TotalCores: 3},
		"w2": {ID: "w2", State: "dead", AvailableCores: 0, TotalCores: 2},
	}
	if len(got.Workers) != len(want) {
		t.Fatalf("workers %+v, want w1 and w2", got.Workers)
	}
	for _, n := range got.Workers {
		w := want[n.ID]
		if n.State != w.State || n.AvailableCores != w.AvailableCores || n.TotalCores != w.TotalCores {
			t.Errorf("%s: %s %d/%d, want %s %d/%d", n.ID, n.State, n.AvailableCores, n.TotalCores, w.State, w.AvailableCores, w.TotalCores)
		}
	}

	view, err := l.Cluster(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range view.Nodes {
		if n.Name == "w2" && (n.State != "dead" || n.AvailableCores != 0) {
			t.Errorf("cluster view shows dead w2 as %s with %d free cores", n.State, n.AvailableCores)
		}
	}

	l.refreshHeartbeat()
	hb, err := swim.DecodeManagerHeartbeat(l.LocalState())
	if err != nil {
		t.Fatal(err)
	}
	if hb.TotalCores != 3 || hb.AvailableCores != 3 || hb.WorkerCount != 1 {
		t.Errorf("heartbeat counts %d workers, %d/%d cores; want 1 worker, 3/3", hb.WorkerCount, hb.AvailableCores, hb.TotalCores)
	}
}

// A follower refuses, naming the leader, so the gate asks the leader.
func TestDatacenterNodesOnlyFromTheLeader(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.leader()
	var follower *Manager
	for _, m := range c.running() {
		if m != l {
			follower = m
			break
		}
	}
	gate := c.hub.Node("gate-1")
	t.Cleanup(func() { gate.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := gate.Call(ctx, follower.ID(), &wire.DatacenterNodesRequest{})
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeNotLeader {
		t.Fatalf("a follower answered %v, want not_leader", err)
	}
}
