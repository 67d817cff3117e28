package manager

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"tempest/wire"
)

// A cancel the worker has not confirmed shows CANCELLING, to clients and
// to the job's watchers; the worker's next report is told to stop, its
// final report confirms it, and the job shows CANCELLED.
func TestCancelShowsCancellingUntilTheWorkerStops(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.addWorker("w1", 2)
	l := c.leader()
	ack, err := l.Submit(context.Background(), sleepJob(t, "stop-me", 1, 1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, l, ack.JobID, wire.JobRunning, 5*time.Second)

	// The worker hears nothing and says nothing while cut: the cancel
	// is not delivered, and no report can confirm it.
	var cut atomic.Bool
	cut.Store(true)
	c.hub.SetHook(func(from, to string, msg wire.Message) bool {
		if !cut.Load() {
			return true
		}
		switch msg.Type() {
		case wire.TypeCancelJob:
			return to != "w1"
		case wire.TypeWorkflowProgress, wire.TypeWorkflowProgressBatch:
			return from != "w1"
		}
		return true
	})
	t.Cleanup(func() { c.hub.SetHook(nil) })
	if _, err := l.Cancel(context.Background(), ack.JobID, "enough"); err != nil {
		t.Fatal(err)
	}
	st, err := l.Job(context.Background(), ack.JobID)
	if err != nil || st.Status != wire.JobCancelling {
		t.Fatalf("job %+v, %v; want CANCELLING while the worker has not stopped", st, err)
	}
	list, err := l.Jobs(context.Background())
	if err != nil || len(list) != 1 || list[0].Status != wire.JobCancelling {
		t.Fatalf("jobs %+v, %v; want the job CANCELLING", list, err)
	}

	cut.Store(false)
	waitJob(t, l, ack.JobID, wire.JobCancelled, 10*time.Second)
}

// A job whose workflows all ended shows COMPLETING until its end is stored
// on a majority of managers, then COMPLETED.
func TestCompletingUntilTheEndIsOnAMajority(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.addWorker("w1", 2)
	l := c.leader()
	var cut atomic.Bool
	c.hub.SetHook(func(from, to string, msg wire.Message) bool {
		if !cut.Load() || from != l.ID() {
			return true
		}
		switch msg.Type() {
		case wire.TypeReplicateJobStatus, wire.TypeReplicateJobStatusBatch:
			return false
		}
		return true
	})
	t.Cleanup(func() { c.hub.SetHook(nil) })
	ack, err := l.Submit(context.Background(), sleepJob(t, "finish", 1, 1, 300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, l, ack.JobID, wire.JobRunning, 5*time.Second)
	cut.Store(true)
	st := waitJob(t, l, ack.JobID, wire.JobCompleting, 10*time.Second)
	if st.Workflows[0].Status != wire.WorkflowCompleted {
		t.Fatalf("workflow %s while the job is COMPLETING, want COMPLETED", st.Workflows[0].Status)
	}
	cut.Store(false)
	waitJob(t, l, ack.JobID, wire.JobCompleted, 10*time.Second)
}

// A status never goes backwards: a leader deciding an end it cannot yet
// store on a majority shows COMPLETING, but once it learns that another
// manager holds that end (a peer's snapshot in a state sync, merged here as
// the sync merges it) it shows the end as it is, even while its own store
// is still under way. The previous leader showed that end COMPLETED once a
// majority held it; the chaos checker caught a successor that had worked the
// end out again from its workers showing it COMPLETING afterwards.
func TestEndHeldByAPeerIsNotShownCompleting(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.addWorker("w1", 2)
	l := c.leader()
	c.hub.SetHook(func(from, to string, msg wire.Message) bool {
		switch msg.Type() {
		case wire.TypeReplicateJobStatus, wire.TypeReplicateJobStatusBatch:
			return from != l.ID()
		}
		return true
	})
	t.Cleanup(func() { c.hub.SetHook(nil) })
	ack, err := l.Submit(context.Background(), sleepJob(t, "finish", 1, 1, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, l, ack.JobID, wire.JobCompleting, 10*time.Second)

	// What a peer's snapshot says of the job: ended, COMPLETED.
	l.mu.Lock()
	jp := l.jobProgressLocked(l.jobs[ack.JobID], true)
	l.mu.Unlock()
	l.update(func(tx *txn) { l.mergeJobLocked(tx, &jp) })
	st, err := l.Job(context.Background(), ack.JobID)
	if err != nil || st.Status != wire.JobCompleted {
		t.Fatalf("job %+v, %v once a peer is known to hold its end; want COMPLETED", st, err)
	}
}
