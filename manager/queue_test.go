package manager

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"tempest/wire"
)

// A full queue refuses new jobs clearly, with a retry-after, and stores
// nothing of them; the jobs it holds all finish, and then it takes work
// again.
func TestFullQueueRefusesNewJobs(t *testing.T) {
	c := newTestCluster(t, 1, func(c *Config) { c.MaxQueuedJobs = 2 })
	c.addWorker("w1", 1)
	l := c.leader()
	submit := func(name string) (*wire.JobAck, error) {
		return l.Submit(context.Background(), sleepJob(t, name, 1, 1, 300*time.Millisecond))
	}
	first, err := submit("runs")
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, l, first.JobID, wire.JobRunning, 5*time.Second)
	var accepted []string
	for _, name := range []string{"waits-1", "waits-2"} {
		ack, err := submit(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		accepted = append(accepted, ack.JobID)
	}

	_, err = submit("one-too-many")
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeUnavailable || we.RetryAfter <= 0 || !strings.Contains(we.Message, "capacity exceeded") {
		t.Fatalf("a submission past max_queued_jobs: %v; want unavailable, capacity exceeded, with a retry-after", err)
	}
	list, _ := l.Jobs(context.Background())
	for _, j := range list {
		if j.Name == "one-too-many" {
			t.Fatalf("the refused job was kept: %+v", j)
		}
	}

	for _, id := range append([]string{first.JobID}, accepted...) {
		waitJob(t, l, id, wire.JobCompleted, 10*time.Second)
	}
	if _, err := submit("after"); err != nil {
		t.Fatalf("once the queue drained: %v", err)
	}
}
