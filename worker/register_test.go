package worker

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/swim"
	"tempest/wire"
)

func TestRegistrationOrder(t *testing.T) {
	for _, tc := range []struct {
		addrs []string
		avoid string
		want  []string
	}{
		{[]string{"a", "b", "c"}, "", []string{"a", "b", "c"}},
		{[]string{"a", "b", "c"}, "a", []string{"b", "c", "a"}},
		{[]string{"a", "b", "a", "", "c"}, "b", []string{"a", "c", "b"}},
		{[]string{"a"}, "z", []string{"a"}},
		{nil, "", []string{}},
	} {
		if got := registrationOrder(tc.addrs, tc.avoid); !slices.Equal(got, tc.want) {
			t.Errorf("registrationOrder(%v, %q) = %v, want %v", tc.addrs, tc.avoid, got, tc.want)
		}
	}
}

func TestRegistrationDescribesWorker(t *testing.T) {
	h := startHarness(t, harnessOption{})
	h.waitRegistered(t, h.m)
	r := h.m.registrations()[0]
	if r.NodeID != "w1" || r.Addr != "w1" || r.Datacenter != "dc1" || r.TotalCores != 4 || r.SwimAddr != "127.0.0.1:7946" || r.Version == 0 {
		t.Fatalf("registration: %+v", r)
	}
}

func TestRegistrationRetriedUntilAccepted(t *testing.T) {
	var refused atomic.Int32
	h := startHarness(t, harnessOption{
		cfg: func(c *Config) { c.Managers = []string{"nowhere", "m1"} },
		before: func(h *harness) {
			h.m.setRegister(func(*wire.WorkerRegistration) (wire.Message, error) {
				if refused.Add(1) <= 2 {
					return &wire.RegistrationAck{Accepted: false, Error: "not ready"}, nil
				}
				return &wire.RegistrationAck{Accepted: true, Leader: "m1", LeaderAddr: "m1"}, nil
			})
		},
	})
	testutil.Eventually(t, waitFor, pollStep, func() error {
		if _, addr := h.w.leader.current(); addr != "m1" {
			return fmt.Errorf("leader %q after %d registrations", addr, len(h.m.registrations()))
		}
		return nil
	})
	if n := len(h.m.registrations()); n != 3 {
		t.Fatalf("%d registrations, want 2 refused + 1 accepted", n)
	}
}

func TestRegistrationFollowsNotLeader(t *testing.T) {
	var m2 *testManager
	h := startHarness(t, harnessOption{before: func(h *harness) {
		m2 = newTestManager(t, h.hub, "m2")
		h.m.setRegister(func(*wire.WorkerRegistration) (wire.Message, error) {
			return nil, &wire.Error{Code: wire.CodeNotLeader, Leader: "m2", LeaderAddr: "m2"}
		})
	}})
	h.waitRegistered(t, m2)
	testutil.Eventually(t, waitFor, pollStep, func() error {
		if id, addr := h.w.leader.current(); id != "m2" || addr != "m2" {
			return fmt.Errorf("leader %q at %q", id, addr)
		}
		return nil
	})
}

// testFailover loses the leader m1 in some way; the worker must register
// with m2, report its running workflow there, and carry on reporting to m2.
func testFailover(t *testing.T, lose func(h *harness)) {
	h := startHarness(t, harnessOption{cfg: func(c *Config) { c.Managers = []string{"m1", "m2"} }})
	m2 := newTestManager(t, h.hub, "m2")
	h.waitRegistered(t, h.m)
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, time.Hour, 2), 1))
	testutil.Eventually(t, waitFor, pollStep, func() error {
		if len(h.m.progressOf("wf")) == 0 {
			return fmt.Errorf("no progress at m1 yet")
		}
		return nil
	})

	lose(h)

	h.waitRegistered(t, m2)
	reg := m2.registrations()[0]
	if len(reg.ActiveWorkflows) != 1 || reg.ActiveWorkflows[0].WorkflowID != "wf" || reg.ActiveWorkflows[0].Status != wire.WorkflowRunning {
		t.Fatalf("registration at m2 reports %+v; want wf RUNNING", reg.ActiveWorkflows)
	}
	testutil.Eventually(t, waitFor, pollStep, func() error {
		if len(m2.progressOf("wf")) == 0 {
			return fmt.Errorf("no progress at m2 yet")
		}
		return nil
	})
	// The workflow was never interrupted.
	if s := h.w.Snapshot(); s.ActiveWorkflows["wf"].Status != wire.WorkflowRunning {
		t.Fatalf("workflow after failover: %+v", s.ActiveWorkflows["wf"])
	}
}

