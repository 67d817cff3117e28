package manager

import (
	"testing"
	"time"

	"tempest/swim"
	"tempest/wire"
)

func TestEmbeddedHeartbeats(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	c.addWorker("w1", 2)
	l := c.leader()

	// LocalState carries this manager's heartbeat, leadership included.
	l.refreshHeartbeat()
	hb, err := swim.DecodeManagerHeartbeat(l.LocalState())
	if err != nil {
		t.Fatal(err)
	}
	if hb.NodeID != "m1" || !hb.IsLeader || hb.Term == 0 || hb.WorkerCount != 1 || hb.AvailableCores != 2 || hb.LeaderID != "m1" {
		t.Fatalf("heartbeat = %+v", hb)
	}
	first := hb.Version
	l.refreshHeartbeat()
	if hb2, _ := swim.DecodeManagerHeartbeat(l.LocalState()); hb2.Version <= first {
		t.Fatalf("heartbeat version did not move: %d then %d", first, hb2.Version)
	}

	send := func(name string, h *wire.WorkerHeartbeat) {
		b, err := swim.EncodeWorkerHeartbeat(h)
		if err != nil {
			t.Fatal(err)
		}
		l.PeerState(swim.NodeInfo{Name: name, Addr: name + ":7946"}, b, time.Millisecond)
	}
	version := uint64(time.Now().UnixNano())
	send("w1", &wire.WorkerHeartbeat{NodeID: "w1", State: wire.WorkerDegraded, TotalCores: 2, AvailableCores: 1, Version: version, Addr: "w1"})
	if wv, _ := l.workers.get("w1"); wv.State != wire.WorkerDegraded || wv.AvailableCores != 1 || wv.SwimAddr != "w1:7946" {
		t.Fatalf("after heartbeat: %+v", wv)
	}
	// An older heartbeat, or one a node sends in another's name, changes
	// nothing; nor do undecodable bytes.
	send("w1", &wire.WorkerHeartbeat{NodeID: "w1", State: wire.WorkerHealthy, TotalCores: 2, AvailableCores: 2, Version: version - 1})
	send("w2", &wire.WorkerHeartbeat{NodeID: "w1", State: wire.WorkerDraining, TotalCores: 2, Version: version + 1})
	l.PeerState(swim.NodeInfo{Name: "w1"}, []byte{0xff, 0x00}, 0)
	if wv, _ := l.workers.get("w1"); wv.State != wire.WorkerDegraded || wv.AvailableCores != 1 {
		t.Fatalf("stale or forged heartbeat applied: %+v", wv)
	}

	// A peer manager's heartbeat lands in the manager table.
	mb, err := swim.EncodeManagerHeartbeat(&wire.ManagerHeartbeat{NodeID: "m9", Datacenter: "dc1", Term: 4, Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	l.PeerState(swim.NodeInfo{Name: "m9"}, mb, 0)
	if got, alive, ok := l.managers.get("m9"); !ok || !alive || got.Term != 4 {
		t.Fatalf("peer heartbeat: %+v alive=%v known=%v", got, alive, ok)
	}
}
