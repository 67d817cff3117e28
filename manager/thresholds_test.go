package manager

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"tempest/api"
	"tempest/internal/testutil"
	"tempest/wire"
)

func thresholdsOf(st *api.JobStatus) map[string]api.ThresholdResult {
	out := map[string]api.ThresholdResult{}
	for _, wf := range st.Workflows {
		for _, r := range wf.Thresholds {
			out[wf.Name+"/"+r.Expr] = r
		}
	}
	return out
}

// TestThresholdsEvaluatedWhenWorkflowEnds: a sleep workflow records one
// sample of its duration, so its latency thresholds have known answers.
func TestThresholdsEvaluatedWhenWorkflowEnds(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.addWorker("w1", 2)
	l := c.leader()
	sub := sleepJob(t, "judged", 2, 1, 150*time.Millisecond)
	sub.Workflows[0].Thresholds = []wire.Threshold{
		{Expr: "p(99) < 1ms"},                 // fails: one sample of ~150ms
		{Expr: "max >= 150ms", Step: "sleep"}, // passes
		{Expr: "error_rate <= 0%"},            // passes
		{Expr: "p(99) < 1s", Step: "nosuch"},  // no data: fails
	}
	sub.Workflows[1].Thresholds = []wire.Threshold{{Expr: "p(50) < 10s"}}
	ack, err := l.Submit(context.Background(), sub)
	if err != nil {
		t.Fatal(err)
	}
	check := func(m *Manager) error {
		st, err := m.Job(context.Background(), ack.JobID)
		if err != nil {
			return err
		}
		if st.Status != wire.JobCompleted {
			return fmt.Errorf("job is %s (%s)", st.Status, st.Error)
		}
		got := thresholdsOf(st)
		want := map[string]bool{
			"judged-0/p(99) < 1ms":      false,
			"judged-0/max >= 150ms":     true,
			"judged-0/error_rate <= 0%": true,
			"judged-0/p(99) < 1s":       false,
			"judged-1/p(50) < 10s":      true,
		}
		if len(got) != len(want) {
			return fmt.Errorf("%s: thresholds %+v", m.ID(), got)
		}
		for k, passed := range want {
			if r, ok := got[k]; !ok || r.Passed != passed || r.Actual == "" {
				return fmt.Errorf("%s: %s = %+v, want passed=%v", m.ID(), k, r, passed)
			}
		}
		if got["judged-0/p(99) < 1s"].Actual != "no data" || got["judged-0/error_rate <= 0%"].Actual != "0%" {
			return fmt.Errorf("%s: actual values %+v", m.ID(), got)
		}
		if !st.ThresholdsFailed || st.ThresholdAbort {
			return fmt.Errorf("%s: thresholds_failed=%v threshold_abort=%v", m.ID(), st.ThresholdsFailed, st.ThresholdAbort)
		}
		return nil
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return check(l) })
	// Followers evaluate the replicated final progress themselves, so
	// whoever leads next serves the same verdicts.
	for _, m := range c.running() {
		testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error { return check(m) })
	}
}

// TestThresholdAbortOnFail: a sleep workflow has done nothing mid-run, so
// "rps > 1000" fails at its first report and ends the job long before the
// minute it would sleep.
func TestThresholdAbortOnFail(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	w := c.addWorker("w1", 2)
	l := c.leader()
	sub := sleepJob(t, "aborted", 2, 1, time.Minute)
	sub.Workflows[0].Thresholds = []wire.Threshold{
		{Expr: "rps > 1000", AbortOnFail: true},
		{Expr: "p(99) < 1ms", AbortOnFail: true}, // no data mid-run: never acted on
	}
	ack, err := l.Submit(context.Background(), sub)
	if err != nil {
		t.Fatal(err)
	}
	st := waitJob(t, l, ack.JobID, wire.JobFailed, 10*time.Second)
	want := ThresholdAbortPrefix + "rps > 1000 (actual "
	if !strings.HasPrefix(st.Error, want) || !strings.Contains(st.Error, "in workflow aborted-0") {
		t.Fatalf("error = %q, want it to start with %q and name the workflow", st.Error, want)
	}
	if !st.ThresholdAbort || !st.ThresholdsFailed {
		t.Fatalf("threshold_abort=%v thresholds_failed=%v", st.ThresholdAbort, st.ThresholdsFailed)
	}
	for _, wf := range st.Workflows {
		if wf.Status != wire.WorkflowFailed {
			t.Errorf("workflow %s is %s, want FAILED", wf.Name, wf.Status)
		}
	}
	// Both workflows were stopped on the worker, not left to sleep.
	coresFree(t, l, w)
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		st, err := l.Job(context.Background(), ack.JobID)
		if err != nil {
			return err
		}
		if r := thresholdsOf(st)["aborted-0/rps > 1000"]; r.Passed || r.Actual == "" {
			return fmt.Errorf("rps threshold = %+v", r)
		}
		return nil
	})
}

// TestThresholdNotAbortingWithoutAbortOnFail: the same failing threshold
// without abort_on_fail lets the job run to its end.
func TestThresholdNotAbortingWithoutAbortOnFail(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	c.addWorker("w1", 1)
	l := c.leader()
	sub := sleepJob(t, "patient", 1, 1, 300*time.Millisecond)
	sub.Workflows[0].Thresholds = []wire.Threshold{{Expr: "rps > 1000"}}
	ack, err := l.Submit(context.Background(), sub)
	if err != nil {
		t.Fatal(err)
	}
	st := waitJob(t, l, ack.JobID, wire.JobCompleted, 10*time.Second)
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		st, err = l.Job(context.Background(), ack.JobID)
		if err != nil {
			return err
		}
		if !st.ThresholdsFailed || st.ThresholdAbort {
			return fmt.Errorf("thresholds_failed=%v threshold_abort=%v", st.ThresholdsFailed, st.ThresholdAbort)
		}
		return nil
	})
}

func TestSubmitRejectsBadThresholds(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	l := c.leader()
	sub := sleepJob(t, "bad", 1, 1, time.Second)
	sub.Workflows[0].Thresholds = []wire.Threshold{{Expr: "p(99) < soon"}}
	_, err := l.Submit(context.Background(), sub)
	if wire.CodeOf(err) != wire.CodeRejected || !strings.Contains(err.Error(), "thresholds[0]") {
		t.Fatalf("submit = %v, want rejected naming thresholds[0]", err)
	}
}
