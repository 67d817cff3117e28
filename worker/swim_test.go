package worker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/security"
	"tempest/swim"
	"tempest/wire"
	"tempest/workflow"
)

// probeRecorder plays a manager in SWIM: it announces itself leader in its
// acks and keeps the newest worker heartbeat its probes collect.
type probeRecorder struct {
	mu     sync.Mutex
	latest *wire.WorkerHeartbeat
	local  []byte
}

func (p *probeRecorder) LocalState() []byte { return p.local }

func (p *probeRecorder) PeerState(_ swim.NodeInfo, state []byte, _ time.Duration) {
	hb, err := swim.DecodeWorkerHeartbeat(state)
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latest = hb
}

func (p *probeRecorder) heartbeat() *wire.WorkerHeartbeat {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latest
}

// TestHeartbeatOverRealSWIM runs the worker with real QUIC and memberlist on
// loopback (test profile): a manager's probes must receive the worker's
// heartbeat with its cores, and the worker must learn the leader from the
// manager's acks.
func TestHeartbeatOverRealSWIM(t *testing.T) {
	secret, err := security.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	keyring, err := security.NewKeyring(secret, "")
	if err != nil {
		t.Fatal(err)
	}
	const managerQUIC = "127.0.0.1:7400" // never dialled: only announced
	mhb, err := swim.EncodeManagerHeartbeat(&wire.ManagerHeartbeat{NodeID: "m1", Datacenter: "dc1", IsLeader: true, Term: 1, Version: 1, Addr: managerQUIC})
	if err != nil {
		t.Fatal(err)
	}
	rec := &probeRecorder{local: mhb}
	mc := swim.DefaultConfig()
	mc.NodeName, mc.BindAddr, mc.BindPort, mc.Profile = "m1", "127.0.0.1", 0, swim.ProfileTest
	mc.Meta = swim.NodeMeta{Role: wire.RoleManager, Datacenter: "dc1", QUICAddr: managerQUIC}
	mc.Keys = keyring.MemberlistKeys()
	mc.Embedder = rec
	mc.Logger = testLogger(t)
	mgr, err := swim.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgr.Shutdown() })

	cfg := DefaultConfig()
	cfg.ID = "w1"
	cfg.Cores = 3
	cfg.SwimProfile = swim.ProfileTest
	cfg.Join = []string{mgr.Addr()}
	cfg.Managers = []string{managerQUIC}
	cfg.CallTimeout = 500 * time.Millisecond
	cfg.Logger = testLogger(t)
	w, err := New(cfg, Deps{Keyring: keyring, Registry: workflow.DefaultRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	<-w.Ready()

	testutil.Eventually(t, 15*time.Second, 20*time.Millisecond, func() error {
		hb := rec.heartbeat()
		if hb == nil {
			return fmt.Errorf("no worker heartbeat probed yet")
		}
		if hb.NodeID != "w1" || hb.TotalCores != 3 || hb.AvailableCores != 3 || hb.State != wire.WorkerHealthy || hb.Addr != w.Addr() {
			return fmt.Errorf("heartbeat %+v", hb)
		}
		return nil
	})
	testutil.Eventually(t, 15*time.Second, 20*time.Millisecond, func() error {
		if id, addr := w.leader.current(); id != "m1" || addr != managerQUIC {
			return fmt.Errorf("leader %q at %q", id, addr)
		}
		return nil
	})

	// The install pass of a rotation (send old, accept new) reaches both
	// planes; memberlist refuses SetKeys on a node started without keys, so
	// success here means the gossip keyring took the new key.
	next, err := security.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.ReloadSecrets(secret, next); err != nil {
		t.Fatalf("reload secrets: %v", err)
	}
	if ids := keyring.AcceptedKeyIDs(); len(ids) != 2 || ids[0] != security.KeyID(secret) || ids[1] != security.KeyID(next) {
		t.Fatalf("accepted key ids after reload: %v", ids)
	}
	// The manager's probes see the new accept list in the heartbeat.
	testutil.Eventually(t, 15*time.Second, 20*time.Millisecond, func() error {
		hb := rec.heartbeat()
		if hb.SendKeyID != security.KeyID(secret) || len(hb.AcceptKeyIDs) != 2 || hb.AcceptKeyIDs[1] != security.KeyID(next) {
			return fmt.Errorf("probed heartbeat keys %08x %x", hb.SendKeyID, hb.AcceptKeyIDs)
		}
		return nil
	})
	if err := w.ReloadSecrets("weak", ""); err == nil {
		t.Fatal("a weak secret was accepted on reload")
	}
}
