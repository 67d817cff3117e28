package manager

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
)

// A job that ran once is never run again because its end did not reach a
// majority before a leader change. Here m2 missed the job's submission and
// every status (m1's messages about the job do not reach it), and m1's end
// reaches nobody: m1 shows COMPLETING and the worker keeps its final report,
// unacknowledged. m1 stops; m2 leads, reads the job from m3 (RUNNING, on w1)
// and the finished run from w1's state. The chaos checker caught a successor
// in exactly this position retrying the workflow as "not running on w1 after
// the leader change": the load ran twice.
func TestFinishedRunFoundInTheSyncIsNotRunAgain(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.addRealWorker("w1", 2)
	l := waitWorkers(t, c, 1)
	// Of the other two, M misses the job and leads next; K holds the job
	// and cannot stand (its election requests are lost once L stops, and a
	// planned stop's TimeoutNow goes to M only).
	var m, k string
	for _, id := range c.ids {
		switch {
		case id == l.ID():
		case m == "":
			m = id
		default:
			k = id
		}
	}
	t.Logf("%s leads; %s misses the job and leads next; %s holds it", l.ID(), m, k)
	var endsCut, kSilent atomic.Bool
	var peerSyncs atomic.Int32
	c.hub.SetHook(func(from, to string, msg wire.Message) bool {
		switch {
		case from == k && kSilent.Load():
			switch msg.Type() {
			case wire.TypePreVoteRequest, wire.TypeVoteRequest:
				return false
			}
		case from == l.ID() && to == k && msg.Type() == wire.TypeTimeoutNow:
			return false
		case from == m && to == k && msg.Type() == wire.TypeStateSyncRequest:
			// M's first ask of K is lost: the worker's state comes in
			// before the peer's, as it may on any network.
			return peerSyncs.Add(1) > 1
		case from == l.ID():
			switch msg.Type() {
			case wire.TypeReplicateJob, wire.TypeProvisionCommit, wire.TypeProvisionCommitBatch:
				return to != m
			case wire.TypeReplicateJobStatus, wire.TypeReplicateJobStatusBatch:
				return to != m && !endsCut.Load()
			}
		}
		return true
	})
	t.Cleanup(func() { c.hub.SetHook(nil) })
	ack, err := l.Submit(context.Background(), sleepJob(t, "once", 1, 1, 500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, l, ack.JobID, wire.JobRunning, 10*time.Second)
	endsCut.Store(true)
	waitJob(t, l, ack.JobID, wire.JobCompleting, 10*time.Second)

	kSilent.Store(true)
	c.stopManager(l.ID())
	next := c.leader()
	if next.ID() != m {
		t.Fatalf("%s leads after %s stopped, want %s", next.ID(), l.ID(), m)
	}
	st := waitJob(t, next, ack.JobID, wire.JobCompleted, 20*time.Second)
	if a := st.Workflows[0].Attempts; a != 1 {
		t.Fatalf("the workflow shows %d attempts after the leader change, want 1: its run was found finished", a)
	}
}

// A leader whose state sync has not read a majority yet does not know every
// acknowledged job, so it must not acknowledge a final report for a job it
// does not know: the worker would forget the run, and the sync, finding the
// job placed on that worker and the run gone, would run it again (the chaos
// checker caught a load running twice this way). Here no peer answers a
// state sync, so the leader never finishes it.
func TestUnsyncedLeaderDoesNotAcknowledgeAnUnknownFinal(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.hub.SetHook(func(from, to string, msg wire.Message) bool {
		return msg.Type() != wire.TypeStateSyncRequest
	})
	t.Cleanup(func() { c.hub.SetHook(nil) })
	var l *Manager
	testutil.Eventually(t, 30*time.Second, 10*time.Millisecond, func() error {
		for _, m := range c.running() {
			if lt := m.leading(); lt != nil && !lt.Synced() {
				if _, leading := m.elector.QuorumAge(); leading {
					l = m
					return nil
				}
			}
		}
		return errors.New("no leader (with its sync under way) yet")
	})
	w := c.hub.Node("w9")
	final := &wire.WorkflowProgress{JobID: "j-elsewhere", WorkflowID: "j-elsewhere-0", WorkerID: "w9",
		Status: wire.WorkflowCompleted, Final: true, FenceToken: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := w.Call(ctx, l.ID(), final)
	if err == nil {
		t.Fatalf("a leader not yet synced answered a final report of a job it does not know with %T %+v; want an error (the worker keeps the report)", resp, resp)
	}
}
