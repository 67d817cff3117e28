package worker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/security"
	"tempest/security/securitytest"
	"tempest/swim"
	"tempest/transport"
	"tempest/wire"
)

func TestLocalStateIsTheHeartbeat(t *testing.T) {
	h := startHarness(t, noPushes)
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, time.Hour, 3), 1))
	got, want := currentAck(t, h.w)
	if got.NodeID != "w1" || got.Version != want.Version || got.AvailableCores != 1 || got.TotalCores != 4 ||
		got.QueueDepth != 1 || got.State != wire.WorkerHealthy || got.Datacenter != "dc1" || got.ActiveWorkflows["wf"] != "RUNNING" {
		t.Fatalf("ack payload %+v, heartbeat %+v", got, want)
	}
	// Every change moves the version.
	before := want.Version
	if _, err := h.m.cancel(t, "w1", &wire.CancelJob{JobID: "j", FenceToken: 1}); err != nil {
		t.Fatal(err)
	}
	if after := h.w.Heartbeat(); after.Version <= before || after.AvailableCores != 4 {
		t.Fatalf("after cancel: version %d (was %d), available %d", after.Version, before, after.AvailableCores)
	}
}

// noPushes keeps the heartbeat push from encoding the SWIM payload (it
// pushes once the worker registers, then not for an hour), so a test that
// sees the payload come up to date saw an ack do it.
var noPushes = harnessOption{cfg: func(c *Config) { c.HeartbeatPush = time.Hour }}

// currentAck returns an ack payload and the heartbeat as of that payload.
// An ack is allowed to lag: one whose LocalState finds the worker's lock
// busy carries the payload of the change before (the next ack, or the next
// push, brings it up to date), and the health monitor may change the
// heartbeat between two reads. So it polls for an ack whose version is the
// heartbeat's both just before and just after it: the payload of that
// moment, which must then show everything the heartbeat shows.
func currentAck(t *testing.T, w *Worker) (got *wire.WorkerHeartbeat, want wire.WorkerHeartbeat) {
	t.Helper()
	emb := embedder{w}
	testutil.Eventually(t, waitFor, pollStep, func() error {
		before := w.Heartbeat().Version
		hb, err := swim.DecodeWorkerHeartbeat(emb.LocalState())
		if err != nil {
			t.Fatalf("ack payload: %v", err) // an ack never carries garbage or nothing
		}
		got, want = hb, w.Heartbeat()
		if got.Version != before || want.Version != before {
			return fmt.Errorf("ack version %d, heartbeat %d then %d", got.Version, before, want.Version)
		}
		return nil
	})
	return got, want
}

