package manager

import (
	"context"
	"fmt"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
)

// A gate asking a manager for its heartbeat gets what SWIM would carry,
// fresh: the leader says it leads, with its workers' spare cores, and each
// answer outranks the one before (a newer version).
func TestStatusRequestAnswersTheHeartbeat(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.leader()
	c.addWorker("w1", 4)
	gate := c.hub.Node("gate-1")
	defer gate.Close()
	ask := func(id string) *wire.ManagerHeartbeat {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		reply, err := gate.Call(ctx, id, &wire.ManagerStatusRequest{RequesterID: "gate-1"})
		if err != nil {
			t.Fatal(err)
		}
		return reply.(*wire.ManagerHeartbeat)
	}
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if hb := ask(leader.cfg.ID); hb.AvailableCores != 4 {
			return fmt.Errorf("leader reports %d spare cores, want 4", hb.AvailableCores)
		}
		return nil
	})
	hb := ask(leader.cfg.ID)
	if hb.NodeID != leader.cfg.ID || hb.Datacenter != "dc1" || !hb.IsLeader || hb.Addr != leader.cfg.ID || hb.WorkerCount != 1 {
		t.Fatalf("leader answered %+v", hb)
	}
	if again := ask(leader.cfg.ID); again.Version <= hb.Version {
		t.Fatalf("second answer has version %d, first %d: want it newer", again.Version, hb.Version)
	}
	for _, id := range c.ids {
		if id != leader.cfg.ID {
			if f := ask(id); f.IsLeader || f.NodeID != id {
				t.Fatalf("follower %s answered %+v", id, f)
			}
		}
	}
}
