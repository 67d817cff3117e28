package manager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"tempest/api"
	"tempest/internal/testutil"
	"tempest/wire"
)

func TestJobOfSleepWorkflowsCompletes(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.addWorker("w1", 4)
	c.addWorker("w2", 4)
	l := c.leader()

	ack, err := l.Submit(context.Background(), sleepJob(t, "nap", 4, 1, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if !ack.Accepted || ack.JobID == "" || ack.QueuedPosition != 0 {
		t.Fatalf("ack = %+v", ack)
	}
	watch, err := l.Watch(context.Background(), ack.JobID)
	if err != nil {
		t.Fatal(err)
	}

	st := waitJob(t, l, ack.JobID, wire.JobCompleted, 10*time.Second)
	if st.TotalCompleted != 4 || len(st.Workflows) != 4 {
		t.Fatalf("status = %+v", st)
	}
	for _, w := range st.Workflows {
		if w.Status != wire.WorkflowCompleted || w.Attempts != 1 || w.CompletedCount != 1 || w.Worker == "" {
			t.Fatalf("workflow %+v", w)
		}
		if len(w.Steps) != 1 || w.Steps[0].Name != "sleep" || w.Steps[0].Completed != 1 || w.Steps[0].P50Ms < 90 {
			t.Fatalf("workflow %s steps %+v", w.Name, w.Steps)
		}
		// One sample: every percentile is it.
		if s := w.Steps[0]; s.P95Ms != s.P50Ms || s.P999Ms != s.P50Ms || s.P90Ms != s.P50Ms {
			t.Fatalf("workflow %s percentiles of one sample differ: %+v", w.Name, s)
		}
		if w.ElapsedSeconds < 0.09 || w.PlannedSeconds != 0.1 || w.Recent != nil {
			t.Fatalf("workflow %s elapsed %v planned %v recent %+v", w.Name, w.ElapsedSeconds, w.PlannedSeconds, w.Recent)
		}
	}

	// The watch stream ends with the terminal status and closes. On a busy
	// machine the job may end before the watch attaches; then its first
	// status is already the last.
	var first, last api.JobStatus
	n := 0
	for s := range watch {
		if n == 0 {
			first = s
		}
		last = s
		n++
	}
	if last.Status != wire.JobCompleted || n == 0 || (n == 1 && first.Status != wire.JobCompleted) {
		t.Fatalf("watch saw %d statuses, first %s, ending in %s", n, first.Status, last.Status)
	}

	res, err := l.Results(context.Background(), ack.JobID)
	if err != nil || res.Status != wire.JobCompleted || len(res.Workflows) != 4 {
		t.Fatalf("results = %+v, %v", res, err)
	}

	// Followers hold the outcome too (replicated), so any of them could
	// take over without re-running the job.
	for _, m := range c.running() {
		if m == l {
			continue
		}
		waitJob(t, m, ack.JobID, wire.JobCompleted, 5*time.Second)
	}
	// Every core is free again.
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		for _, wv := range l.workers.list() {
			if wv.AvailableCores != wv.TotalCores {
				return fmt.Errorf("%s has %d of %d cores free", wv.ID, wv.AvailableCores, wv.TotalCores)
			}
		}
		return nil
	})
}

func TestFollowerRedirectsToLeader(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.leader()
	for _, m := range c.running() {
		if m == l {
			continue
		}
		_, err := m.Submit(context.Background(), sleepJob(t, "x", 1, 1, time.Second))
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodeNotLeader {
			t.Fatalf("follower %s Submit: %v", m.ID(), err)
		}
		testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
			isLeader, url := m.Leader()
			if isLeader || url != "http://api-"+l.ID() {
				return fmt.Errorf("follower %s Leader() = %v, %q", m.ID(), isLeader, url)
			}
			return nil
		})
	}
	if isLeader, url := l.Leader(); !isLeader || url != "http://api-"+l.ID() {
		t.Fatalf("leader Leader() = %v, %q", isLeader, url)
	}
}

func TestSubmitRejectsInvalidJobs(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	l := c.leader()
	dup := sleepJob(t, "d", 2, 1, time.Second)
	dup.Workflows[1].Name = dup.Workflows[0].Name
	unknown := sleepJob(t, "u", 1, 1, time.Second)
	unknown.Workflows[0].Type = "teleport"
	for _, tc := range []struct {
		name string
		sub  *wire.JobSubmission
		want string
	}{
		{"no workflows", &wire.JobSubmission{Name: "empty"}, "no workflows"},
		{"duplicate names", dup, "duplicate name"},
		{"unknown type", unknown, "teleport"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.Submit(context.Background(), tc.sub)
			if wire.CodeOf(err) != wire.CodeRejected || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Submit: %v, want rejected mentioning %q", err, tc.want)
			}
		})
	}
}

func TestSubmitNeedsQuorum(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	w := c.addWorker("w1", 4)
	l := c.leader()

	// Cut both followers off. The leader still believes it leads for up to
	// two election timeouts (check-quorum), which is exactly the window in
	// which it must refuse to place anything on its own.
	for _, m := range c.running() {
		if m != l {
			c.hub.Isolate(m.ID())
		}
	}
	start := time.Now()
	_, err := l.Submit(context.Background(), sleepJob(t, "lonely", 1, 1, 50*time.Millisecond))
	if !errors.Is(err, wire.ErrNoQuorum) {
		t.Fatalf("Submit with 2 of 3 managers isolated: %v, want no quorum", err)
	}
	if !strings.Contains(err.Error(), "no quorum: 1 of 3 managers confirmed") {
		t.Fatalf("error %q does not say how many confirmed", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("no-quorum answer took %s; it must fail fast", took)
	}
	// Nothing was dispatched, and the refused job is recorded as FAILED.
	if w.freeCores() != 4 {
		t.Fatalf("worker has %d free cores after a refused job", w.freeCores())
	}
	jobs, _ := l.Jobs(context.Background())
	if len(jobs) != 1 || jobs[0].Status != wire.JobFailed || !strings.Contains(jobs[0].Error, "no quorum") {
		t.Fatalf("jobs after refusal: %+v", jobs)
	}

	c.hub.Heal()
	var id string
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		l := c.leader()
		ack, err := l.Submit(context.Background(), sleepJob(t, "together", 1, 1, 50*time.Millisecond))
		if err != nil {
			return err
		}
		id = ack.JobID
		return nil
	})
	waitJob(t, c.leader(), id, wire.JobCompleted, 10*time.Second)
}

// A job whose stored form passes max_job_bytes is refused at submit, too
// large, naming the setting; nothing of it is kept.
func TestSubmitRefusesAJobLargerThanMaxJobBytes(t *testing.T) {
	c := newTestCluster(t, 1, func(cfg *Config) { cfg.MaxJobBytes = 2 << 10 })
	l := c.leader()
	small := sleepJob(t, "small", 1, 1, time.Second)
	if _, err := l.Submit(context.Background(), small); err != nil {
		t.Fatalf("a small job: %v", err)
	}
	big := sleepJob(t, "big", 200, 1, time.Second)
	_, err := l.Submit(context.Background(), big)
	if wire.CodeOf(err) != wire.CodeTooLarge || !strings.Contains(err.Error(), "max_job_bytes") {
		t.Fatalf("a job over the cap: %v, want too_large naming max_job_bytes", err)
	}
	if jobs, _ := l.Jobs(context.Background()); len(jobs) != 1 {
		t.Fatalf("%d jobs kept, want only the small one", len(jobs))
	}
}
