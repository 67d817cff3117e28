package manager

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"tempest/rainstorm"
	"tempest/testutil"
	"tempest/wire"
	"tempest/workflow"
)

// idleRainstorm is the rainstorm type with a runner that waits for its
// cancel: the fake worker accepts tasks, and the test speaks for them.
type idleRainstorm struct{ rainstorm.Type }

func (idleRainstorm) New(wire.WorkflowSpec) (workflow.Runner, error) { return idleRunner{}, nil }

type idleRunner struct{}

func (idleRunner) Run(ctx context.Context, _ workflow.Env) (workflow.Result, error) {
	<-ctx.Done()
	return workflow.Result{}, ctx.Err()
}

// rsJob is a two-task pipeline: a generate source and one count task.
func rsJob(t *testing.T) *wire.JobSubmission {
	t.Helper()
	spec := &rainstorm.Spec{
		Source: rainstorm.Source{Generate: &rainstorm.Generate{Records: 10, Keys: 2}},
		Stages: []rainstorm.Stage{{Name: "count", Op: rainstorm.OpCount, Tasks: 1, Key: "key"}},
	}
	b, err := wire.Marshal(&rainstorm.PipelineParams{Spec: *spec})
	if err != nil {
		t.Fatal(err)
	}
	parts, err := rainstorm.Type{}.Expand(b)
	if err != nil {
		t.Fatal(err)
	}
	sub := &wire.JobSubmission{Name: "rs"}
	for i, p := range parts {
		sub.Workflows = append(sub.Workflows, wire.WorkflowSpec{Name: "pipe", Type: rainstorm.TypeName, Cores: 1,
			Params: p, Shard: i + 1, Shards: len(parts)})
	}
	return sub
}

// taskToken waits until task k of the job runs and returns its fence token.
func taskToken(t *testing.T, m *Manager, job string, k int, not uint64) uint64 {
	t.Helper()
	var tok uint64
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		_, _, infos := m.rsTasks(job, "pipe")
		if len(infos) <= k {
			return fmt.Errorf("job %s has %d tasks", job, len(infos))
		}
		in := infos[k]
		if in.status != wire.WorkflowRunning || in.token == not {
			return fmt.Errorf("task %d is %s under %d", k, in.status, in.token)
		}
		tok = in.token
		return nil
	})
	return tok
}

// The leader's checkpoint store: an open fences the task, checkpoints are
// compare-and-set on incarnation and version and reach a majority before
// they are acknowledged, a replaced incarnation publishes nothing, and a
// new leader answers from the replicated state.
func TestRainstormCheckpointStore(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	if err := c.reg.Register(idleRainstorm{}); err != nil {
		t.Fatal(err)
	}
	c.addWorker("w1", 4)
	lead := c.leader()
	ack, err := lead.Submit(context.Background(), rsJob(t))
	if err != nil {
		t.Fatal(err)
	}
	job := ack.JobID
	task := wire.RainstormTask{Job: job, Workflow: "pipe", Stage: 1}
	inc := taskToken(t, lead, job, 1, 0)
	caller := c.hub.Node("w1-tasks")
	call := func(m *Manager, msg wire.Message) (wire.Message, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var resp wire.Message
		var err error
		testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
			resp, err = caller.Call(ctx, m.cfg.ID, msg)
			var we *wire.Error
			if errors.As(err, &we) && we.Code == wire.CodeUnavailable {
				return err // still syncing
			}
			return nil
		})
		return resp, err
	}
	ckpt := func(inc, version uint64, rows ...string) *wire.RainstormCheckpoint {
		c := &wire.RainstormCheckpoint{Task: task, Incarnation: inc, Version: version,
			Inputs: []wire.RainstormInput{{Next: version + 1}}}
		for _, r := range rows {
			c.Rows = append(c.Rows, wire.RainstormRecord{Fields: []string{r, "1"}})
		}
		return c
	}
	put := func(m *Manager, c *wire.RainstormCheckpoint) *wire.RainstormCheckpointAck {
		t.Helper()
		resp, err := call(m, c)
		if err != nil {
			t.Fatalf("checkpoint %d: %v", c.Version, err)
		}
		return resp.(*wire.RainstormCheckpointAck)
	}

	// A stale incarnation cannot open.
	if _, err := call(lead, &wire.RainstormOpen{Task: task, Incarnation: inc - 1}); !errors.Is(err, wire.ErrStaleFence) {
		t.Fatalf("open with an old incarnation: %v, want stale fence", err)
	}
	resp, err := call(lead, &wire.RainstormOpen{Task: task, Incarnation: inc})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.(*wire.RainstormOpenReply); r.Checkpoint != nil || len(r.Routes) != 2 {
		t.Fatalf("fresh open: %+v", r)
	}
	if a := put(lead, ckpt(inc, 1, "a")); a.Refused {
		t.Fatalf("first checkpoint refused: %s", a.Reason)
	}
	if a := put(lead, ckpt(inc, 1, "a")); a.Refused {
		t.Fatalf("a resend refused: %s", a.Reason)
	}
	if a := put(lead, ckpt(inc, 3, "c")); !a.Refused {
		t.Fatal("a version gap was stored")
	}
	// Acknowledged means on a majority: at least one peer holds it.
	held := 0
	for _, m := range c.running() {
		m.rs.mu.Lock()
		if st := m.rs.tasks[task]; st != nil && st.latest != nil && st.latest.Version == 1 {
			held++
		}
		m.rs.mu.Unlock()
	}
	if held < 2 {
		t.Fatalf("an acknowledged checkpoint is on %d managers", held)
	}

	// The worker dies: the task is placed again under a new token, and the
	// old incarnation can neither checkpoint nor open.
	c.killWorker("w1")
	c.addWorker("w2", 4)
	inc2 := taskToken(t, lead, job, 1, inc)
	if a := put(lead, ckpt(inc, 2, "zombie")); !a.Refused || a.Current <= inc {
		t.Fatalf("the replaced incarnation's checkpoint: %+v", a)
	}
	resp, err = call(lead, &wire.RainstormOpen{Task: task, Incarnation: inc2})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.(*wire.RainstormOpenReply); r.Checkpoint == nil || r.Checkpoint.Version != 1 {
		t.Fatalf("the replacement does not resume from version 1: %+v", r.Checkpoint)
	}
	if a := put(lead, ckpt(inc2, 2, "b")); a.Refused {
		t.Fatalf("the replacement's checkpoint: %s", a.Reason)
	}

	// A new leader answers from the replicated state.
	c.stopManager(lead.cfg.ID)
	next := c.leader()
	resp, err = call(next, &wire.RainstormOpen{Task: task, Incarnation: inc2})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.(*wire.RainstormOpenReply); r.Checkpoint == nil || r.Checkpoint.Version != 2 {
		t.Fatalf("the new leader lost version 2: %+v", r.Checkpoint)
	}
	out, err := next.PipelineOutput(context.Background(), job, "pipe", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Rows) != 2 || out.Rows[0][0] != "a" || out.Rows[1][0] != "b" {
		t.Fatalf("published rows %v, want a and b (the zombie's never)", out.Rows)
	}
}
