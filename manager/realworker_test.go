package manager

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/security"
	"tempest/swim"
	"tempest/wire"
	"tempest/worker"
)

// These tests run the real worker role (package worker) on the hub next to
// the managers, so the two roles' halves of registration, dispatch,
// progress, cancel, state sync and failover are exercised together. The
// other scenario tests use fakeWorker, which lets a test crash a worker or
// count its dispatches.

// realWorker is a worker.Worker running on the test cluster's hub.
type realWorker struct {
	w    *worker.Worker
	stop context.CancelFunc
	done chan error
}

func (c *testCluster) addRealWorker(id string, cores int) *realWorker {
	c.t.Helper()
	secret, err := security.GenerateSecret()
	if err != nil {
		c.t.Fatal(err)
	}
	keyring, err := security.NewKeyring(secret, "")
	if err != nil {
		c.t.Fatal(err)
	}
	cfg := worker.DefaultConfig()
	cfg.ID, cfg.Datacenter, cfg.Cores = id, "dc1", cores
	cfg.Managers = c.ids
	cfg.SwimProfile = swim.ProfileTest
	cfg.CallTimeout = time.Second
	cfg.DrainTimeout = 2 * time.Second
	cfg.Logger = c.log.With("worker", id)
	w, err := worker.New(cfg, worker.Deps{
		Keyring:       keyring,
		Registry:      c.reg,
		Transport:     c.hub.Node(id),
		NewMembership: func(swim.Config) (worker.Membership, error) { return idleMembership{}, nil },
		CPU:           func() (worker.CPUSample, error) { return worker.CPUSample{}, fmt.Errorf("no cpu stats in tests") },
		Memory:        func() (float64, error) { return 0, fmt.Errorf("no memory stats in tests") },
	})
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rw := &realWorker{w: w, stop: cancel, done: make(chan error, 1)}
	go func() { rw.done <- w.Run(ctx) }()
	c.t.Cleanup(func() {
		rw.stop()
		<-rw.done
	})
	return rw
}

// idleMembership is SWIM for a worker on the hub: nothing to join.
type idleMembership struct{}

func (idleMembership) Addr() string                                { return "127.0.0.1:0" }
func (idleMembership) Join(context.Context, []string) (int, error) { return 0, nil }
func (idleMembership) Leave(time.Duration) error                   { return nil }
func (idleMembership) Shutdown() error                             { return nil }
func (idleMembership) SetKeys([][]byte) error                      { return nil }
func (idleMembership) LocalHealth() int                            { return 0 }
func (idleMembership) KeepJoined(context.Context, []string, time.Duration, time.Duration, string, *slog.Logger) {
}

// waitWorkers waits until the leader knows n registered workers.
func waitWorkers(t *testing.T, c *testCluster, n int) *Manager {
	t.Helper()
	var l *Manager
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		l = c.leader()
		got := 0
		for _, wv := range l.workers.list() {
			if wv.Alive && wv.Registered {
				got++
			}
		}
		if got < n {
			return fmt.Errorf("%d of %d workers registered with %s", got, n, l.ID())
		}
		return nil
	})
	return l
}

func TestRealWorkersRunJobAcrossLeaderChange(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.addRealWorker("rw1", 2)
	c.addRealWorker("rw2", 2)
	old := waitWorkers(t, c, 2)

	ack, err := old.Submit(context.Background(), sleepJob(t, "real", 3, 1, 1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, old, ack.JobID, wire.JobRunning, 5*time.Second)

	c.stopManager(old.ID())
	nl := c.leader()
	st := waitJob(t, nl, ack.JobID, wire.JobCompleted, 20*time.Second)
	for _, w := range st.Workflows {
		if w.Attempts != 1 || w.CompletedCount != 1 || len(w.Steps) != 1 {
			t.Fatalf("workflow after failover: %+v", w)
		}
	}
}

func TestRealWorkersCancel(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.addRealWorker("rw1", 4)
	l := waitWorkers(t, c, 1)
	ack, err := l.Submit(context.Background(), sleepJob(t, "cancel-me", 2, 2, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, l, ack.JobID, wire.JobRunning, 5*time.Second)
	if _, err := l.Cancel(context.Background(), ack.JobID, "test"); err != nil {
		t.Fatal(err)
	}
	waitJob(t, l, ack.JobID, wire.JobCancelled, 5*time.Second)
	// The cores come back, and a new job can use all of them.
	next, err := l.Submit(context.Background(), sleepJob(t, "after", 1, 4, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, l, next.JobID, wire.JobCompleted, 10*time.Second)
}
