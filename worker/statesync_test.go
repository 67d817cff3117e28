package worker

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"tempest/internal/testutil"

	"tempest/wire"
)

func TestStateSyncReportsActiveWorkflows(t *testing.T) {
	h := startHarness(t, harnessOption{})
	h.m.mustStart(t, "w1", dispatchOf("j1", "a", sleepSpec(t, time.Hour, 1), 11))
	h.m.mustStart(t, "w1", dispatchOf("j2", "b", sleepSpec(t, time.Hour, 2), 12))

	resp, err := h.m.call(t, "w1", &wire.StateSyncRequest{RequesterID: "m1", RequesterRole: wire.RoleManager})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.(*wire.StateSyncResponse)
	s := r.WorkerState
	if r.ResponderID != "w1" || s == nil || r.ManagerState != nil {
		t.Fatalf("response: %+v", r)
	}
	if s.NodeID != "w1" || s.State != wire.WorkerHealthy || s.TotalCores != 4 || s.AvailableCores != 1 || s.Addr != "w1" || s.Version != r.CurrentVersion {
		t.Fatalf("snapshot: %+v", s)
	}
	for _, want := range []struct {
		id, job string
		cores   []int
		fence   uint64
	}{{"a", "j1", []int{0}, 11}, {"b", "j2", []int{1, 2}, 12}} {
		p, ok := s.ActiveWorkflows[want.id]
		if !ok || p.JobID != want.job || p.Status != wire.WorkflowRunning || !slices.Equal(p.AssignedCores, want.cores) || p.FenceToken != want.fence || p.WorkerID != "w1" {
			t.Errorf("workflow %s: %+v (present %v)", want.id, p, ok)
		}
	}
	if len(s.ActiveWorkflows) != 2 {
		t.Errorf("%d workflows, want 2", len(s.ActiveWorkflows))
	}
}

// A manager asking for state with a newer term is the new leader: pending
// finals go to it without waiting for a heartbeat.
func TestStateSyncFromNewerTermSwitchesLeader(t *testing.T) {
	h := startHarness(t, harnessOption{before: func(h *harness) {
		h.m.setRegister(func(*wire.WorkerRegistration) (wire.Message, error) {
			return &wire.RegistrationAck{Accepted: true, Leader: "m1", LeaderAddr: "m1", Term: 1}, nil
		})
	}})
	m2 := newTestManager(t, h.hub, "m2")
	h.waitRegistered(t, h.m) // leader m1, term 1
	// The manager has the registration before the worker has its answer.
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if _, addr := h.w.leader.current(); addr != "m1" {
			return fmt.Errorf("worker follows %q, want m1", addr)
		}
		return nil
	})

	// An older or equal term does not move the worker.
	for _, term := range []uint64{0, 1} {
		if _, err := m2.call(t, "w1", &wire.StateSyncRequest{RequesterID: "m2", RequesterRole: wire.RoleManager, Term: term}); err != nil {
			t.Fatal(err)
		}
		if _, addr := h.w.leader.current(); addr != "m1" {
			t.Fatalf("term %d state sync moved the leader to %q", term, addr)
		}
	}
	if _, err := m2.call(t, "w1", &wire.StateSyncRequest{RequesterID: "m2", RequesterRole: wire.RoleManager, Term: 2}); err != nil {
		t.Fatal(err)
	}
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, 10*time.Millisecond, 1), 2<<32))
	if p := m2.waitFinal(t, "wf"); p.Status != wire.WorkflowCompleted {
		t.Fatalf("final at m2: %+v", p)
	}
}

// A dispatch a deposed leader issued before a newer leader synced with
// the worker arrives late: the new leader did not see it and may have
// placed the workflow elsewhere, so running it would run it twice.
func TestDispatchFromOlderTermRefusedAfterNewerSync(t *testing.T) {
	h := startHarness(t, harnessOption{before: func(h *harness) {
		h.m.setRegister(func(*wire.WorkerRegistration) (wire.Message, error) {
			return &wire.RegistrationAck{Accepted: true, Leader: "m1", LeaderAddr: "m1", Term: 1}, nil
		})
	}})
	m2 := newTestManager(t, h.hub, "m2")
	h.waitRegistered(t, h.m)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if _, addr := h.w.leader.current(); addr != "m1" {
			return fmt.Errorf("worker follows %q, want m1", addr)
		}
		return nil
	})
	// The term's own leader dispatches as usual.
	h.m.mustStart(t, "w1", dispatchOf("j", "now", sleepSpec(t, time.Hour, 1), 1<<32|1))

	if _, err := m2.call(t, "w1", &wire.StateSyncRequest{RequesterID: "m2", RequesterRole: wire.RoleManager, Term: 3}); err != nil {
		t.Fatal(err)
	}
	_, err := h.m.dispatch(t, "w1", dispatchOf("j", "late", sleepSpec(t, time.Hour, 1), 1<<32|2))
	if !errors.Is(err, wire.ErrStaleFence) {
		t.Fatalf("dispatch of term 1 after a term-3 sync: %v, want ErrStaleFence", err)
	}
	if _, ok := h.w.Snapshot().ActiveWorkflows["late"]; ok {
		t.Fatal("the late dispatch runs")
	}
	// The new term's leader is obeyed.
	m2.mustStart(t, "w1", dispatchOf("j", "late", sleepSpec(t, time.Hour, 1), 3<<32|1))
}
