package main

import (
	"bytes"
	"strings"
	"testing"

	"tempest/api"
	"tempest/wire"
)

func TestJoinCounts(t *testing.T) {
	for _, tc := range []struct {
		m    map[string]int64
		sep  string
		want string
	}{
		{nil, " ", "none"},
		{map[string]int64{"timeout": 3, "status": 40}, " ", "status 40, timeout 3"},
		{map[string]int64{"503": 40, "200": 40, "404": 1}, "×", "200×40, 503×40, 404×1"},
	} {
		if got := joinCounts(tc.m, tc.sep); got != tc.want {
			t.Errorf("joinCounts(%v) = %q, want %q", tc.m, got, tc.want)
		}
	}
}

// A step that failed gets a line naming its error classes and statuses;
// one that did not, none.
func TestPrintStepsBreaksDownErrors(t *testing.T) {
	st := api.JobStatus{ElapsedSeconds: 2, Workflows: []api.WorkflowStatus{{Name: "w", ElapsedSeconds: 2, Steps: []api.StepSummary{
		{Name: "good", Completed: 10, Statuses: map[string]int64{"200": 10}},
		{Name: "bad", Completed: 6, Failed: 4, Errors: map[string]int64{"status": 3, "timeout": 1}, Statuses: map[string]int64{"200": 6, "503": 3}},
	}}}}
	var b bytes.Buffer
	printSteps(&b, st)
	out := b.String()
	if !strings.Contains(out, "w bad: errors status 3, timeout 1; responses 200×6, 503×3") {
		t.Errorf("no breakdown for the failing step:\n%s", out)
	}
	if strings.Contains(out, "w good:") {
		t.Errorf("a breakdown for a step without errors:\n%s", out)
	}
}

// Checks get a table of their own, one row per step and check, with the
// share passed; a status without checks prints no such table.
func TestPrintStepsChecks(t *testing.T) {
	st := api.JobStatus{ElapsedSeconds: 2, Workflows: []api.WorkflowStatus{{Name: "w", ElapsedSeconds: 2, Steps: []api.StepSummary{
		{Name: "login", Completed: 10, Checks: []api.CheckSummary{{Name: "ok", Passed: 10}, {Name: "has-token", Passed: 9, Failed: 1}}},
	}}}}
	var b bytes.Buffer
	printSteps(&b, st)
	out := b.String()
	for _, want := range []string{"CHECK", "✓ ok", "100.00%", "✗ has-token", "90.00%"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	st.Workflows[0].Steps[0].Checks = nil
	b.Reset()
	printSteps(&b, st)
	if strings.Contains(b.String(), "CHECK") {
		t.Errorf("a checks table without checks:\n%s", b.String())
	}
}

// status exits as the README's codes say for a job that ended, and names a
// reason the job's error gives once, not again under each workflow.
func TestStatusExitCodeAndReasonOnce(t *testing.T) {
	c := newCLI(t)
	running := liveJob("j-run")
	c.backend.AddJob(running)
	cancelled := liveJob("j-cancel")
	cancelled.Status, cancelled.Error = wire.JobCancelled, "cancelled: operator said so"
	cancelled.Workflows[0].Status, cancelled.Workflows[0].Error = wire.WorkflowCancelled, "cancelled: operator said so"
	c.backend.AddJob(cancelled)
	done := liveJob("j-done")
	finishLive(&done)
	c.backend.AddJob(done)
	for _, tc := range []struct {
		id   string
		code int
	}{{"j-run", exitOK}, {"j-cancel", exitJobFailed}, {"j-done", exitOK}} {
		code, stdout, stderr := c.run(runStatus, tc.id)
		if code != tc.code {
			t.Errorf("status %s exits %d, want %d\n%s%s", tc.id, code, tc.code, stdout, stderr)
		}
		if n := strings.Count(stdout, "operator said so"); tc.id == "j-cancel" && n != 1 {
			t.Errorf("the reason is printed %d times, want once:\n%s", n, stdout)
		}
	}
}
