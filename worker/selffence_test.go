package worker

import (
	"fmt"
	"testing"
	"time"

	"tempest/testutil"
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
