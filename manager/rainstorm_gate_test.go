package manager

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"tempest/internal/store"
	"tempest/internal/testutil"
	"tempest/transport"
	"tempest/wire"
)

// A pipeline's unplaced tasks are named by stage and 1-based index with the
// reason they wait.
func TestWaitingSummary(t *testing.T) {
	sub := rsJob(t) // source, then one count task
	group := make([]store.WorkflowRecord, len(sub.Workflows))
	for i, s := range sub.Workflows {
		group[i] = store.WorkflowRecord{WorkflowID: string(rune('a' + i)), Spec: s}
	}
	if got := waitingSummary(group, nil); got != "" {
		t.Fatalf("nothing waits, summary %q", got)
	}
	got := waitingSummary(group, map[string]string{"b": "no free core (needs 1)"})
	if want := "task count/1 waiting: no free core (needs 1)"; got != want {
		t.Fatalf("summary %q, want %q", got, want)
	}
	got = waitingSummary(group, map[string]string{"a": "no free core (needs 1)", "b": "no free core (needs 1)"})
	if want := "tasks source, count/1 waiting: no free core (needs 1)"; got != want {
		t.Fatalf("summary %q, want %q", got, want)
	}
}

// A pipeline with more slots than the datacenter's cores: it waits whole,
// holding no core, and its tasks say why, in the pipeline's tasks and in
// the job's status. (Submitted before any worker registered, so it is not
// refused at submit.) The leader answers a gate's output request (a
// follower points at the leader), and, once a second core lets the
// pipeline run, tells the worker when a task opens, for upstream tasks to
// resend at once.
func TestRainstormWaitingOutputAndRouteHint(t *testing.T) {
	c := newRainstormCluster(t, nil)
	ack, err := c.leader().Submit(context.Background(), pipelineJob(t, "pipe", 2)) // source, count/1 | count/2
	if err != nil {
		t.Fatal(err)
	}
	job := ack.JobID
	w := c.addWorker("w1", 1) // one core for two slots: none goes
	hints := make(chan *wire.RainstormRoutesChanged, 8)
	w.tr.Handle(wire.TypeRainstormRoutesChanged, func(_ context.Context, _ transport.Peer, msg wire.Message) (wire.Message, error) {
		hints <- msg.(*wire.RainstormRoutesChanged)
		return nil, nil
	})
	lead := waitCores(t, c, 1)
	const why = "no free cores for the whole pipeline (needs 2; the datacenter has 1)"
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		out, err := lead.PipelineOutput(context.Background(), job, "pipe", false)
		if err != nil {
			return err
		}
		if len(out.Tasks) != 3 {
			return fmt.Errorf("tasks %+v", out.Tasks)
		}
		for i, task := range out.Tasks {
			if task.Status != wire.WorkflowPending || task.Worker != "" || task.Waiting != why {
				return fmt.Errorf("task %d: %+v", i, task)
			}
		}
		st, err := lead.Job(context.Background(), job)
		if err != nil {
			return err
		}
		if got, want := st.Workflows[0].Waiting, "tasks source, count/1, count/2 waiting: "+why; got != want {
			return fmt.Errorf("status says %q, want %q", got, want)
		}
		return nil
	})

	gate := c.hub.Node("gate-1")
	req := &wire.RainstormOutputRequest{Job: job, Workflow: "pipe", Rows: true}
	for _, m := range c.running() {
		if m == lead {
			continue
		}
		_, err := gate.Call(context.Background(), m.cfg.ID, req)
		if wire.CodeOf(err) != wire.CodeNotLeader {
			t.Fatalf("a follower answered an output request: %v", err)
		}
	}
	var page *wire.RainstormOutputPage
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		resp, err := gate.Call(context.Background(), lead.cfg.ID, req)
		if err != nil {
			return err // still syncing
		}
		page = resp.(*wire.RainstormOutputPage)
		return nil
	})
	if len(page.Tasks) != 3 || page.Tasks[0].Waiting != why || page.Tasks[2].Waiting != why || page.Complete || page.Total != 0 {
		t.Fatalf("page %+v", page)
	}

	// A second core: the pipeline runs, a task opens, and the worker hears
	// that the pipeline's routes changed.
	c.addWorker("w2", 1)
	running := 0
	src := wire.RainstormTask{Job: job, Workflow: "pipe", Stage: running}
	inc := taskToken(t, lead, job, running, 0)
	taskToken(t, lead, job, 1, 0)
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		worker := lead.rsTaskInfo(src).worker
		_, err := c.hub.Node(worker).Call(context.Background(), lead.cfg.ID, &wire.RainstormOpen{Task: src, Incarnation: inc})
		return err
	})
	select {
	case h := <-hints:
		if h.Job != job || h.Workflow != "pipe" || len(h.Opened) != 1 || h.Opened[0] != (wire.RainstormTask{Stage: running}) {
			t.Fatalf("hint %+v", h)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no route-change hint after a task opened")
	}
}

// A pipeline task that used up its retries (here: its worker died, which
// costs no retry, and the dispatch to the only free worker fails, which
// does) fails the job at once, with the reason, instead of leaving the
// other tasks to wait for it until the job's timeout.
func TestPipelineTaskOutOfRetriesFailsJob(t *testing.T) {
	c := newRainstormCluster(t, func(cfg *Config) { cfg.MaxWorkflowRetries = 0 })
	c.addWorker("w1", 1) // one slot each: the source and count/1, count/2
	c.addWorker("w2", 1)
	lead := c.leader()
	ack, err := lead.Submit(context.Background(), pipelineJob(t, "pipe", 2))
	if err != nil {
		t.Fatal(err)
	}
	taskToken(t, lead, ack.JobID, 0, 0)
	taskToken(t, lead, ack.JobID, 2, 0)
	_, _, infos := lead.rsTasks(ack.JobID, "pipe")
	c.hub.SetHook(func(_, to string, msg wire.Message) bool {
		_, dispatch := msg.(*wire.WorkflowDispatch)
		return !dispatch || to != "w3"
	})
	c.addWorker("w3", 1)
	c.killWorker(infos[2].worker) // count/2's slot; the source's runs on
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		st, err := lead.Job(context.Background(), ack.JobID)
		if err != nil {
			return err
		}
		if st.Status != wire.JobFailed || !strings.Contains(st.Error, "task 3 of 3 failed: failed after") {
			return fmt.Errorf("job %s: %q", st.Status, st.Error)
		}
		return nil
	})
}
