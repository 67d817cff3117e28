package manager

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"tempest/internal/obs"
	"tempest/internal/obs/obstest"
	"tempest/internal/testutil"
	"tempest/wire"
)

// The manager's series join the node's registry beside the runtime's: the
// leader and its workers show, the output passes promtool, and registering
// a second time is refused.
func TestManagerMetrics(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	c.addWorker("w1", 2)
	l := c.leader()
	obstest.Registered(t, "manager", 10*time.Second, l.RegisterMetrics,
		"tempest_manager_is_leader 1\n", `tempest_manager_workers{state="HEALTHY"} 1`+"\n",
		"tempest_manager_available_cores 2\n", "process_cpu_seconds_total ")
}

// The workflows-by-status tally a scrape reads is kept as the job table
// changes; at every step it equals a count of the table itself: jobs
// submitted, running, ended, forgotten as retention forgets them, and
// reloaded from disk (ended ones too) by a restarted manager.
func TestWorkflowTallyFollowsTheJobTable(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	c.addWorker("w1", 4)
	l := c.leader()
	check := func(step string, m *Manager, want map[wire.WorkflowStatus]int) {
		t.Helper()
		m.mu.Lock()
		counted := make(map[wire.WorkflowStatus]int)
		for _, j := range m.jobs {
			for _, w := range j.wfs {
				counted[w.rec.Status]++
			}
		}
		tally := make(map[wire.WorkflowStatus]int)
		for s, n := range m.wfCounts {
			if n != 0 {
				tally[s] = n
			}
		}
		m.mu.Unlock()
		if !maps.Equal(tally, counted) {
			t.Fatalf("%s: tally %v, job table %v", step, tally, counted)
		}
		if !maps.Equal(tally, want) {
			t.Fatalf("%s: tally %v, want %v", step, tally, want)
		}
	}
	submit := func(name string, n int, d time.Duration) string {
		ack, err := l.Submit(context.Background(), sleepJob(t, name, n, 1, d))
		if err != nil {
			t.Fatal(err)
		}
		return ack.JobID
	}

	brief := submit("brief", 3, 10*time.Millisecond)
	kept := submit("kept", 1, 10*time.Millisecond)
	long := submit("long", 2, time.Minute)
	waitJob(t, l, brief, wire.JobCompleted, 5*time.Second)
	waitJob(t, l, kept, wire.JobCompleted, 5*time.Second)
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, w := range l.jobs[long].wfs {
			if w.rec.Status != wire.WorkflowRunning {
				return fmt.Errorf("workflow %s is %s", w.rec.WorkflowID, w.rec.Status)
			}
		}
		return nil
	})
	check("ended and running", l, map[wire.WorkflowStatus]int{wire.WorkflowCompleted: 4, wire.WorkflowRunning: 2})
	obstest.Registered(t, "manager", 5*time.Second, l.RegisterMetrics,
		`tempest_manager_workflows{status="COMPLETED"} 4`+"\n", `tempest_manager_workflows{status="RUNNING"} 2`+"\n")

	// As expireFinished forgets a job past retention.
	if err := l.store.DeleteJob(brief); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	l.forgetLocked(l.jobs[brief])
	l.mu.Unlock()
	check("forgotten", l, map[wire.WorkflowStatus]int{wire.WorkflowCompleted: 1, wire.WorkflowRunning: 2})

	c.stopManager(l.cfg.ID)
	r := c.startManager(l.cfg.ID)
	check("reloaded", r, map[wire.WorkflowStatus]int{wire.WorkflowCompleted: 1, wire.WorkflowRunning: 2})
}

// A scrape with a day's history retained: 2,000 finished jobs of 50
// workflows each. Its cost, and the time it holds the job table's lock,
// should not grow with the workflows retained.
func BenchmarkScrapeWithHistory(b *testing.B) {
	c := newTestCluster(b, 1, nil)
	l := c.leader()
	l.mu.Lock()
	for i := range 2000 {
		sub := *sleepJob(b, "old", 50, 1, time.Millisecond)
		sub.JobID = fmt.Sprintf("old-%d", i)
		j := l.newJobLocked(sub, time.Now())
		for _, w := range j.wfs {
			w.rec.Status = wire.WorkflowCompleted
		}
		j.rec.Status = wire.JobCompleted
		l.refreshJobLocked(j)
	}
	l.mu.Unlock()
	reg := obs.NewRegistry()
	if err := l.RegisterMetrics(reg); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
