package jobs_test

import (
	"testing"
	"time"

	"tempest/jobs"
	"tempest/wire"
	"tempest/workflow"
)

// part is one shard's or datacenter's report of step "s": n samples at d.
func part(t *testing.T, label string, st wire.WorkflowStatus, n int, d time.Duration, failed int64) jobs.WorkflowPart {
	t.Helper()
	h := workflow.NewHistogram()
	for range n {
		h.Record(d)
	}
	enc, err := h.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return jobs.WorkflowPart{Label: label, Attempts: 1, Progress: wire.WorkflowProgress{
		WorkflowID: label + "wf", WorkflowName: "w", Status: st, WorkerID: "worker",
		CompletedCount: int64(n), FailedCount: failed, Elapsed: 2 * time.Second,
		StepStats: []wire.StepStats{{StepName: "s", CompletedCount: int64(n), FailedCount: failed, Histogram: enc,
			Statuses: map[int]int64{200: int64(n)}}},
	}}
}

// Parts merge by adding counts and histograms: the p99 of the merged
// workflow is the p99 of all samples, not an average of the parts' p99s;
// thresholds are judged on that, once every expected part has ended.
func TestMergeWorkflow(t *testing.T) {
	spec := wire.WorkflowSpec{Name: "w", Type: "http", Thresholds: []wire.Threshold{{Expr: "p(99) < 50ms"}}}
	th := workflow.CompileThresholds(spec.Thresholds)
	fast := part(t, "dc1/", wire.WorkflowCompleted, 990, time.Millisecond, 0)
	slow := part(t, "dc2/", wire.WorkflowCompleted, 10, 100*time.Millisecond, 2)

	ws, err := jobs.MergeWorkflow(spec, th, []jobs.WorkflowPart{fast, slow}, 2, true)
	if err != nil {
		t.Fatal(err)
	}
	if ws.Status != wire.WorkflowCompleted || ws.CompletedCount != 1000 || ws.FailedCount != 2 || ws.Worker != "dc1/worker,dc2/worker" {
		t.Fatalf("merged %+v", ws)
	}
	s := ws.Steps[0]
	// 1% of the samples are slow: p99 is at the boundary, p99.9 is slow.
	if s.P50Ms > 1.1 || s.P999Ms < 99 || s.Statuses["200"] != 1000 || len(s.Distribution) == 0 {
		t.Fatalf("merged step %+v", s)
	}
	if len(ws.Thresholds) != 1 || !ws.Thresholds[0].Passed {
		t.Fatalf("p(99) < 50ms on the merged histogram: %+v", ws.Thresholds)
	}

	// Until every expected part ended, the workflow runs and nothing is judged.
	running, _ := jobs.MergeWorkflow(spec, th, []jobs.WorkflowPart{fast}, 2, false)
	if running.Status.Terminal() || len(running.Thresholds) != 0 {
		t.Fatalf("one of two parts ended: %s with %d verdicts", running.Status, len(running.Thresholds))
	}
	failed, _ := jobs.MergeWorkflow(spec, th, []jobs.WorkflowPart{fast, part(t, "dc2/", wire.WorkflowFailed, 1, time.Millisecond, 1)}, 2, false)
	if failed.Status != wire.WorkflowFailed {
		t.Fatalf("a failed part: merged %s, want FAILED", failed.Status)
	}
}

func TestMergeSeries(t *testing.T) {
	a := []wire.SecondStats{{Second: 0, Completed: 10, P50: time.Millisecond}, {Second: 1, Completed: 10}}
	b := []wire.SecondStats{{Second: 0, Completed: 30, Failed: 2, P50: 3 * time.Millisecond}}
	got := jobs.MergeSeries([][]wire.SecondStats{a, b})
	if len(got) != 2 || got[0].Completed != 40 || got[0].Failed != 2 || got[1].Completed != 10 {
		t.Fatalf("merged = %+v", got)
	}
	// Completion-weighted: (10*1 + 30*3)/40 = 2.5 ms.
	if got[0].P50 != 2500*time.Microsecond {
		t.Errorf("p50 = %s, want 2.5ms", got[0].P50)
	}
	if jobs.MergeSeries(nil) != nil {
		t.Error("merging nothing should give nothing")
	}
}

