package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
	"tempest/workflow"
)

func TestDrainRefusesNewWorkAndFinishesRunning(t *testing.T) {
	h := startHarness(t, harnessOption{})
	h.waitRegistered(t, h.m)
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, 300*time.Millisecond, 2), 1))

	drained := make(chan error, 1)
	go func() { drained <- h.w.Drain(context.Background()) }()

	testutil.Eventually(t, waitFor, pollStep, func() error {
		if s := h.w.Heartbeat().State; s != wire.WorkerDraining {
			return fmt.Errorf("state %s", s)
		}
		return nil
	})
	ack, err := h.m.dispatch(t, "w1", dispatchOf("j", "late", sleepSpec(t, time.Millisecond, 1), 2))
	if err != nil || ack.Accepted || !strings.Contains(ack.Error, "draining") {
		t.Fatalf("dispatch while draining: %+v, %v; want refused, draining", ack, err)
	}

	select {
	case err := <-drained:
		if err != nil {
			t.Fatalf("Drain: %v", err)
		}
	case <-time.After(waitFor):
		t.Fatal("Drain did not return")
	}
	// The running workflow finished normally and its final was delivered
	// before Drain returned.
	p, ok := h.m.final("wf")
	if !ok || p.Status != wire.WorkflowCompleted {
		t.Fatalf("final after drain: %+v (present %v)", p, ok)
	}
	if !h.members.hasLeft() {
		t.Fatal("drained worker did not leave SWIM")
	}
	select {
	case <-h.exited:
	case <-time.After(waitFor):
		t.Fatal("Run did not return after Drain")
	}
	if err := h.w.Drain(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Drain after stop: %v", err)
	}
}

func TestDrainTimeoutHandsBackWork(t *testing.T) {
	h := startHarness(t, harnessOption{cfg: func(c *Config) { c.DrainTimeout = 100 * time.Millisecond }})
	h.waitRegistered(t, h.m)
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, time.Hour, 2), 1))

	err := h.w.Drain(context.Background())
	if err == nil || !strings.Contains(err.Error(), "1 workflows stopped unfinished") {
		t.Fatalf("Drain: %v; want it to report the stopped workflow", err)
	}
	p, ok := h.m.final("wf")
	if !ok || p.Status != wire.WorkflowFailed || !strings.Contains(p.Error, "handed back") {
		t.Fatalf("final: %+v (present %v); want FAILED, handed back", p, ok)
	}
	<-h.exited
}

func TestLifecycleMisuse(t *testing.T) {
	w, err := New(testConfig(t), Deps{Keyring: testKeyring(t), Registry: workflow.DefaultRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Drain(context.Background()); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Drain before Run: %v", err)
	}
	if s := w.Heartbeat().State; s != wire.WorkerOffline {
		t.Fatalf("state before Run: %s", s)
	}

	h := startHarness(t, harnessOption{})
	h.stop()
	<-h.exited
	if err := h.w.Drain(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Drain after a hard stop: %v", err)
	}
	if err := h.w.Run(context.Background()); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second Run: %v", err)
	}
}

// A hard stop (Run's context ends) cancels running work without waiting.
func TestHardStopCancelsRunningWork(t *testing.T) {
	h := startHarness(t, harnessOption{})
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, time.Hour, 2), 1))
	h.stop()
	select {
	case <-h.exited:
	case <-time.After(waitFor):
		t.Fatal("Run did not return after its context ended")
	}
	if s := h.w.Snapshot(); s.State != wire.WorkerOffline || s.AvailableCores != 4 {
		t.Fatalf("after stop: %+v", s)
	}
}
