package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
	"tempest/workflow"
)

func TestDispatchRunsSleepToCompletion(t *testing.T) {
	h := startHarness(t, harnessOption{})
	h.waitRegistered(t, h.m)

	ack := h.m.mustStart(t, "w1", dispatchOf("job-1", "wf-1", sleepSpec(t, 50*time.Millisecond, 3), 7))
	if !slices.Equal(ack.CoresAssigned, []int{0, 1, 2}) || ack.AvailableCores != 1 {
		t.Fatalf("ack: cores %v, available %d; want [0 1 2], 1", ack.CoresAssigned, ack.AvailableCores)
	}

	p := h.m.waitFinal(t, "wf-1")
	if p.Status != wire.WorkflowCompleted || p.CompletedCount != 1 || p.Error != "" {
		t.Fatalf("final: status %s, completed %d, error %q", p.Status, p.CompletedCount, p.Error)
	}
	if p.JobID != "job-1" || p.WorkerID != "w1" || p.FenceToken != 7 || !slices.Equal(p.AssignedCores, []int{0, 1, 2}) {
		t.Fatalf("final identifies job %q worker %q fence %d cores %v", p.JobID, p.WorkerID, p.FenceToken, p.AssignedCores)
	}
	if len(p.StepStats) != 1 || p.StepStats[0].CompletedCount != 1 {
		t.Fatalf("final step stats: %+v", p.StepStats)
	}
	// The cores were freed before the final progress left.
	if s := h.w.Snapshot(); s.AvailableCores != 4 {
		t.Fatalf("available cores after final: %d, want 4", s.AvailableCores)
	}
	h.waitIdle(t) // and the execution is retired once acknowledged
}

func TestDispatchRefused(t *testing.T) {
	h := startHarness(t, harnessOption{})
	ok := sleepSpec(t, time.Minute, 1)
	badParams := ok
	badParams.Params = []byte{0xff}
	unknown := ok
	unknown.Type = "teleport"

	for _, tc := range []struct {
		name string
		d    *wire.WorkflowDispatch
		want string
	}{
		{"too many cores", dispatchOf("j", "big", sleepSpec(t, time.Minute, 5), 1), "needs 5 cores, 4 free"},
		{"unknown type", dispatchOf("j", "u", unknown, 1), "unknown workflow type"},
		{"bad params", dispatchOf("j", "b", badParams, 1), "decode params"},
		{"no workflow id", dispatchOf("j", "", ok, 1), "no workflow id"},
		{"no job id", dispatchOf("", "x", ok, 1), "no job id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ack, err := h.m.dispatch(t, "w1", tc.d)
			if err != nil {
				t.Fatalf("want an ack, got error %v", err)
			}
			if ack.Accepted || !strings.Contains(ack.Error, tc.want) {
				t.Fatalf("ack accepted=%v error %q; want refused with %q", ack.Accepted, ack.Error, tc.want)
			}
			if ack.AvailableCores != 4 {
				t.Fatalf("available cores %d, want 4", ack.AvailableCores)
			}
		})
	}

	// Refused because the cores are taken, not because it is too big.
	h.m.mustStart(t, "w1", dispatchOf("j", "three", sleepSpec(t, time.Minute, 3), 1))
	ack, err := h.m.dispatch(t, "w1", dispatchOf("j", "two", sleepSpec(t, time.Minute, 2), 1))
	if err != nil || ack.Accepted || ack.Error != "needs 2 cores, 1 free" || ack.AvailableCores != 1 {
		t.Fatalf("dispatch into a busy worker: %+v, %v", ack, err)
	}
}

func TestDispatchRepeatedIsIdempotent(t *testing.T) {
	h := startHarness(t, harnessOption{})
	d := dispatchOf("j", "wf", sleepSpec(t, time.Minute, 2), 5)
	first := h.m.mustStart(t, "w1", d)
	again := h.m.mustStart(t, "w1", d)
	if !slices.Equal(first.CoresAssigned, again.CoresAssigned) || again.AvailableCores != 2 {
		t.Fatalf("repeat: cores %v then %v, available %d; want the same run", first.CoresAssigned, again.CoresAssigned, again.AvailableCores)
	}
}

