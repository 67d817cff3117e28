package rainstorm

import (
	"testing"
	"time"

	"tempest/workflow"
)

// DueBy is DueAt's inverse: the records due by a time, through a ramp,
// capped at the input's size.
func TestGenerateDueBy(t *testing.T) {
	g := &Generate{Records: 100_000, Stages: []workflow.Stage{
		{Duration: 10 * time.Second, Target: 1000}, // 5,000 records
		{Duration: 10 * time.Second, Target: 1000}, // 10,000 more
	}}
	for _, c := range []struct {
		at   time.Duration
		want uint64
	}{{0, 1}, {10 * time.Second, 5001}, {20 * time.Second, 15001}, {30 * time.Second, 25001}, {time.Hour, 100_000}} {
		if got := g.DueBy(c.at); got < c.want-1 || got > c.want {
			t.Errorf("DueBy(%s) = %d, want %d", c.at, got, c.want)
		}
	}
	for k := uint64(0); k < 30_000; k += 997 {
		if got := g.DueBy(g.DueAt(k)); got <= k {
			t.Fatalf("record %d is due at %s, yet DueBy then is %d", k, g.DueAt(k), got)
		}
	}
	if got := (&Generate{Records: 7}).DueBy(0); got != 7 {
		t.Fatalf("an unpaced source has all %d records due at once, got %d", 7, got)
	}
}
