package manager

import (
	"errors"
	"math"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
)

// A HIGH leader hands its leadership to a less degraded peer, and does not
// stand again while one exists; while every manager is HIGH (no peer is
// known to be healthier) the group keeps its leader. Here every manager
// grades itself HIGH on any scheduler lag at all; the leader then learns,
// from its peers' heartbeats, that they are NORMAL.
func TestOverloadedLeaderHandsOverToAHealthierPeer(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.Overload.HighLag = time.Nanosecond
		cfg.Overload.CriticalLag = time.Hour
	})
	l := c.leader()
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if lvl := l.loadReading().Level; lvl.String() != "HIGH" {
			return errors.New("leader graded " + lvl.String() + ", want HIGH")
		}
		return nil
	})
	if c.leader() != l {
		t.Fatal("leadership moved while no manager was known to be healthier than the leader")
	}

	for v, id := range c.ids {
		if id != l.ID() {
			l.managers.heartbeat(&wire.ManagerHeartbeat{NodeID: id, Version: math.MaxUint64 - uint64(len(c.ids)) + uint64(v), Load: 0})
		}
	}
	next := c.leader()
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		if next = c.leader(); next == l {
			return errors.New("the HIGH leader still leads")
		}
		return nil
	})
	st, err := l.Cluster(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if self := st.Nodes[0]; self.Load != "HIGH" || self.LoadReason == "" {
		t.Fatalf("the overloaded manager shows load %q (%q), want HIGH with its reason", self.Load, self.LoadReason)
	}
}

// A CRITICAL leader refuses a new job before storing it, with a
// retry-after, rather than accept work it cannot carry.
func TestCriticalLeaderRefusesNewJobs(t *testing.T) {
	c := newTestCluster(t, 1, func(cfg *Config) {
		cfg.Overload.CriticalLag = time.Nanosecond
	})
	l := c.leader()
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if lvl := l.loadReading().Level; lvl.String() != "CRITICAL" {
			return errors.New("graded " + lvl.String())
		}
		return nil
	})
	_, err := l.Submit(t.Context(), sleepJob(t, "refused", 1, 1, time.Millisecond))
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeUnavailable || we.RetryAfter <= 0 {
		t.Fatalf("submit to a CRITICAL leader: %v, want unavailable with a retry-after", err)
	}
	if jobs, _ := l.Jobs(t.Context()); len(jobs) != 0 {
		t.Fatalf("the refused job was stored: %+v", jobs)
	}
}
