package manager

import (
	"context"
	"testing"
	"time"

	"tempest/wire"
)

// Progress for an attempt comes only from the worker it was dispatched to:
// another worker reporting it (it ran a replayed dispatch) is told to stop
// and does not become the workflow's worker; a report naming another worker
// than its sender is refused.
func TestProgressFromAnotherWorkerRefused(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	c.addWorker("w1", 2)
	c.addWorker("w2", 2)
	l := c.leader()
	ctx := context.Background()
	ack, err := l.Submit(ctx, sleepJob(t, "addressed", 1, 1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	worker, token := workflowOn(t, c, ack.JobID)
	other := "w1"
	if worker == "w1" {
		other = "w2"
	}
	wfID := workflowID(ack.JobID, 0)
	resp, err := c.hub.Node(other).Call(ctx, l.ID(), &wire.WorkflowProgress{
		JobID: ack.JobID, WorkflowID: wfID, FenceToken: token, Status: wire.WorkflowCompleted, Final: true, CompletedCount: 99,
	})
	if err != nil {
		t.Fatalf("progress from %s: %v", other, err)
	}
	if pa := resp.(*wire.ProgressAck); pa.Cancel {
		t.Fatalf("final progress from the wrong worker should be dropped without a cancel, got %+v", pa)
	}
	st, err := l.Job(ctx, ack.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if wf := st.Workflows[0]; wf.Worker != worker || wf.Status.Terminal() {
		t.Fatalf("after progress from %s: workflow on %q, %s; want still running on %s", other, wf.Worker, wf.Status, worker)
	}
	resp, err = c.hub.Node(other).Call(ctx, l.ID(), &wire.WorkflowProgress{
		JobID: ack.JobID, WorkflowID: wfID, FenceToken: token, Status: wire.WorkflowRunning,
	})
	if err != nil || !resp.(*wire.ProgressAck).Cancel {
		t.Fatalf("running progress from %s: %+v, %v; want cancel", other, resp, err)
	}
	_, err = c.hub.Node(other).Call(ctx, l.ID(), &wire.WorkflowProgress{
		JobID: ack.JobID, WorkflowID: wfID, WorkerID: worker, FenceToken: token, Status: wire.WorkflowRunning,
	})
	if wire.CodeOf(err) != wire.CodeRejected {
		t.Fatalf("progress from %s naming %s: %v, want rejected", other, worker, err)
	}
}