func TestManagerHeartbeatTracksLeader(t *testing.T) {
	h := startHarness(t, harnessOption{cfg: func(c *Config) { c.Managers = []string{"nowhere"} }})
	emb := embedder{h.w}
	probe := func(hb wire.ManagerHeartbeat) {
		b, err := swim.EncodeManagerHeartbeat(&hb)
		if err != nil {
			t.Fatal(err)
		}
		emb.PeerState(swim.NodeInfo{Name: hb.NodeID}, b, time.Millisecond)
	}
	leader := func() string {
		_, addr := h.w.leader.current()
		return addr
	}
	steps := []struct {
		name string
		hb   wire.ManagerHeartbeat
		want string
	}{
		{"leader announces", wire.ManagerHeartbeat{NodeID: "m1", Datacenter: "dc1", IsLeader: true, Term: 3, Version: 10, Addr: "10.0.0.1:7400"}, "10.0.0.1:7400"},
		{"stale version of another claim", wire.ManagerHeartbeat{NodeID: "m1", Datacenter: "dc1", IsLeader: true, Term: 3, Version: 9, Addr: "10.0.0.9:7400"}, "10.0.0.1:7400"},
		{"older term", wire.ManagerHeartbeat{NodeID: "m2", Datacenter: "dc1", IsLeader: true, Term: 2, Version: 1, Addr: "10.0.0.2:7400"}, "10.0.0.1:7400"},
		{"other datacenter", wire.ManagerHeartbeat{NodeID: "m5", Datacenter: "dc2", IsLeader: true, Term: 9, Version: 1, Addr: "10.0.0.5:7400"}, "10.0.0.1:7400"},
		{"follower naming someone", wire.ManagerHeartbeat{NodeID: "m2", Datacenter: "dc1", LeaderID: "m3", Term: 3, Version: 2, Addr: "10.0.0.2:7400"}, "10.0.0.1:7400"},
		{"newer term elsewhere", wire.ManagerHeartbeat{NodeID: "m2", Datacenter: "dc1", IsLeader: true, Term: 4, Version: 3, Addr: "10.0.0.2:7400"}, "10.0.0.2:7400"},
	}
	for _, st := range steps {
		probe(st.hb)
		if got := leader(); got != st.want {
			t.Fatalf("%s: leader %q, want %q", st.name, got, st.want)
		}
	}
	// A node speaking for another is ignored.
	b, _ := swim.EncodeManagerHeartbeat(&wire.ManagerHeartbeat{NodeID: "m9", Datacenter: "dc1", IsLeader: true, Term: 99, Version: 1, Addr: "10.0.0.9:7400"})
	emb.PeerState(swim.NodeInfo{Name: "m2"}, b, 0)
	// So are a worker's heartbeat and garbage.
	wb, _ := swim.EncodeWorkerHeartbeat(&wire.WorkerHeartbeat{NodeID: "w2"})
	emb.PeerState(swim.NodeInfo{Name: "w2"}, wb, 0)
	emb.PeerState(swim.NodeInfo{Name: "x"}, []byte{0, 73, 0xff, 0xff}, 0)
	emb.PeerState(swim.NodeInfo{Name: "x"}, nil, 0)
	if got := leader(); got != "10.0.0.2:7400" {
		t.Fatalf("leader moved by a non-manager payload: %q", got)
	}
	// Follower heartbeats name the leader when the worker knows none.
	h.w.leader.lost("10.0.0.2:7400")
	probe(wire.ManagerHeartbeat{NodeID: "m1", Datacenter: "dc1", LeaderID: "m2", Term: 4, Version: 11, Addr: "10.0.0.1:7400"})
	if got := leader(); got != "10.0.0.2:7400" {
		t.Fatalf("leader from a follower's heartbeat: %q", got)
	}
}

func TestHeartbeatTrimmedToFitAnAck(t *testing.T) {
	hb := wire.WorkerHeartbeat{NodeID: "w1", State: wire.WorkerHealthy, TotalCores: 512, AvailableCores: 12, Version: 1, ActiveWorkflows: map[string]string{}}
	for i := range 300 {
		hb.ActiveWorkflows[fmt.Sprintf("workflow-%s-%03d", strings.Repeat("x", 20), i)] = "RUNNING"
	}
	b := encodeHeartbeat(hb)
	if len(b) == 0 || len(b) > swim.MaxStateSize {
		t.Fatalf("encoded %d bytes, limit %d", len(b), swim.MaxStateSize)
	}
	got, err := swim.DecodeWorkerHeartbeat(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.AvailableCores != 12 || got.TotalCores != 512 || len(got.ActiveWorkflows) == 0 || len(got.ActiveWorkflows) >= 300 {
		t.Fatalf("trimmed heartbeat: cores %d/%d, %d workflows", got.AvailableCores, got.TotalCores, len(got.ActiveWorkflows))
	}
}

// The heartbeat names the keys the worker sends with and accepts, and a
// secret reload re-encodes it at once, so a rotation pass shows up in
// `tempest cluster` without waiting for an unrelated change.
func TestHeartbeatCarriesKeyIDs(t *testing.T) {
	h := startHarness(t, harnessOption{})
	emb := embedder{h.w}
	decode := func() *wire.WorkerHeartbeat {
		t.Helper()
		hb, err := swim.DecodeWorkerHeartbeat(emb.LocalState())
		if err != nil {
			t.Fatal(err)
		}
		return hb
	}
	before := decode()
	if before.SendKeyID != h.w.keyring.SendKeyID() || !slices.Equal(before.AcceptKeyIDs, h.w.keyring.AcceptedKeyIDs()) {
		t.Fatalf("heartbeat keys %08x %x, keyring %08x %x", before.SendKeyID, before.AcceptKeyIDs,
			h.w.keyring.SendKeyID(), h.w.keyring.AcceptedKeyIDs())
	}
	old, next := securitytest.Secret(t), securitytest.Secret(t)
	for _, pass := range []struct {
		name              string
		current, previous string
		send              uint32
		accept            []uint32
	}{
		{"install", old, next, security.KeyID(old), []uint32{security.KeyID(old), security.KeyID(next)}},
		{"use", next, old, security.KeyID(next), []uint32{security.KeyID(next), security.KeyID(old)}},
		{"remove", next, "", security.KeyID(next), []uint32{security.KeyID(next)}},
	} {
		if err := h.w.ReloadSecrets(pass.current, pass.previous); err != nil {
			t.Fatalf("%s: %v", pass.name, err)
		}
		hb := decode()
		if hb.SendKeyID != pass.send || !slices.Equal(hb.AcceptKeyIDs, pass.accept) {
			t.Fatalf("%s: heartbeat keys %08x %x, want %08x %x", pass.name, hb.SendKeyID, hb.AcceptKeyIDs, pass.send, pass.accept)
		}
		if hb.Version <= before.Version {
			t.Fatalf("%s: version %d did not move past %d", pass.name, hb.Version, before.Version)
		}
		before = hb
	}
}

// The worker pushes its heartbeat to the leader it registered with, and
// pushes again soon after its free cores change.
func TestHeartbeatPushedToLeader(t *testing.T) {
	var mu sync.Mutex
	var got []wire.WorkerHeartbeat
	h := startHarness(t, harnessOption{
		cfg: func(c *Config) { c.HeartbeatPush = 50 * time.Millisecond },
		before: func(h *harness) {
			h.m.tr.Handle(wire.TypeWorkerHeartbeat, func(_ context.Context, from transport.Peer, msg wire.Message) (wire.Message, error) {
				hb := msg.(*wire.WorkerHeartbeat)
				if hb.NodeID != from.NodeID {
					t.Errorf("heartbeat of %s sent by %s", hb.NodeID, from.NodeID)
				}
				mu.Lock()
				got = append(got, *hb)
				mu.Unlock()
				return nil, nil
			})
		},
	})
	h.waitRegistered(t, h.m)
	seen := func(cond func(wire.WorkerHeartbeat) bool) error {
		mu.Lock()
		defer mu.Unlock()
		for _, hb := range got {
			if cond(hb) {
				return nil
			}
		}
		return fmt.Errorf("no such heartbeat among %d pushed", len(got))
	}
	testutil.Eventually(t, waitFor, pollStep, func() error {
		return seen(func(hb wire.WorkerHeartbeat) bool {
			return hb.NodeID == "w1" && hb.AvailableCores == 4 && hb.State == wire.WorkerHealthy
		})
	})
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, time.Hour, 3), 1))
	testutil.Eventually(t, waitFor, pollStep, func() error {
		return seen(func(hb wire.WorkerHeartbeat) bool {
			return hb.AvailableCores == 1 && hb.ActiveWorkflows["wf"] == "RUNNING"
		})
	})
}

