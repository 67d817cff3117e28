package worker

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
)

// A worker cut off from every manager stops its running workflows after
// FenceAfter, reports them CANCELLED once a manager answers again, and says
// why; while a leader answers, even a quiet workflow keeps running.
func TestWorkerFencesItselfWhenCutOff(t *testing.T) {
	h := startHarness(t, harnessOption{cfg: func(c *Config) { c.FenceAfter = 400 * time.Millisecond }})
	h.waitRegistered(t, h.m)
	h.m.mustStart(t, "w1", dispatchOf("j", "quiet", sleepSpec(t, time.Hour, 1), 1))
	// With the leader answering, several fence periods pass and the sleep,
	// which reports nothing by itself, keeps running: keep-alives carry it.
	for range 4 {
		n := len(h.m.progressOf("quiet"))
		testutil.Eventually(t, waitFor, pollStep, func() error {
			if len(h.m.progressOf("quiet")) <= n {
				return fmt.Errorf("no keep-alive progress yet")
			}
			return nil
		})
	}
	if _, ok := h.m.final("quiet"); ok {
		t.Fatal("a workflow whose leader answers was stopped")
	}
	h.hub.Isolate("w1")
	testutil.Eventually(t, waitFor, pollStep, func() error {
		p, ok := h.w.Snapshot().ActiveWorkflows["quiet"]
		if !ok || !p.Final || p.Status != wire.WorkflowCancelled {
			return fmt.Errorf("quiet is %+v", p)
		}
		return nil
	})
	h.hub.Heal()
	p := h.m.waitFinal(t, "quiet")
	if p.Status != wire.WorkflowCancelled {
		t.Fatalf("final after fencing: %+v", p)
	}
}

// A leader cut off from its peer managers may go on acknowledging progress
// until its check-quorum, counted in ticks that lag on a loaded machine,
// makes it step down; meanwhile a majority elects a successor that re-runs
// the work. The worker therefore counts its contact from when the leader
// was last confirmed by a majority (the ack's QuorumAge), and fences itself
// FenceAfter after that even while the acks keep coming. While the age
// stays small, the same acks keep even a quiet workflow running.
func TestWorkerFencesItselfWhileStaleLeaderAcks(t *testing.T) {
	h := startHarness(t, harnessOption{cfg: func(c *Config) { c.FenceAfter = 400 * time.Millisecond }})
	var mu sync.Mutex
	var lostQuorum time.Time // zero while the leader's peers answer it
	h.m.setProgress(func(p *wire.WorkflowProgress) (wire.Message, error) {
		mu.Lock()
		since := lostQuorum
		mu.Unlock()
		age := 5 * time.Millisecond // a heartbeat round, as on a healthy leader
		if !since.IsZero() {
			age = time.Since(since)
		}
		return &wire.ProgressAck{WorkflowID: p.WorkflowID, QuorumAge: age}, nil
	})
	h.waitRegistered(t, h.m)
	h.m.mustStart(t, "w1", dispatchOf("j", "quiet", sleepSpec(t, time.Hour, 1), 1))
	waitKeepAlives := func(rounds int) {
		t.Helper()
		for range rounds {
			n := len(h.m.progressOf("quiet"))
			testutil.Eventually(t, waitFor, pollStep, func() error {
				if len(h.m.progressOf("quiet")) <= n {
					return fmt.Errorf("no keep-alive progress yet")
				}
				return nil
			})
		}
	}
	waitKeepAlives(4)
	if p, ok := h.w.Snapshot().ActiveWorkflows["quiet"]; !ok || p.Final {
		t.Fatalf("a workflow whose leader has a fresh quorum was stopped: %+v", p)
	}
	mu.Lock()
	lostQuorum = time.Now()
	mu.Unlock()
	// The same leader acknowledges the final too, so the worker hands it
	// over and forgets the workflow: the manager's record tells the story.
	p := h.m.waitFinal(t, "quiet")
	if p.Status != wire.WorkflowCancelled || !strings.Contains(p.Error, "fenced") {
		t.Fatalf("final after the leader lost its quorum: %+v", p)
	}
	// It fenced while its progress was still being acknowledged: the
	// leader answered reports sent after it lost its quorum.
	answered := 0
	for _, p := range h.m.progressOf("quiet") {
		if !p.Final && time.Unix(0, p.Timestamp).After(lostQuorum) {
			answered++
		}
	}
	if answered == 0 {
		t.Fatal("no progress was acknowledged after the leader lost its quorum; the test proves nothing")
	}
}

func TestAckedContact(t *testing.T) {
	base := time.Unix(1_000_000, 0)
	tests := []struct {
		name      string
		sent, now time.Time
		age       time.Duration
		want      time.Time
	}{
		{"fresh quorum: the send time", base, base.Add(time.Second), 0, base},
		{"the age counts back from the send", base, base.Add(time.Second), 3 * time.Second, base.Add(-3 * time.Second)},
		{"a negative age counts as none", base, base.Add(time.Second), -time.Second, base},
		{"never later than now", base.Add(time.Second), base, 0, base},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ackedContact(tc.sent, tc.now, tc.age); !got.Equal(tc.want) {
				t.Fatalf("ackedContact = %v, want %v", got, tc.want)
			}
		})
	}
	var c contactClock
	c.touch(base.Add(time.Second))
	c.touch(base) // a late ack vouching for an earlier moment
	if got := c.since(base.Add(2 * time.Second)); got != time.Second {
		t.Fatalf("contact moved backwards: since = %v, want 1s", got)
	}
}
