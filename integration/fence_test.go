package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"tempest/wire"
)

// A dispatch carrying a fence token older than the worker has seen for that
// workflow is refused by the worker.
func TestStaleFenceDispatchRefused(t *testing.T) {
	c := startCluster(t, 1, 1, 2)
	id := c.submit(napJob("fenced", "60s", "10s"))
	st := c.waitRunning(id)
	wf := st.Workflows[0]
	w, ok := c.Node(wf.Worker)
	if !ok {
		t.Fatalf("unknown worker %q", wf.Worker)
	}
	// Speak to the worker as a deposed manager would: right secret, old token.
	tr := wireNode(t, "deposed-manager", c.Secret())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := tr.Call(ctx, w.QUIC, &wire.WorkflowDispatch{
		JobID: id, WorkflowID: wf.WorkflowID, Cores: 1, FenceToken: 1,
		Workflow: wire.WorkflowSpec{Name: "nap", Type: "sleep", Cores: 1},
	})
	switch {
	case errors.Is(err, wire.ErrStaleFence):
	case err == nil:
		if ack, ok := resp.(*wire.WorkflowDispatchAck); !ok || ack.Accepted {
			t.Fatalf("stale dispatch accepted: %#v", resp)
		}
	default:
		t.Fatalf("stale dispatch: want a stale-fence refusal, got %v", err)
	}
	// And the running workflow carries on.
	if st := c.waitStatus(id, 30*time.Second, terminal); st.Status != wire.JobCompleted || st.Workflows[0].Attempts != 1 {
		t.Fatalf("job after a stale dispatch: %s, %d attempts", st.Status, st.Workflows[0].Attempts)
	}
}