// Changes do not encode the SWIM payload: the ack that next needs it does,
// once for any number of changes, and it is current.
func TestHeartbeatEncodedWhenAskedNotOnEveryChange(t *testing.T) {
	h := startHarness(t, noPushes)
	emb := embedder{h.w}
	for i := range 3 {
		h.m.mustStart(t, "w1", dispatchOf("j", fmt.Sprintf("wf%d", i), sleepSpec(t, time.Hour, 1), uint64(i+1)))
	}
	// Holding the lock keeps the push loop from encoding meanwhile.
	h.w.mu.Lock()
	before := h.w.hbEncodes.Load()
	for range 20 {
		h.w.bumpLocked()
	}
	n := h.w.hbEncodes.Load() - before
	h.w.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d encodes for 20 changes no ack asked for", n)
	}
	if got, want := currentAck(t, h.w); got.Version != want.Version || len(got.ActiveWorkflows) != 3 || got.AvailableCores != 1 {
		t.Fatalf("ack payload version %d, %d workflows, %d free; heartbeat version %d", got.Version, len(got.ActiveWorkflows), got.AvailableCores, want.Version)
	}
	// The health monitor may change the heartbeat meanwhile, and then an
	// encode is due: judge only a window in which the version stood still
	// and the payload was current from its start.
	testutil.Eventually(t, waitFor, pollStep, func() error {
		v := h.w.Heartbeat().Version
		first, err := swim.DecodeWorkerHeartbeat(emb.LocalState())
		if err != nil {
			t.Fatal(err)
		}
		encodes := h.w.hbEncodes.Load()
		emb.LocalState()
		n := h.w.hbEncodes.Load()
		if first.Version != v || h.w.Heartbeat().Version != v {
			return fmt.Errorf("the heartbeat changed (version %d, ack %d, now %d)", v, first.Version, h.w.Heartbeat().Version)
		}
		if n != encodes {
			t.Fatalf("an unchanged heartbeat was encoded again (%d → %d)", encodes, n)
		}
		return nil
	})
}
