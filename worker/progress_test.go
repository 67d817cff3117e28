package worker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
	"tempest/workflow"
)

// periodic counts the non-final progress messages in ps.
func periodic(ps []wire.WorkflowProgress) (n int, finals int) {
	for _, p := range ps {
		if p.Final {
			finals++
		} else {
			n++
		}
	}
	return n, finals
}

func TestProgressThrottledPerWorkflow(t *testing.T) {
	// A runner that reports far more often than the worker may forward.
	var reports atomic.Int64
	chatty := funcType{name: "chatty", fn: func(ctx context.Context, env workflow.Env) (workflow.Result, error) {
		start := time.Now()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		deadline := time.After(time.Second)
		var n int64
		for {
			select {
			case <-ctx.Done():
				return workflow.Result{}, ctx.Err()
			case <-deadline:
				return workflow.Result{Snapshot: workflow.Snapshot{Completed: n, Elapsed: time.Since(start)}}, nil
			case <-tick.C:
				n++
				reports.Add(1)
				env.Report(workflow.Snapshot{Completed: n, Elapsed: time.Since(start)})
			}
		}
	}}
	h := startHarness(t, harnessOption{registry: registryWith(t, chatty)})
	h.waitRegistered(t, h.m)

	start := time.Now()
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", wire.WorkflowSpec{Name: "c", Type: "chatty", Cores: 1}, 1))
	final := h.m.waitFinal(t, "wf")
	elapsed := time.Since(start)

	n, finals := periodic(h.m.progressOf("wf"))
	// At most one message per interval, plus the first one, plus the final.
	bound := int(elapsed/(100*time.Millisecond)) + 1
	t.Logf("%d reports from the runner, %d periodic messages in %s (bound %d), final completed=%d", reports.Load(), n, elapsed, bound, final.CompletedCount)
	if n > bound || finals != 1 {
		t.Fatalf("%d periodic and %d final messages in %s; want at most %d periodic and exactly 1 final", n, finals, elapsed, bound)
	}
	if int64(n) >= reports.Load() {
		t.Fatalf("%d messages for %d reports: nothing was coalesced", n, reports.Load())
	}
	// The final carries the runner's own end-of-run counts, not the last
	// forwarded report.
	if final.Status != wire.WorkflowCompleted || final.CompletedCount != reports.Load() {
		t.Fatalf("final: %s, completed %d; want COMPLETED, %d", final.Status, final.CompletedCount, reports.Load())
	}
}

func TestSleepProgressCountBounded(t *testing.T) {
	h := startHarness(t, harnessOption{})
	h.waitRegistered(t, h.m)
	start := time.Now()
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, time.Second, 1), 1))
	h.m.waitFinal(t, "wf")
	elapsed := time.Since(start)
	n, finals := periodic(h.m.progressOf("wf"))
	bound := int(elapsed/(100*time.Millisecond)) + 1
	t.Logf("1s sleep: %d periodic messages in %s (bound %d)", n, elapsed, bound)
	if n < 1 || n > bound || finals != 1 {
		t.Fatalf("%d periodic, %d final messages; want 1..%d periodic and 1 final", n, finals, bound)
	}
}

func TestFinalProgressRetriedUntilAcknowledged(t *testing.T) {
	h := startHarness(t, harnessOption{})
	var refusals atomic.Int32
	h.m.setProgress(func(p *wire.WorkflowProgress) (wire.Message, error) {
		if p.Final && refusals.Add(1) <= 3 {
			return nil, wire.Errorf(wire.CodeUnavailable, "busy")
		}
		return &wire.ProgressAck{WorkflowID: p.WorkflowID}, nil
	})
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, 10*time.Millisecond, 1), 1))
	h.waitIdle(t) // retired only once a final was acknowledged
	if _, finals := periodic(h.m.progressOf("wf")); finals != 4 {
		t.Fatalf("final sent %d times; want 3 refused + 1 acknowledged", finals)
	}
}