func TestStaleFenceRefused(t *testing.T) {
	h := startHarness(t, harnessOption{})
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, 30*time.Millisecond, 1), 10))

	_, err := h.m.dispatch(t, "w1", dispatchOf("j", "wf", sleepSpec(t, time.Minute, 1), 9))
	if !errors.Is(err, wire.ErrStaleFence) {
		t.Fatalf("older token while running: %v, want ErrStaleFence", err)
	}

	h.m.waitFinal(t, "wf")
	_, err = h.m.dispatch(t, "w1", dispatchOf("j", "wf", sleepSpec(t, time.Minute, 1), 10))
	if !errors.Is(err, wire.ErrStaleFence) {
		t.Fatalf("same token after the run finished: %v, want ErrStaleFence", err)
	}
	// A newer attempt (new token) runs again.
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, time.Minute, 1), 11))

	// A dispatch with no token at all comes from something that does not
	// fence: refused outright.
	_, err = h.m.dispatch(t, "w1", dispatchOf("j", "unfenced", sleepSpec(t, time.Minute, 1), 0))
	if wire.CodeOf(err) != wire.CodeRejected || !strings.Contains(err.Error(), "no fence token") {
		t.Fatalf("unfenced dispatch: %v, want rejected", err)
	}
}

func TestNewerDispatchAdoptsRunningWorkflow(t *testing.T) {
	h := startHarness(t, harnessOption{})
	first := h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, time.Minute, 2), 10))
	again := h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, time.Minute, 2), 20))
	if !slices.Equal(first.CoresAssigned, again.CoresAssigned) || again.AvailableCores != 2 {
		t.Fatalf("re-dispatch: cores %v then %v, available %d; want the running workflow kept", first.CoresAssigned, again.CoresAssigned, again.AvailableCores)
	}
	// It now answers to the newer token: progress carries it, and the old
	// leader's cancel is stale.
	testutil.Eventually(t, waitFor, pollStep, func() error {
		ps := h.m.progressOf("wf")
		if len(ps) == 0 || ps[len(ps)-1].FenceToken != 20 {
			return fmt.Errorf("no progress with fence 20 yet (%d messages)", len(ps))
		}
		return nil
	})
	if _, err := h.m.cancel(t, "w1", &wire.CancelJob{JobID: "j", FenceToken: 15}); !errors.Is(err, wire.ErrStaleFence) {
		t.Fatalf("cancel with the superseded token: %v, want ErrStaleFence", err)
	}
}

func TestWorkflowTimeoutFails(t *testing.T) {
	h := startHarness(t, harnessOption{})
	d := dispatchOf("j", "wf", sleepSpec(t, time.Minute, 1), 1)
	d.Timeout = 50 * time.Millisecond
	h.m.mustStart(t, "w1", d)
	p := h.m.waitFinal(t, "wf")
	if p.Status != wire.WorkflowFailed || !strings.Contains(p.Error, "timed out after 50ms") {
		t.Fatalf("final: %s %q; want FAILED, timed out", p.Status, p.Error)
	}
	h.waitIdle(t)
}

func TestPanickingWorkflowFailsAlone(t *testing.T) {
	boom := funcType{name: "boom", fn: func(context.Context, workflow.Env) (workflow.Result, error) {
		panic("kaboom")
	}}
	h := startHarness(t, harnessOption{registry: registryWith(t, boom)})
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", wire.WorkflowSpec{Name: "b", Type: "boom", Cores: 1}, 1))
	p := h.m.waitFinal(t, "wf")
	if p.Status != wire.WorkflowFailed || !strings.Contains(p.Error, "kaboom") {
		t.Fatalf("final: %s %q; want FAILED with the panic", p.Status, p.Error)
	}
	// The worker survived and still runs work.
	h.m.mustStart(t, "w1", dispatchOf("j", "wf2", sleepSpec(t, 10*time.Millisecond, 4), 2))
	h.m.waitFinal(t, "wf2")
}

// A newer attempt of a workflow whose previous run here is still trying to
// deliver its final progress takes over: the manager has moved on.
func TestNewerAttemptSupersedesUndeliveredFinal(t *testing.T) {
	h := startHarness(t, harnessOption{})
	var refuse atomic.Bool
	refuse.Store(true)
	h.m.setProgress(func(p *wire.WorkflowProgress) (wire.Message, error) {
		if refuse.Load() {
			return nil, wire.Errorf(wire.CodeUnavailable, "not now")
		}
		return &wire.ProgressAck{WorkflowID: p.WorkflowID}, nil
	})
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, time.Millisecond, 1), 10))
	testutil.Eventually(t, waitFor, pollStep, func() error {
		if p := h.w.Snapshot().ActiveWorkflows["wf"]; !p.Final {
			return fmt.Errorf("first run not finished: %+v", p)
		}
		return nil
	})
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, 20*time.Millisecond, 2), 11))
	refuse.Store(false)
	testutil.Eventually(t, waitFor, pollStep, func() error {
		for _, p := range h.m.progressOf("wf") {
			if p.Final && p.FenceToken == 11 && p.Status == wire.WorkflowCompleted {
				return nil
			}
		}
		return fmt.Errorf("no acknowledged final of the second attempt")
	})
	h.waitIdle(t)
}
