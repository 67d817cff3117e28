package worker

import (
	"strings"
	"testing"
	"time"

	"tempest/wire"
)

// A dispatch names its worker; one addressed to another worker (an insider
// replaying a captured dispatch here) is refused and nothing starts.
func TestDispatchForAnotherWorkerRefused(t *testing.T) {
	h := startHarness(t, harnessOption{})
	d := dispatchOf("j", "wf", sleepSpec(t, time.Minute, 1), 10)
	d.Worker = "w2"
	_, err := h.m.dispatch(t, "w1", d)
	if wire.CodeOf(err) != wire.CodeRejected || !strings.Contains(err.Error(), "addressed to worker w2") {
		t.Fatalf("dispatch for w2 at w1: %v, want rejected", err)
	}
	d.Worker = "w1"
	h.m.mustStart(t, "w1", d)
}
