package manager

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
	"tempest/workflow"
)

// workflowOn waits until job id's only workflow runs on a worker other than
// those in not, and returns that worker and the attempt's fence token.
func workflowOn(t *testing.T, c *testCluster, id string, not ...string) (worker string, token uint64) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		l := c.leader()
		l.mu.Lock()
		defer l.mu.Unlock()
		j, ok := l.jobs[id]
		if !ok {
			return fmt.Errorf("job %s unknown to %s", id, l.ID())
		}
		w := j.wfs[0]
		if w.rec.Status != wire.WorkflowRunning || slices.Contains(not, w.rec.Worker) {
			return fmt.Errorf("workflow is %s on %q", w.rec.Status, w.rec.Worker)
		}
		worker, token = w.rec.Worker, w.rec.FenceToken
		return nil
	})
	return worker, token
}

func TestWorkerDeathRetriesElsewhereNeverBack(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	for _, id := range []string{"w1", "w2", "w3"} {
		c.addWorker(id, 2)
	}
	l := c.leader()
	ack, err := l.Submit(context.Background(), sleepJob(t, "long", 1, 1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	wfID := workflowID(ack.JobID, 0)

	first, token1 := workflowOn(t, c, ack.JobID)
	c.killWorker(first)
	second, token2 := workflowOn(t, c, ack.JobID, first)
	if token2 <= token1 {
		t.Fatalf("retry token %#x not above first attempt's %#x", token2, token1)
	}

	// A progress report from the superseded attempt (a worker SWIM wrongly
	// declared dead) is told to stop.
	resp, err := c.hub.Node("ghost").Call(context.Background(), l.ID(), &wire.WorkflowProgress{
		JobID: ack.JobID, WorkflowID: wfID, Status: wire.WorkflowRunning, FenceToken: token1,
	})
	if err != nil || !resp.(*wire.ProgressAck).Cancel {
		t.Fatalf("stale progress answered %+v, %v; want cancel", resp, err)
	}

	// The first worker comes back, much bigger, so that a selection that
	// ignored exclusions would almost surely pick it.
	revived := c.addWorker(first, 64)
	c.killWorker(second)
	third, token3 := workflowOn(t, c, ack.JobID, first, second)
	if token3 <= token2 {
		t.Fatalf("second retry token %#x not above %#x", token3, token2)
	}
	if got := revived.dispatchTokens(wfID); len(got) != 0 {
		t.Fatalf("workflow went back to the worker that failed it: %v", got)
	}

	st, _ := l.Job(context.Background(), ack.JobID)
	if w := st.Workflows[0]; w.Attempts != 3 || w.Worker != third {
		t.Fatalf("workflow after two deaths: %+v", w)
	}
	if _, err := l.Cancel(context.Background(), ack.JobID, "done"); err != nil {
		t.Fatal(err)
	}
}

func TestRetriesExhaustedFailsWorkflow(t *testing.T) {
	c := newTestCluster(t, 1, func(cfg *Config) { cfg.MaxWorkflowRetries = 1 })
	c.addWorker("w1", 1)
	c.addWorker("w2", 1)
	c.addWorker("w3", 1)
	l := c.leader()
	ack, err := l.Submit(context.Background(), sleepJob(t, "doomed", 1, 1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	first, _ := workflowOn(t, c, ack.JobID)
	c.killWorker(first)
	second, _ := workflowOn(t, c, ack.JobID, first)
	c.killWorker(second)
	st := waitJob(t, l, ack.JobID, wire.JobFailed, 10*time.Second)
	if w := st.Workflows[0]; w.Status != wire.WorkflowFailed || w.Attempts != 2 {
		t.Fatalf("workflow = %+v", w)
	}
}

func TestLeaderChangeSyncsStateAndJobCompletes(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	workers := []*fakeWorker{c.addWorker("w1", 2), c.addWorker("w2", 2)}
	old := c.leader()
	ack, err := old.Submit(context.Background(), sleepJob(t, "survivor", 2, 1, 1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, old, ack.JobID, wire.JobRunning, 5*time.Second)

	c.stopManager(old.ID())
	nl := c.leader()
	if nl.ID() == old.ID() {
		t.Fatalf("leader did not change")
	}
	st := waitJob(t, nl, ack.JobID, wire.JobCompleted, 15*time.Second)
	for _, w := range st.Workflows {
		// Running work was adopted, not restarted.
		if w.Attempts != 1 || w.Status != wire.WorkflowCompleted {
			t.Fatalf("workflow after failover: %+v", w)
		}
	}
	for i := range 2 {
		wfID := workflowID(ack.JobID, i)
		n := 0
		for _, w := range workers {
			n += len(w.dispatchTokens(wfID))
		}
		if n != 1 {
			t.Fatalf("workflow %s dispatched %d times", wfID, n)
		}
	}
}

// TestNewLeaderLearnsJobFromPeerSnapshot: a manager that missed the
// replicated submission and status updates learns the job in state sync,
// from the other peer, when it becomes leader.
func TestNewLeaderLearnsJobFromPeerSnapshot(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.addWorker("w1", 2)
	old := c.leader()
	// Whoever is not leading: one (deaf) misses replication, the other
	// (keeper) may not lead next, so the deaf one must.
	var deaf, keeper string
	for _, id := range c.ids {
		if id == old.ID() {
			continue
		}
		if deaf == "" {
			deaf = id
		} else {
			keeper = id
		}
	}
	c.hub.SetHook(func(from, to string, msg wire.Message) bool {
		if to != deaf {
			return true
		}
		switch msg.Type() {
		case wire.TypeReplicateJob, wire.TypeReplicateJobStatus, wire.TypeRelayWorkerRegistration:
			return false
		}
		return true
	})
	c.members.setHealth(keeper, 1000)
	ack, err := old.Submit(context.Background(), sleepJob(t, "whisper", 1, 1, 1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, old, ack.JobID, wire.JobRunning, 5*time.Second)
	if _, err := c.manager(deaf).Job(context.Background(), ack.JobID); wire.CodeOf(err) != wire.CodeNotFound {
		t.Fatalf("deaf manager knows the job already (%v); the test proves nothing", err)
	}
	c.hub.SetHook(nil)

	c.stopManager(old.ID())
	nl := c.leader()
	if nl.ID() != deaf {
		t.Fatalf("%s leads, want %s", nl.ID(), deaf)
	}
	st := waitJob(t, nl, ack.JobID, wire.JobCompleted, 15*time.Second)
	if w := st.Workflows[0]; w.Attempts != 1 {
		t.Fatalf("workflow after failover: %+v", w)
	}
}

func TestRestartedManagerKnowsItsJobs(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	c.addWorker("w1", 2)
	l := c.leader()
	done, err := l.Submit(context.Background(), sleepJob(t, "before", 1, 1, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, l, done.JobID, wire.JobCompleted, 5*time.Second)
	running, err := l.Submit(context.Background(), sleepJob(t, "across", 1, 1, 1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, l, running.JobID, wire.JobRunning, 5*time.Second)
	termBefore := l.Term()

	c.stopManager("m1")
	m := c.startManager("m1")
	// Before it leads, from its data directory alone.
	st, err := m.Job(context.Background(), done.JobID)
	if err != nil || st.Status != wire.JobCompleted || st.TotalCompleted != 1 || len(st.Workflows[0].Steps) != 1 {
		t.Fatalf("finished job after restart: %+v, %v", st, err)
	}
	if st, err := m.Job(context.Background(), running.JobID); err != nil || st.Status.Terminal() {
		t.Fatalf("running job after restart: %+v, %v", st, err)
	}
	// Leading again (in a later term), it resumes the running job: the
	// worker re-registers with its workflow and finishes it there.
	l = c.leader()
	if l.Term() <= termBefore {
		t.Fatalf("term %d after restart, was %d", l.Term(), termBefore)
	}
	st = waitJob(t, l, running.JobID, wire.JobCompleted, 15*time.Second)
	if w := st.Workflows[0]; w.Attempts != 1 {
		t.Fatalf("workflow after restart: %+v", w)
	}
}

// A lost worker's workflows are not re-dispatched before WorkerFenceAfter
// has passed since it was last heard from: a worker that is only cut off
// stops them itself by then, so the target never sees both runs.
func TestLostWorkerWaitsForItsFence(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.WorkerFenceAfter = time.Hour })
	c.addWorker("w1", 2)
	c.addWorker("w2", 2)
	l := c.leader()
	ack, err := l.Submit(context.Background(), sleepJob(t, "patient", 1, 1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	first, token := workflowOn(t, c, ack.JobID)
	c.killWorker(first)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if wv, _ := l.workers.get(first); !wv.Gone {
			return fmt.Errorf("%s not gone yet", first)
		}
		return nil
	})
	// The death is known, yet within the fence wait the workflow stays
	// where it was, under the same token.
	l.mu.Lock()
	w := l.jobs[ack.JobID].wfs[0]
	worker, tok, status := w.rec.Worker, w.rec.FenceToken, w.rec.Status
	l.mu.Unlock()
	if worker != first || tok != token || status != wire.WorkflowRunning {
		t.Fatalf("re-dispatched before the worker's fence ran out: %s on %s under %#x", status, worker, tok)
	}
	if wait := l.fenceWait(first); wait <= 0 || wait > time.Hour {
		t.Fatalf("fence wait %s, want up to an hour from when %s was last heard from", wait, first)
	}
}

// stoppedClock is a Clock at a set time, for rules computed from Now alone.
type stoppedClock struct{ now time.Time }

func (c stoppedClock) Now() time.Time                        { return c.now }
func (c stoppedClock) AfterFunc(time.Duration, func()) Timer { panic("stoppedClock has no timers") }

// A worker this manager last heard from long ago may have been answered by
// the previous leader until shortly before this one was elected: its fence
// is counted from the election, not from when this manager last heard it.
func TestFenceWaitCountsFromTheElection(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name              string
		lastSeen, elected time.Duration // after t0
		now               time.Duration
		want              time.Duration
	}{
		{"heard before the election", 0, 30 * time.Second, 31 * time.Second, 11 * time.Second},
		{"heard after the election", 40 * time.Second, 30 * time.Second, 41 * time.Second, 11 * time.Second},
		{"fence over", 0, 30 * time.Second, 50 * time.Second, -8 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := stoppedClock{t0.Add(tc.lastSeen)}
			m := &Manager{cfg: Config{WorkerFenceAfter: 12 * time.Second}}
			m.workers = newWorkerTable(nil, 0, func() time.Time { return clock.now })
			m.workers.join("w1", "w1", "w1") // heard now: at lastSeen
			m.clock = stoppedClock{t0.Add(tc.elected)}
			m.leadSince.Store(m.clock.Now().UnixNano())
			m.clock = stoppedClock{t0.Add(tc.now)}
			if got := m.fenceWait("w1"); got != tc.want {
				t.Fatalf("fenceWait = %s, want %s", got, tc.want)
			}
		})
	}
}

// A worker that answers a dispatch only after DispatchTimeout (preparing a
// large run on a loaded machine) still starts the run: the manager sends
// the same dispatch again rather than placing the workflow elsewhere, so
// it runs once, on that worker, under one token.
func TestSlowDispatchAnswerIsNotRunTwice(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	slow := c.addWorker("w1", 2)
	slow.mu.Lock()
	slow.slowFirstAnswer = 3 * time.Second // DispatchTimeout is 1 s here
	slow.mu.Unlock()
	l := c.leader()
	ack, err := l.Submit(context.Background(), sleepJob(t, "once", 1, 1, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c.addWorker("w2", 2) // somewhere else it could have gone
	st := waitJob(t, l, ack.JobID, wire.JobCompleted, 30*time.Second)
	w := st.Workflows[0]
	if w.Worker != "w1" || w.Attempts != 1 {
		t.Fatalf("workflow ran on %q in %d attempts, want once on w1", w.Worker, w.Attempts)
	}
	slow.mu.Lock()
	tokens := slices.Clone(slow.dispatches[w.WorkflowID])
	slow.mu.Unlock()
	if len(tokens) != 1 {
		t.Fatalf("w1 started %d runs (tokens %v), want 1", len(tokens), tokens)
	}
}

// A workflow whose run failed permanently (an http setup step the target
// refused) fails at once: another worker would send the same refused login,
// so it is not retried.
func TestPermanentFailureIsNotRetried(t *testing.T) {
	var logins atomic.Int64
	tgt := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/login" {
			logins.Add(1)
		}
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(tgt.Close)
	params, err := wire.Marshal(&workflow.HTTPParams{VUs: 1, Iterations: 5,
		Setup: []workflow.HTTPStep{{Name: "login", Method: "POST", URL: tgt.URL + "/login"}},
		Steps: []workflow.HTTPStep{{Name: "api", Method: "GET", URL: tgt.URL + "/api"}}})
	if err != nil {
		t.Fatal(err)
	}
	c := newTestCluster(t, 1, nil)
	for _, id := range []string{"w1", "w2", "w3"} {
		c.addWorker(id, 1)
	}
	l := c.leader()
	ack, err := l.Submit(context.Background(), &wire.JobSubmission{Name: "refused",
		Workflows: []wire.WorkflowSpec{{Name: "api", Type: "http", Cores: 1, Params: params}}})
	if err != nil {
		t.Fatal(err)
	}
	st := waitJob(t, l, ack.JobID, wire.JobFailed, 10*time.Second)
	if w := st.Workflows[0]; w.Status != wire.WorkflowFailed || w.Attempts != 1 || !strings.Contains(w.Error, `setup step "login" failed (status)`) {
		t.Fatalf("workflow = %+v, want FAILED after one attempt with the setup step's reason", w)
	}
	if n := logins.Load(); n != 1 {
		t.Fatalf("the target saw %d logins, want 1: a permanent failure is not retried", n)
	}
}

// A placement whose commit reached no other manager is unknown to the next
// leader; the worker running it reports it in state sync with the placing
// leader's proof, and the new leader adopts it rather than run the
// workflow twice (an unproven report of such an attempt is ignored:
// authz_test.go).
func TestNewLeaderAdoptsAProvenAttemptItHasNoRecordOf(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	workers := []*fakeWorker{c.addWorker("w1", 1)}
	old := c.leader()
	c.hub.SetHook(func(from, to string, msg wire.Message) bool {
		if from != old.ID() {
			return true
		}
		switch msg.Type() {
		case wire.TypeProvisionCommit, wire.TypeReplicateJobStatus:
			return false
		}
		return true
	})
	ack, err := old.Submit(context.Background(), sleepJob(t, "unrecorded", 1, 1, 1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, old, ack.JobID, wire.JobRunning, 5*time.Second)
	c.stopManager(old.ID())
	c.hub.SetHook(nil)
	nl := c.leader()
	st := waitJob(t, nl, ack.JobID, wire.JobCompleted, 15*time.Second)
	if w := st.Workflows[0]; w.Attempts != 1 {
		t.Fatalf("workflow after failover: %+v", w)
	}
	if n := len(workers[0].dispatchTokens(workflowID(ack.JobID, 0))); n != 1 {
		t.Fatalf("workflow dispatched %d times, want once", n)
	}
}
