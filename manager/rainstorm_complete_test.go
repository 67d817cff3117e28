package manager

import (
	"context"
	"testing"

	"tempest/wire"
)

// A pipeline's output is complete once every last-stage task's final (done)
// checkpoint is durable: its rows are all stored then. It does not wait for
// the tasks' parts to end and their status to reach the job table, which
// took a second and more after the last row was durable.
func TestRainstormOutputCompleteFromDoneCheckpoints(t *testing.T) {
	p := newOnePipeline(t)
	c, lead, job, task, inc := p.c, p.lead, p.job, p.task, p.inc
	call := rsCaller(t, c, "w1", lead)
	complete := func() bool {
		t.Helper()
		out, err := lead.PipelineOutput(context.Background(), job, "pipe", true)
		if err != nil {
			t.Fatal(err)
		}
		return out.Complete
	}
	call(&wire.RainstormOpen{Task: task, Incarnation: inc})
	ckpt := &wire.RainstormCheckpoint{Task: task, Incarnation: inc, Version: 1,
		Inputs: []wire.RainstormInput{{Next: 2, EOS: true}}, Rows: []wire.RainstormRecord{{Fields: []string{"k0", "5"}}}}
	if a := call(ckpt).(*wire.RainstormCheckpointAck); a.Refused {
		t.Fatalf("checkpoint refused: %s", a.Reason)
	}
	if complete() {
		t.Fatal("complete before the last stage's final checkpoint")
	}
	ckpt = &wire.RainstormCheckpoint{Task: task, Incarnation: inc, Version: 2, Done: true,
		Inputs: []wire.RainstormInput{{Next: 2, EOS: true}}, Rows: []wire.RainstormRecord{{Fields: []string{"k1", "5"}}}}
	if a := call(ckpt).(*wire.RainstormCheckpointAck); a.Refused {
		t.Fatalf("final checkpoint refused: %s", a.Reason)
	}
	if _, _, infos := lead.rsTasks(job, "pipe"); infos[1].status != wire.WorkflowRunning {
		t.Fatalf("the task's part is %s, want still running", infos[1].status)
	}
	if !complete() {
		t.Fatal("not complete with the last stage's final checkpoint durable")
	}
}
