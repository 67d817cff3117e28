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
