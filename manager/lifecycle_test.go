package manager

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
)

// coresFree waits until the worker and the leader's table both show every
// core of worker w free.
func coresFree(t *testing.T, l *Manager, w *fakeWorker) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if n := w.freeCores(); n != w.cores {
			return fmt.Errorf("worker %s has %d of %d cores free", w.id, n, w.cores)
		}
		wv, _ := l.workers.get(w.id)
		if wv.AvailableCores != w.cores {
			return fmt.Errorf("leader counts %d of %d cores free on %s", wv.AvailableCores, w.cores, w.id)
		}
		return nil
	})
}

func TestCancelFreesCores(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	w := c.addWorker("w1", 4)
	l := c.leader()
	ack, err := l.Submit(context.Background(), sleepJob(t, "stop-me", 2, 2, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, l, ack.JobID, wire.JobRunning, 5*time.Second)
	if w.freeCores() != 0 {
		t.Fatalf("worker has %d free cores while the job runs", w.freeCores())
	}

	cack, err := l.Cancel(context.Background(), ack.JobID, "operator said so")
	if err != nil {
		t.Fatal(err)
	}
	if !cack.Cancelled || cack.WorkflowsCancelled != 2 {
		t.Fatalf("cancel ack = %+v", cack)
	}
	st := waitJob(t, l, ack.JobID, wire.JobCancelled, 5*time.Second)
	for _, wf := range st.Workflows {
		if wf.Status != wire.WorkflowCancelled {
			t.Fatalf("workflow %s is %s", wf.Name, wf.Status)
		}
	}
	coresFree(t, l, w)
	if fin := finishedAt(l, ack.JobID); fin.IsZero() {
		t.Fatal("cancelled job has no finish time")
	}

	// A second cancel is answered, not an error, and changes nothing.
	again, err := l.Cancel(context.Background(), ack.JobID, "again")
	if err != nil || again.Cancelled || !strings.Contains(again.Error, "CANCELLED") {
		t.Fatalf("second cancel = %+v, %v", again, err)
	}
	if _, err := l.Cancel(context.Background(), "j-nope", ""); wire.CodeOf(err) != wire.CodeNotFound {
		t.Fatalf("cancel of unknown job: %v", err)
	}
	// Followers learn the outcome.
	for _, m := range c.running() {
		waitJob(t, m, ack.JobID, wire.JobCancelled, 5*time.Second)
	}
}

func TestJobTimeout(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	w := c.addWorker("w1", 2)
	l := c.leader()
	sub := sleepJob(t, "slow", 1, 2, time.Minute)
	sub.Timeout = 300 * time.Millisecond
	ack, err := l.Submit(context.Background(), sub)
	if err != nil {
		t.Fatal(err)
	}
	st := waitJob(t, l, ack.JobID, wire.JobTimeout, 5*time.Second)
	if !strings.Contains(st.Error, "timed out after 300ms") || st.Workflows[0].Status != wire.WorkflowCancelled {
		t.Fatalf("timed out job: %+v", st)
	}
	coresFree(t, l, w)
	if fin := finishedAt(l, ack.JobID); fin.IsZero() {
		t.Fatal("timed out job has no finish time")
	}
}

func finishedAt(m *Manager, id string) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.jobs[id].rec.Finished()
}

// TestRetentionForgetsFinishedJobs: finished jobs past retention leave
// memory and disk; running ones stay whatever their age.
func TestRetentionForgetsFinishedJobs(t *testing.T) {
	c := newTestCluster(t, 1, func(cfg *Config) { cfg.Retention = 200 * time.Millisecond })
	c.addWorker("w1", 2)
	l := c.leader()
	done, err := l.Submit(context.Background(), sleepJob(t, "brief", 1, 1, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, l, done.JobID, wire.JobCompleted, 5*time.Second)
	long, err := l.Submit(context.Background(), sleepJob(t, "long", 1, 1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, 50*time.Millisecond, func() error {
		l.expireFinished()
		if _, err := l.Job(context.Background(), done.JobID); wire.CodeOf(err) != wire.CodeNotFound {
			return fmt.Errorf("finished job still there: %v", err)
		}
		return nil
	})
	if _, err := l.store.Job(done.JobID); err == nil {
		t.Fatal("finished job still on disk")
	}
	if _, err := l.Job(context.Background(), long.JobID); err != nil {
		t.Fatalf("running job forgotten: %v", err)
	}
}

func TestQueuedJobPlacedWhenCapacityAppears(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.leader()

	// No worker at all.
	first, err := l.Submit(context.Background(), sleepJob(t, "early", 1, 1, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if first.QueuedPosition != 1 {
		t.Fatalf("first ack %+v, want queued at 1", first)
	}
	// Needs more cores than the worker that is about to come.
	big, err := l.Submit(context.Background(), sleepJob(t, "big", 1, 4, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if big.QueuedPosition != 2 {
		t.Fatalf("big ack %+v, want queued at 2", big)
	}
	waitJob(t, l, first.JobID, wire.JobQueued, time.Second)

	c.addWorker("small", 2)
	waitJob(t, l, first.JobID, wire.JobCompleted, 5*time.Second)
	if st, _ := l.Job(context.Background(), big.JobID); st.Status != wire.JobQueued {
		t.Fatalf("big job is %s with only a 2-core worker", st.Status)
	}
	c.addWorker("large", 4)
	st := waitJob(t, l, big.JobID, wire.JobCompleted, 5*time.Second)
	if st.Workflows[0].Worker != "large" {
		t.Fatalf("big job ran on %s", st.Workflows[0].Worker)
	}
}

func TestClusterView(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.addWorker("w1", 3)
	l := c.leader()
	view, err := l.Cluster(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]bool{}
	for _, n := range view.Nodes {
		byName[n.Name] = true
		switch n.Name {
		case l.ID():
			if !n.IsLeader || n.Role != "manager" || n.API != "http://api-"+l.ID() || n.Term == 0 {
				t.Fatalf("self = %+v", n)
			}
		case "w1":
			if n.Role != "worker" || n.TotalCores != 3 || n.AvailableCores != 3 || n.State != "HEALTHY" {
				t.Fatalf("worker = %+v", n)
			}
		}
	}
	for _, want := range []string{"m1", "m2", "m3", "w1"} {
		if !byName[want] {
			t.Fatalf("cluster view lacks %s: %+v", want, view.Nodes)
		}
	}
}

// TestQueuedAckWhileTheSchedulerRuns: a job stored on a majority used to be
// the scheduler's to place as much as its submitter's, and a scheduler pass
// that claimed the job's workflows first left the submitter's own attempt
// with nothing to do, so the ack went out before any attempt ended and said
// nothing about the queue (seen under load in
// TestQueuedJobPlacedWhenCapacityAppears). Now the scheduler leaves a job to
// its Submit until that returns. The window is narrow; a scheduler spinning
// every millisecond gives it twenty chances.
func TestQueuedAckWhileTheSchedulerRuns(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.HeartbeatInterval = time.Millisecond })
	l := c.leader()
	for i := 1; i <= 20; i++ {
		ack, err := l.Submit(context.Background(), sleepJob(t, fmt.Sprintf("q%d", i), 1, 1, 50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if ack.QueuedPosition != i {
			t.Fatalf("submit %d: ack %+v, want queued at %d (no worker can run anything)", i, ack, i)
		}
	}
}
