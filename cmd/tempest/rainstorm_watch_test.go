package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"tempest/api"
	"tempest/wire"
)

// watch shows a line per stage, and a line per task waiting for a
// placement with its reason; nothing waits once the job ended.
func TestPipelineLinesShowWaitingTasks(t *testing.T) {
	d := newDisplay(io.Discard, false, 120, time.Now)
	d.pipes = map[string]*pipelineView{"p": {meters: map[int]*rateMeter{}, out: &api.PipelineOutput{
		Status: wire.JobRunning,
		Tasks: []api.PipelineTask{
			{Stage: 0, Name: "source", Status: wire.WorkflowRunning, Records: 10},
			{Stage: 1, Index: 0, Name: "count", Status: wire.WorkflowRunning, Records: 4},
			{Stage: 1, Index: 1, Name: "count", Status: wire.WorkflowPending, Waiting: "no free core (needs 1)"},
		},
	}}}
	lines := strings.Join(d.pipelineLines("p", "  "), "\n")
	for _, want := range []string{"source", "count      tasks 1/2", "task count/2 waiting: no free core (needs 1)"} {
		if !strings.Contains(lines, want) {
			t.Fatalf("no %q in:\n%s", want, lines)
		}
	}
	d.pipes["p"].out.Status = wire.JobCancelled
	if lines := strings.Join(d.pipelineLines("p", "  "), "\n"); strings.Contains(lines, "waiting") {
		t.Fatalf("a waiting line after the job ended:\n%s", lines)
	}
}

// A pipeline waiting whole waits with every task for one reason: one line
// names them (three, then how many more), not one line per task.
func TestPipelineLinesGroupWaitingTasks(t *testing.T) {
	d := newDisplay(io.Discard, false, 120, time.Now)
	const why = "no free cores for the whole pipeline (needs 5, 2 free); it waits holding none"
	out := &api.PipelineOutput{Status: wire.JobQueued}
	out.Tasks = append(out.Tasks, api.PipelineTask{Stage: 0, Name: "source", Status: wire.WorkflowPending, Waiting: why})
	for i := range 4 {
		out.Tasks = append(out.Tasks, api.PipelineTask{Stage: 1, Index: i, Name: "count", Status: wire.WorkflowPending, Waiting: why})
	}
	d.pipes = map[string]*pipelineView{"p": {meters: map[int]*rateMeter{}, out: out}}
	lines := d.pipelineLines("p", "  ")
	want := "  tasks source, count/1, count/2, 2 more waiting: " + why
	if n := strings.Count(strings.Join(lines, "\n"), "waiting"); n != 1 || lines[len(lines)-1] != want {
		t.Fatalf("%d waiting lines, last %q; want one: %q", n, lines[len(lines)-1], want)
	}
}

// Each stage shows records in and out; the source's backlog is what it
// passed on that the first stage has not taken in, none once it finished.
func TestPipelineLinesShowRecordsInAndOut(t *testing.T) {
	d := newDisplay(io.Discard, false, 120, time.Now)
	out := &api.PipelineOutput{Status: wire.JobRunning, Tasks: []api.PipelineTask{
		{Stage: 0, Name: "source", Status: wire.WorkflowRunning, Records: 100, RecordsOut: 98, Bad: 2},
		{Stage: 1, Index: 0, Name: "telespar", Status: wire.WorkflowRunning, Records: 30, RecordsOut: 10},
		{Stage: 1, Index: 1, Name: "telespar", Status: wire.WorkflowRunning, Records: 40, RecordsOut: 12},
		{Stage: 2, Index: 0, Name: "count", Status: wire.WorkflowRunning, Records: 22, RecordsOut: 0},
	}}
	d.pipes = map[string]*pipelineView{"p": {meters: map[int]*rateMeter{}, out: out}}
	lines := strings.Join(d.pipelineLines("p", "  "), "\n")
	for _, want := range []string{"records in 100 out 98  restarts 0  bad 2  backlog 28", "records in 70 out 22", "records in 22 out 0"} {
		if !strings.Contains(lines, want) {
			t.Fatalf("no %q in:\n%s", want, lines)
		}
	}
	out.Status = wire.JobCompleted
	out.Tasks[1].Records, out.Tasks[2].Records = 48, 50
	if lines := strings.Join(d.pipelineLines("p", "  "), "\n"); !strings.Contains(lines, "backlog 0") {
		t.Fatalf("a finished pipeline shows a backlog:\n%s", lines)
	}
}

// An autoscaled stage shows its size in the source's epoch, not its parts
// (the dormant and retired ones are parts too), and the latest decisions.
func TestPipelineLinesShowAutoscaledSize(t *testing.T) {
	d := newDisplay(io.Discard, false, 120, time.Now)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	out := &api.PipelineOutput{Status: wire.JobRunning, StageTasks: []int{1, 2}, Tasks: []api.PipelineTask{
		{Stage: 0, Name: "source", Status: wire.WorkflowRunning},
		{Stage: 1, Index: 0, Name: "count", Status: wire.WorkflowRunning},
		{Stage: 1, Index: 1, Name: "count", Status: wire.WorkflowRunning},
		{Stage: 1, Index: 2, Name: "count", Status: wire.WorkflowCompleted},
		{Stage: 1, Index: 3, Name: "count", Status: wire.WorkflowPending},
	}, Resizes: []api.PipelineResize{
		{At: at, Stage: "count", From: 1, To: 3, Decision: "1 → 3 tasks: over high", Epoch: 1, InForce: 2300 * time.Millisecond,
			GroupsMoved: 85, KeysMoved: 40, BytesMoved: 900, Handover: 420 * time.Millisecond},
		{At: at, Stage: "count", From: 3, To: 2, Decision: "3 → 2 tasks: under low", Epoch: 2},
	}}
	d.pipes = map[string]*pipelineView{"p": {meters: map[int]*rateMeter{}, out: out}}
	lines := strings.Join(d.pipelineLines("p", "  "), "\n")
	for _, want := range []string{"count      tasks 2/2", "count 1 → 3 tasks: over high; in force after 2.3s, 85 groups moved, 40 keys (900 bytes) handed over in 420ms",
		"count 3 → 2 tasks: under low"} {
		if !strings.Contains(lines, want) {
			t.Fatalf("no %q in:\n%s", want, lines)
		}
	}
	if strings.Contains(lines, "under low;") {
		t.Fatalf("a resize not yet in force shows figures:\n%s", lines)
	}
}
