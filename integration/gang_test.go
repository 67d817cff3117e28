package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
)

// gangJob is a generated pipeline of four tasks (source, two filter tasks,
// one count task) named name.
func gangJob(name string, records int64, rate int) string {
	return fmt.Sprintf(`name: %s
timeout: 300s
workflows:
  - name: %s
    type: rainstorm
    source: {generate: {records: %d, rate: %d, keys: 17}}
    stages:
      - {name: low, op: filter, tasks: 2, field: value, matches: '^[0-4]?[0-9]?[0-9]$'}
      - {name: count, op: count, tasks: 1, key: key}
`, name, name, records, rate)
}

// Two pipelines of four tasks on 3 workers of 2 cores, with the real
// binaries. The first runs; the second waits whole, holding none of the 2
// cores left. A worker running two of the first's tasks is SIGKILLed: the
// first's replacements take the free cores, it ends with its exact
// output, and then the second runs whole and ends with its own. Placed
// task by task, the second held the 2 free cores, and after the kill each
// pipeline held 2 of the 4 cores left and waited for the other's until
// the job's timeout.
func TestRainstormPipelinesPlacedWholeAcrossKill(t *testing.T) {
	const records = 30000
	want := generated(t, records, 17, keepLow)
	c := startCluster(t, 1, 3, 2)
	// Paced to take at least 30 s, so the kill lands mid-run however
	// slow the machine.
	first := c.submit(gangJob("first", records, 1000))
	c.taskWorker(first, "first", 0) // records flow
	second := c.submit(gangJob("second", records, 0))

	// The second waits whole and says why; find a worker running two of
	// the first's tasks (four tasks on three workers: there is one).
	victim := ""
	testutil.Eventually(t, 60*time.Second, 100*time.Millisecond, func() error {
		out, err := c.output(second, "second")
		if err != nil {
			return err
		}
		for _, task := range out.Tasks {
			if task.Status != wire.WorkflowPending || task.Worker != "" ||
				!strings.Contains(task.Waiting, "no free cores for the whole pipeline (needs 4, 2 free)") {
				return fmt.Errorf("second's task %d/%d: %s on %q, waiting %q", task.Stage, task.Index, task.Status, task.Worker, task.Waiting)
			}
		}
		out, err = c.output(first, "first")
		if err != nil {
			return err
		}
		on := map[string]int{}
		for _, task := range out.Tasks {
			if task.Status != wire.WorkflowRunning {
				return fmt.Errorf("first's task %d/%d is %s", task.Stage, task.Index, task.Status)
			}
			on[task.Worker]++
		}
		for w, n := range on {
			if n == 2 {
				victim = w
				return nil
			}
		}
		return fmt.Errorf("no worker runs two of first's tasks: %v", on)
	})
	if err := c.Kill(victim); err != nil {
		t.Fatal(err)
	}
	out := c.finish(first, "first")
	if out.Restarts == 0 {
		t.Fatalf("the kill restarted no task of first: %+v", out.Tasks)
	}
	diffRows(t, "first, after its worker's SIGKILL", out.Rows, want)
	diffRows(t, "second, after first", c.finish(second, "second").Rows, want)
}
