package manager

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/swim"
	"tempest/transport"
	"tempest/wire"
)

// A worker's heartbeat pushed over QUIC reaches the leader's table through
// the same merge as a SWIM ack's: a newer version is applied, a repeat
// refreshes how fresh the view is, a heartbeat naming another node is
// refused, and a push never brings back a worker SWIM declared dead.
func TestPushedWorkerHeartbeat(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	w := c.addWorker("w1", 4)
	l := waitWorkers(t, c, 1)
	ctx := context.Background()
	push := func(hb *wire.WorkerHeartbeat) error { return w.tr.Send(ctx, l.Addr(), hb) }

	hb := &wire.WorkerHeartbeat{NodeID: "w1", State: wire.WorkerHealthy, TotalCores: 4, AvailableCores: 1, Version: 1 << 62, Datacenter: "dc1"}
	if err := push(hb); err != nil {
		t.Fatal(err)
	}
	var first time.Time
	testutil.Eventually(t, 5*time.Second, 5*time.Millisecond, func() error {
		wv, _ := l.workers.get("w1")
		if wv.AvailableCores != 1 || wv.HeartbeatAt.IsZero() {
			return fmt.Errorf("leader's view of w1: %d free cores, heartbeat at %v", wv.AvailableCores, wv.HeartbeatAt)
		}
		first = wv.HeartbeatAt
		return nil
	})
	// The same heartbeat again: nothing changed, but the view is fresher.
	testutil.Eventually(t, 5*time.Second, 5*time.Millisecond, func() error {
		if err := push(hb); err != nil {
			return err
		}
		if wv, _ := l.workers.get("w1"); !wv.HeartbeatAt.After(first) {
			return errors.New("a repeated heartbeat did not refresh the view")
		}
		return nil
	})

	// Only the authenticated sender may speak for itself. (A push is
	// one-way, so the handler is called directly to see its answer.)
	_, err := l.handleWorkerHeartbeat(ctx, transport.Peer{NodeID: "w2", Addr: "w2"},
		&wire.WorkerHeartbeat{NodeID: "w1", State: wire.WorkerHealthy, TotalCores: 4, AvailableCores: 4, Version: 1<<62 + 1})
	if werr := (*wire.Error)(nil); !errors.As(err, &werr) || werr.Code != wire.CodeRejected {
		t.Fatalf("heartbeat of w1 sent by w2: %v, want rejected", err)
	}

	// SWIM declares w1 dead; a push still in flight must not revive it.
	l.SwimEvents().OnDead(swim.NodeInfo{Name: "w1", State: swim.StateDead, Meta: swim.NodeMeta{Role: wire.RoleWorker, Datacenter: "dc1", QUICAddr: "w1"}})
	late := *hb
	late.Version++
	late.AvailableCores = 4
	if _, err := l.handleWorkerHeartbeat(ctx, transport.Peer{NodeID: "w1", Addr: "w1"}, &late); err != nil {
		t.Fatal(err)
	}
	if wv, _ := l.workers.get("w1"); wv.Alive || !wv.Gone || wv.AvailableCores == 4 {
		t.Fatalf("a pushed heartbeat revived a dead worker: %+v", wv)
	}
}