// A gate shows why parts of a workflow wait in each datacenter, as a
// manager does for its own: counted per datacenter, with the first reason.
func TestMergeWorkflowWaiting(t *testing.T) {
	spec := wire.WorkflowSpec{Name: "w", Type: "http"}
	th := workflow.CompileThresholds(nil)
	pending := func(label, why string) jobs.WorkflowPart {
		return jobs.WorkflowPart{Label: label, Progress: wire.WorkflowProgress{WorkflowName: "w", Status: wire.WorkflowPending, Waiting: why}}
	}
	running := part(t, "dc1/", wire.WorkflowRunning, 1, time.Millisecond, 0)
	for _, tc := range []struct {
		name  string
		parts []jobs.WorkflowPart
		want  string
	}{
		{"none waits", []jobs.WorkflowPart{running}, ""},
		{"one datacenter", []jobs.WorkflowPart{running, pending("dc1/", "no free core (needs 2)")},
			"dc1: 1 part waiting: no free core (needs 2)"},
		{"two datacenters", []jobs.WorkflowPart{
			pending("dc1/", "no free core (needs 2)"), pending("dc2/", "no quorum of managers to confirm a placement"),
			pending("dc1/", "no free core (needs 1)")},
			"dc1: 2 parts waiting: no free core (needs 2); dc2: 1 part waiting: no quorum of managers to confirm a placement"},
		{"no label", []jobs.WorkflowPart{pending("", "no free core (needs 1)")}, "1 part waiting: no free core (needs 1)"},
		{"pending without a reason", []jobs.WorkflowPart{pending("dc1/", "")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, err := jobs.MergeWorkflow(spec, th, tc.parts, len(tc.parts), false)
			if err != nil {
				t.Fatal(err)
			}
			if ws.Waiting != tc.want {
				t.Fatalf("waiting %q, want %q", ws.Waiting, tc.want)
			}
		})
	}
	// An ended workflow waits for nothing, whatever a stale part says.
	ended := part(t, "dc1/", wire.WorkflowCompleted, 1, time.Millisecond, 0)
	ended.Progress.Waiting = "no free core (needs 1)"
	if ws, _ := jobs.MergeWorkflow(spec, th, []jobs.WorkflowPart{ended}, 1, false); ws.Waiting != "" {
		t.Fatalf("an ended workflow waits: %q", ws.Waiting)
	}
}

// A reason several parts share is named once: the shards of a cancelled
// workflow do not each repeat "cancelled", and datacenters that failed for
// one reason are listed before it together.
func TestMergeWorkflowNamesEachReasonOnce(t *testing.T) {
	spec := wire.WorkflowSpec{Name: "w", Type: "sleep"}
	withErr := func(label string, st wire.WorkflowStatus, why string) jobs.WorkflowPart {
		p := part(t, label, st, 1, time.Millisecond, 0)
		p.Progress.Error = why
		return p
	}
	for _, tc := range []struct {
		name  string
		parts []jobs.WorkflowPart
		want  string
	}{
		{"shards of one cancel", []jobs.WorkflowPart{
			withErr("", wire.WorkflowCancelled, "cancelled: enough"),
			withErr("", wire.WorkflowCancelled, "cancelled: enough"),
			withErr("", wire.WorkflowCancelled, "cancelled: enough")}, "cancelled: enough"},
		{"every datacenter alike", []jobs.WorkflowPart{
			withErr("east/", wire.WorkflowFailed, "worker lost"),
			withErr("west/", wire.WorkflowFailed, "worker lost")}, "worker lost"},
		{"one datacenter of two", []jobs.WorkflowPart{
			withErr("east/", wire.WorkflowFailed, "worker lost"),
			withErr("east/", wire.WorkflowFailed, "worker lost"),
			withErr("west/", wire.WorkflowCompleted, "")}, "east: worker lost"},
		{"two reasons", []jobs.WorkflowPart{
			withErr("east/", wire.WorkflowFailed, "worker lost"),
			withErr("west/", wire.WorkflowCancelled, "lease expired"),
			withErr("south/", wire.WorkflowFailed, "worker lost")}, "east, south: worker lost; west: lease expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, err := jobs.MergeWorkflow(spec, workflow.CompileThresholds(nil), tc.parts, len(tc.parts), false)
			if err != nil {
				t.Fatal(err)
			}
			if ws.Error != tc.want {
				t.Errorf("error %q, want %q", ws.Error, tc.want)
			}
		})
	}
}
