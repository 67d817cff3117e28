package jobs_test

import (
	"testing"
	"time"

	"tempest/jobs"
	"tempest/wire"
	"tempest/workflow"
)

// A job's model parses each group's thresholds once: a split workflow's
// shards share their first shard's, and the abort_on_fail ones are kept
// apart for the mid-run checks.
func TestModel(t *testing.T) {
	th := []wire.Threshold{{Expr: "rps > 10"}, {Expr: "error_rate < 1%", AbortOnFail: true}}
	shard := func(n int) wire.WorkflowSpec {
		return wire.WorkflowSpec{Name: "w", Type: "http", Shard: n, Shards: 2, Thresholds: th}
	}
	specs := []wire.WorkflowSpec{{Name: "a", Type: "sleep"}, shard(1), shard(2)}
	m := jobs.Of(&wire.JobSubmission{Workflows: specs}).Model()
	if len(m.Groups()) != 2 || m.GroupOf(0) != 0 || m.GroupOf(2) != 1 || m.GroupOf(3) != -1 {
		t.Fatalf("groups %+v", m.Groups())
	}
	if m.Thresholds(0).Len() != 0 || m.Thresholds(1).Len() != 2 || m.AbortOnFail(1).Len() != 1 || !m.HasAbortOnFail() {
		t.Fatalf("thresholds: %d, %d, abort %d", m.Thresholds(0).Len(), m.Thresholds(1).Len(), m.AbortOnFail(1).Len())
	}
	if jobs.NewModel(specs[:1]).HasAbortOnFail() {
		t.Fatal("a job without abort_on_fail thresholds has some")
	}
}

// Both roles end a job with the same reason when an abort_on_fail
// threshold fails; one with no data yet is not a failure.
func TestAbortReason(t *testing.T) {
	c := workflow.CompileThresholds([]wire.Threshold{{Expr: "p(99) < 1ms", AbortOnFail: true}, {Expr: "error_rate < 1%", Step: "login", AbortOnFail: true}})
	noData := c.Evaluate(nil, 0, 0, 0)
	if reason, _, hit := jobs.AbortReason("w", noData); hit || reason != "" {
		t.Fatalf("no data: %q", reason)
	}
	failing := c.Evaluate([]wire.StepStats{{StepName: "login", CompletedCount: 1, FailedCount: 1}}, 1, 1, time.Second)
	reason, r, hit := jobs.AbortReason("w", failing)
	want := wire.ThresholdAbortPrefix + "error_rate < 1% (actual 50%) in workflow w, step login"
	if !hit || reason != want || r.Step != "login" {
		t.Fatalf("reason %q (%+v), want %q", reason, r, want)
	}
}