func TestFailoverWhenLeaderUnreachable(t *testing.T) {
	testFailover(t, func(h *harness) { h.hub.Isolate("m1") })
}

func TestFailoverWhenSWIMDeclaresLeaderDead(t *testing.T) {
	testFailover(t, func(h *harness) {
		h.members.mu.Lock()
		onDead := h.members.cfg.Events.OnDead
		h.members.mu.Unlock()
		onDead(swim.NodeInfo{Name: "m1", State: swim.StateDead, Meta: swim.NodeMeta{Role: wire.RoleManager, Datacenter: "dc1", QUICAddr: "m1"}})
	})
}

// A manager that knows no leader yet still takes the registration; the
// worker reports to it, and learns its id from the first progress ack.
func TestRegistrationNamingNoLeader(t *testing.T) {
	h := startHarness(t, harnessOption{before: func(h *harness) {
		h.m.setRegister(func(*wire.WorkerRegistration) (wire.Message, error) {
			return &wire.RegistrationAck{Accepted: true}, nil
		})
		h.m.setProgress(func(p *wire.WorkflowProgress) (wire.Message, error) {
			return &wire.ProgressAck{WorkflowID: p.WorkflowID, Leader: "m1"}, nil
		})
	}})
	h.waitRegistered(t, h.m)
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, 10*time.Millisecond, 1), 1))
	h.m.waitFinal(t, "wf")
	h.waitIdle(t)
	if id, addr := h.w.leader.current(); id != "m1" || addr != "m1" {
		t.Fatalf("leader %q at %q, want m1", id, addr)
	}
}

// While the group has no leader, a manager accepts a registration without
// naming one and refuses every report, and each refusal asks for another
// round. Those rounds succeed, so only the leaderless pacing spaces them:
// without it the worker registered as fast as it was asked (hundreds of
// rounds a second against the managers trying to elect a leader).
func TestLeaderlessRegistrationRoundsArePaced(t *testing.T) {
	h := startHarness(t, harnessOption{before: func(h *harness) {
		h.m.setRegister(func(*wire.WorkerRegistration) (wire.Message, error) {
			return &wire.RegistrationAck{Accepted: true}, nil
		})
	}})
	h.waitRegistered(t, h.m)
	// Ask for a round as fast as reports would: the bound holds however
	// slow the machine is, since a slower worker registers less.
	const window = time.Second
	before := len(h.m.registrations())
	for end := time.Now().Add(window); time.Now().Before(end); {
		h.w.requestRegistration("m1")
		time.Sleep(time.Millisecond)
	}
	// Leaderless rounds are at least registerBackoffBase/2 apart (the
	// backoff's jitter floor), one more for a round already under way.
	if n, most := len(h.m.registrations())-before, int(window/(registerBackoffBase/2))+1; n > most {
		t.Fatalf("%d registration rounds in %v without a leader, want at most %d", n, window, most)
	}
	// A round that learns a leader ends the pacing.
	h.m.setRegister(func(*wire.WorkerRegistration) (wire.Message, error) {
		return &wire.RegistrationAck{Accepted: true, Leader: "m1", LeaderAddr: "m1"}, nil
	})
	testutil.Eventually(t, waitFor, pollStep, func() error {
		h.w.requestRegistration("")
		if id, _ := h.w.leader.current(); id != "m1" {
			return fmt.Errorf("leader %q", id)
		}
		return nil
	})
}
