package worker

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
)

func TestCancelStopsWorkflowAndFreesCores(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cancel *wire.CancelJob
	}{
		{"by job", &wire.CancelJob{JobID: "j", FenceToken: 10, Reason: "user asked"}},
		{"by workflow", &wire.CancelJob{WorkflowID: "wf", FenceToken: 10, Reason: "user asked"}},
		{"newer leader", &wire.CancelJob{JobID: "j", WorkflowID: "wf", FenceToken: 99, Reason: "user asked"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startHarness(t, harnessOption{})
			h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, time.Hour, 3), 10))

			start := time.Now()
			ack, err := h.m.cancel(t, "w1", tc.cancel)
			if err != nil {
				t.Fatal(err)
			}
			if !ack.Cancelled || ack.WorkflowsCancelled != 1 || ack.JobID != "j" {
				t.Fatalf("cancel ack: %+v", ack)
			}
			// The ack waits for the runner, so the cores are free when it
			// arrives: the manager can reuse them at once.
			if s := h.w.Snapshot(); s.AvailableCores != 4 {
				t.Fatalf("available cores right after the cancel ack: %d, want 4", s.AvailableCores)
			}
			p := h.m.waitFinal(t, "wf")
			if p.Status != wire.WorkflowCancelled || p.Error != "cancelled: user asked" {
				t.Fatalf("final: %s %q", p.Status, p.Error)
			}
			t.Logf("cancel to final progress: %s", time.Since(start))
			h.waitIdle(t)
		})
	}
}

func TestCancelOnlyTheNamedWorkflow(t *testing.T) {
	h := startHarness(t, harnessOption{})
	h.m.mustStart(t, "w1", dispatchOf("j", "a", sleepSpec(t, time.Hour, 1), 1))
	h.m.mustStart(t, "w1", dispatchOf("j", "b", sleepSpec(t, time.Hour, 1), 2))
	h.m.mustStart(t, "w1", dispatchOf("other", "c", sleepSpec(t, time.Hour, 1), 3))

	ack, err := h.m.cancel(t, "w1", &wire.CancelJob{JobID: "j", WorkflowID: "b", FenceToken: 5})
	if err != nil || ack.WorkflowsCancelled != 1 {
		t.Fatalf("cancel b: %+v, %v", ack, err)
	}
	ack, err = h.m.cancel(t, "w1", &wire.CancelJob{JobID: "j", FenceToken: 5})
	if err != nil || ack.WorkflowsCancelled != 1 {
		t.Fatalf("cancel rest of j: %+v, %v", ack, err)
	}
	s := h.w.Snapshot()
	if s.AvailableCores != 3 {
		t.Fatalf("available %d, want 3 (only c running)", s.AvailableCores)
	}
	if p, ok := s.ActiveWorkflows["c"]; !ok || p.Status != wire.WorkflowRunning {
		t.Fatalf("workflow c: %+v, present %v", p, ok)
	}
}

func TestCancelStaleFenceRefused(t *testing.T) {
	h := startHarness(t, harnessOption{})
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, time.Hour, 2), 10))
	_, err := h.m.cancel(t, "w1", &wire.CancelJob{JobID: "j", FenceToken: 9})
	if !errors.Is(err, wire.ErrStaleFence) {
		t.Fatalf("cancel with an older token: %v, want ErrStaleFence", err)
	}
	if s := h.w.Snapshot(); s.ActiveWorkflows["wf"].Status != wire.WorkflowRunning || s.AvailableCores != 2 {
		t.Fatalf("workflow after a stale cancel: %+v", s)
	}
}

func TestCancelNothingRunningSucceeds(t *testing.T) {
	h := startHarness(t, harnessOption{})
	ack, err := h.m.cancel(t, "w1", &wire.CancelJob{JobID: "nope", FenceToken: 1})
	if err != nil || !ack.Cancelled || ack.WorkflowsCancelled != 0 {
		t.Fatalf("cancel of an unknown job: %+v, %v", ack, err)
	}
	if _, err := h.m.cancel(t, "w1", &wire.CancelJob{FenceToken: 1}); wire.CodeOf(err) != wire.CodeRejected {
		t.Fatalf("cancel naming nothing: %v, want rejected", err)
	}
	if _, err := h.m.cancel(t, "w1", &wire.CancelJob{JobID: "j"}); wire.CodeOf(err) != wire.CodeRejected {
		t.Fatalf("cancel without a fence token: %v, want rejected", err)
	}
}

// A cancel can overtake its dispatch; the dispatch must then not run.
func TestCancelBeforeDispatchRefusesIt(t *testing.T) {
	h := startHarness(t, harnessOption{})
	if _, err := h.m.cancel(t, "w1", &wire.CancelJob{JobID: "j", WorkflowID: "wf", FenceToken: 10}); err != nil {
		t.Fatal(err)
	}
	_, err := h.m.dispatch(t, "w1", dispatchOf("j", "wf", sleepSpec(t, time.Hour, 1), 10))
	if !errors.Is(err, wire.ErrStaleFence) {
		t.Fatalf("dispatch after its cancel: %v, want ErrStaleFence", err)
	}
}

func TestProgressAckCancelStopsWorkflow(t *testing.T) {
	h := startHarness(t, harnessOption{})
	h.m.setProgress(func(p *wire.WorkflowProgress) (wire.Message, error) {
		return &wire.ProgressAck{WorkflowID: p.WorkflowID, Cancel: !p.Final}, nil
	})
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, time.Hour, 1), 1))
	p := h.m.waitFinal(t, "wf")
	if p.Status != wire.WorkflowCancelled || !strings.Contains(p.Error, "cancelled by manager") {
		t.Fatalf("final: %s %q", p.Status, p.Error)
	}
	h.waitIdle(t)
}

// A manager that answers progress with a stale-fence error holds a newer
// dispatch of the workflow elsewhere: the zombie here must stop.
func TestProgressStaleFenceStopsZombie(t *testing.T) {
	h := startHarness(t, harnessOption{})
	h.m.setProgress(func(p *wire.WorkflowProgress) (wire.Message, error) {
		return nil, wire.Errorf(wire.CodeStaleFence, "workflow %s now runs elsewhere", p.WorkflowID)
	})
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, time.Hour, 2), 1))
	h.waitIdle(t)
	testutil.Eventually(t, waitFor, pollStep, func() error {
		if _, ok := h.m.final("wf"); !ok {
			return fmt.Errorf("final not sent")
		}
		return nil
	})
}
