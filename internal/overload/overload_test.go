package overload

import (
	"context"
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	th := DefaultThresholds()
	for _, tc := range []struct {
		name string
		lag  time.Duration
		lhm  int
		want Level
	}{
		{"idle", 5 * time.Millisecond, 0, Normal},
		{"lag elevated", 250 * time.Millisecond, 0, Elevated},
		{"lhm elevated", 0, 2, Elevated},
		{"lag high", 1200 * time.Millisecond, 1, High},
		{"lhm high", 10 * time.Millisecond, 4, High},
		{"lag critical", 4 * time.Second, 0, Critical},
		{"lhm critical beats lag high", 1500 * time.Millisecond, 6, Critical},
		{"the worse signal wins", 250 * time.Millisecond, 5, High},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Classify(tc.lag, tc.lhm, th)
			if r.Level != tc.want {
				t.Fatalf("Classify(%s, %d) = %s (%s), want %s", tc.lag, tc.lhm, r.Level, r.Reason, tc.want)
			}
			if (r.Level == Normal) != (r.Reason == "") {
				t.Fatalf("level %s with reason %q: a reason is given exactly when not NORMAL", r.Level, r.Reason)
			}
		})
	}
	if r := Classify(time.Hour, 100, Thresholds{}); r.Level != Normal {
		t.Fatalf("zero thresholds graded %s, want NORMAL (a zero threshold never triggers)", r.Level)
	}
}

// The probe keeps the worst lateness of its window, forgets it after, and
// counts a wake-up that is overdue right now.
func TestLagProbeWindow(t *testing.T) {
	now := time.Unix(1000, 0)
	p := NewLagProbe(100*time.Millisecond, time.Second)
	p.now = func() time.Time { return now }
	p.observe(now, 0)
	p.observe(now.Add(100*time.Millisecond), 700*time.Millisecond)
	now = now.Add(200 * time.Millisecond)
	p.observe(now, 0)
	if got := p.Lag(); got != 700*time.Millisecond {
		t.Fatalf("lag %s inside the window, want 700ms", got)
	}
	for range 12 {
		now = now.Add(100 * time.Millisecond)
		p.observe(now, 0)
	}
	if got := p.Lag(); got != 0 {
		t.Fatalf("lag %s once the late sample left the window, want 0", got)
	}
	now = now.Add(900 * time.Millisecond) // no wake-up for 900 ms: starved now
	if got := p.Lag(); got != 800*time.Millisecond {
		t.Fatalf("lag %s while overdue, want 800ms", got)
	}
}

// A real probe on an idle test process reads little lag, and Run returns
// when its context ends.
func TestLagProbeRuns(t *testing.T) {
	p := NewLagProbe(10*time.Millisecond, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		n := len(p.samples)
		p.mu.Unlock()
		if n >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	p.mu.Lock()
	n := len(p.samples)
	p.mu.Unlock()
	if n < 3 {
		t.Fatalf("%d samples in 10 s, want the probe ticking", n)
	}
}
