package manager

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/security"
	"tempest/security/securitytest"
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

// The cluster view shows, for every peer manager and worker, the key ids its
// last heartbeat named, so an operator can watch a rotation pass land.
func TestClusterViewShowsKeyIDs(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.addWorker("w1", 2)
	l := c.leader()
	peer := "m2"
	if l.ID() == peer {
		peer = "m3"
	}
	version := uint64(time.Now().UnixNano())
	wb, err := swim.EncodeWorkerHeartbeat(&wire.WorkerHeartbeat{NodeID: "w1", State: wire.WorkerHealthy, TotalCores: 2,
		AvailableCores: 2, Version: version, Addr: "w1", SendKeyID: 0xa1, AcceptKeyIDs: []uint32{0xa1, 0xb2}})
	if err != nil {
		t.Fatal(err)
	}
	l.PeerState(swim.NodeInfo{Name: "w1"}, wb, 0)
	mb, err := swim.EncodeManagerHeartbeat(&wire.ManagerHeartbeat{NodeID: peer, Datacenter: "dc1", Version: version,
		SendKeyID: 0xdeadbeef, AcceptKeyIDs: []uint32{0xdeadbeef}})
	if err != nil {
		t.Fatal(err)
	}
	l.PeerState(swim.NodeInfo{Name: peer}, mb, 0)

	view, err := l.Cluster(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		send   string
		accept []string
	}{
		"w1": {"000000a1", []string{"000000a1", "000000b2"}},
		peer: {"deadbeef", []string{"deadbeef"}},
	}
	for _, n := range view.Nodes {
		w, ok := want[n.Name]
		if !ok {
			continue
		}
		if n.SendKey != w.send || !slices.Equal(n.AcceptKeys, w.accept) {
			t.Errorf("%s: keys %q %q, want %q %q", n.Name, n.SendKey, n.AcceptKeys, w.send, w.accept)
		}
		delete(want, n.Name)
	}
	if len(want) > 0 {
		t.Fatalf("nodes missing from the view: %v", want)
	}
}

// The heartbeat is rebuilt from several goroutines at once (the heartbeat
// loop, the election's callbacks, a gate's status request). The one left
// embedded must be the newest: an older one would show a stale state (a
// leader that stepped down still leading) under a version that peers which
// saw the newer one reject, until the next rebuild.
func TestConcurrentHeartbeatRebuildsLeaveTheNewest(t *testing.T) {
	c := newTestCluster(t, 1, func(c *Config) { c.HeartbeatInterval = time.Hour })
	l := c.leader()
	for round := range 20 {
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					l.refreshHeartbeat()
				}
			}()
		}
		wg.Wait()
		hb, err := swim.DecodeManagerHeartbeat(l.LocalState())
		if err != nil {
			t.Fatal(err)
		}
		if last := l.hbVer.Load(); hb.Version != last {
			t.Fatalf("round %d: embedded heartbeat version %d, newest built %d", round, hb.Version, last)
		}
	}
}

// The heartbeat names the keys the manager sends with and accepts, and a
// secret reload rebuilds it at once: a rotation pass shows on this manager
// at its next ack, not a heartbeat interval later. The manager is built but
// not run, so no heartbeat loop rebuilds it meanwhile.
func TestSecretReloadShowsInTheHeartbeat(t *testing.T) {
	c := newTestCluster(t, 0, nil)
	old, next := securitytest.Secret(t), securitytest.Secret(t)
	keys, err := security.NewKeyring(old, "")
	if err != nil {
		t.Fatal(err)
	}
	c.peers = []Peer{{ID: "m1", QUIC: "m1"}}
	m, err := New(c.config("m1", testutil.DataDir(t, "m1")), Deps{
		Registry: c.reg, Transport: c.hub.Node("m1"), Membership: c.members.forNode("m1"), Keyring: keys,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	keysOf := func() (uint32, []uint32) {
		hb, err := swim.DecodeManagerHeartbeat(m.LocalState())
		if err != nil {
			t.Fatal(err)
		}
		return hb.SendKeyID, hb.AcceptKeyIDs
	}
	if send, accept := keysOf(); send != security.KeyID(old) || !slices.Equal(accept, []uint32{security.KeyID(old)}) {
		t.Fatalf("heartbeat keys %08x %x, want %08x", send, accept, security.KeyID(old))
	}
	if err := m.ReloadSecrets(next, old); err != nil {
		t.Fatal(err)
	}
	if send, accept := keysOf(); send != security.KeyID(next) || !slices.Equal(accept, []uint32{security.KeyID(next), security.KeyID(old)}) {
		t.Fatalf("after reload: heartbeat keys %08x %x, want %08x %08x", send, accept, security.KeyID(next), security.KeyID(old))
	}
}