// While a final waits for a manager, the workflow stays visible in state
// sync with its outcome, so a new leader learns it.
func TestUndeliveredFinalStaysInSnapshot(t *testing.T) {
	h := startHarness(t, harnessOption{})
	h.m.setProgress(func(*wire.WorkflowProgress) (wire.Message, error) {
		return nil, wire.Errorf(wire.CodeUnavailable, "down for maintenance")
	})
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, 10*time.Millisecond, 2), 1))
	testutil.Eventually(t, waitFor, pollStep, func() error {
		s := h.w.Snapshot()
		p, ok := s.ActiveWorkflows["wf"]
		if !ok || !p.Final || p.Status != wire.WorkflowCompleted || s.AvailableCores != 4 {
			return fmt.Errorf("snapshot: %+v", s)
		}
		return nil
	})
	if hb := h.w.Heartbeat(); hb.QueueDepth != 1 || hb.ActiveWorkflows["wf"] != string(wire.WorkflowCompleted) {
		t.Fatalf("heartbeat: %+v", hb)
	}
}

func TestLeaderSwitchOnNotLeaderReply(t *testing.T) {
	h := startHarness(t, harnessOption{})
	m2 := newTestManager(t, h.hub, "m2")
	h.waitRegistered(t, h.m)
	h.m.setProgress(func(*wire.WorkflowProgress) (wire.Message, error) {
		return nil, &wire.Error{Code: wire.CodeNotLeader, Leader: "m2", LeaderAddr: "m2"}
	})
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, 300*time.Millisecond, 1), 1))
	p := m2.waitFinal(t, "wf")
	if p.Status != wire.WorkflowCompleted {
		t.Fatalf("final at m2: %+v", p)
	}
	if id, addr := h.w.leader.current(); id != "m2" || addr != "m2" {
		t.Fatalf("leader %q at %q, want m2", id, addr)
	}
	// Only the first progress went to m1.
	if n := len(h.m.progressOf("wf")); n != 1 {
		t.Fatalf("m1 got %d progress messages after redirecting; want 1", n)
	}
}

// ProgressAck.Leader names the leader by id; an id the worker cannot
// resolve makes it register again, and the registration answer says where
// the leader is.
func TestLeaderSwitchOnProgressAck(t *testing.T) {
	h := startHarness(t, harnessOption{})
	m2 := newTestManager(t, h.hub, "m2")
	h.waitRegistered(t, h.m)
	h.m.setRegister(func(*wire.WorkerRegistration) (wire.Message, error) {
		return &wire.RegistrationAck{Accepted: true, Leader: "m2", LeaderAddr: "m2", Term: 2}, nil
	})
	h.m.setProgress(func(p *wire.WorkflowProgress) (wire.Message, error) {
		return &wire.ProgressAck{WorkflowID: p.WorkflowID, Leader: "m2"}, nil
	})
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, 300*time.Millisecond, 1), 1))
	m2.waitFinal(t, "wf")
	// The leader took the registration too, with the running workflow.
	regs := m2.registrations()
	if len(regs) == 0 || len(regs[0].ActiveWorkflows) != 1 || regs[0].ActiveWorkflows[0].WorkflowID != "wf" {
		t.Fatalf("m2 registrations: %+v", regs)
	}
}

// A manager's answer to an old attempt's progress asks to cancel that
// attempt; when a newer dispatch adopted the run while the report was on
// its way, the run goes on under the newer token. Before, the answer
// stopped the adopted run, and the manager counted the newer attempt as
// failed ("cancelled by manager"): a pipeline task whose worker SWIM took
// for dead and back used up its retries so.
func TestCancelOfAnAdoptedRunsOldAttemptIsIgnored(t *testing.T) {
	h := startHarness(t, harnessOption{})
	h.waitRegistered(t, h.m)
	var once sync.Once
	h.m.setProgress(func(p *wire.WorkflowProgress) (wire.Message, error) {
		cancel := false
		if p.FenceToken == 1 {
			once.Do(func() {
				h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, 2*time.Second, 1), 2)) // adopted
				cancel = true
			})
		}
		return &wire.ProgressAck{WorkflowID: p.WorkflowID, Leader: "m1", Cancel: cancel}, nil
	})
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, 2*time.Second, 1), 1))
	final := h.m.waitFinal(t, "wf")
	if final.Status != wire.WorkflowCompleted || final.FenceToken != 2 {
		t.Fatalf("final %s under token %d (%s), want COMPLETED under the adopting token 2", final.Status, final.FenceToken, final.Error)
	}
}
