// Package overload grades how starved a node is, NORMAL to CRITICAL, from
// two signals it cannot fake to itself: how late its own timers fire
// (scheduler lag: the Go runtime, the host's CPU, a SIGSTOP all show up
// there) and Lifeguard's local health score (probes it missed). Each role
// decides what a level costs it: a manager leader steps down at HIGH so a
// healthier peer leads, and at CRITICAL new work is refused with a
// retry-after rather than accepted and then lost.
package overload

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Level is how degraded a node is.
type Level int

const (
	Normal Level = iota
	Elevated
	High
	Critical
)

func (l Level) String() string {
	switch l {
	case Normal:
		return "NORMAL"
	case Elevated:
		return "ELEVATED"
	case High:
		return "HIGH"
	case Critical:
		return "CRITICAL"
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

// Thresholds are the lag and health score at which each level starts. A
// zero field never triggers its level on that signal.
type Thresholds struct {
	ElevatedLag time.Duration `yaml:"elevated_lag"`
	HighLag     time.Duration `yaml:"high_lag"`
	CriticalLag time.Duration `yaml:"critical_lag"`
	ElevatedLHM int           `yaml:"elevated_lhm"`
	HighLHM     int           `yaml:"high_lhm"`
	CriticalLHM int           `yaml:"critical_lhm"`
}

// DefaultThresholds suit a node whose control loops tick every few hundred
// milliseconds: lag past a fifth of a second is worth noting, past a second
// heartbeats and probes go out late enough to cost leases, and past three
// seconds a node cannot keep any promise it makes. (A loaded CI host running
// the race detector sees a few hundred milliseconds now and then; HIGH is
// kept above that, since it moves leadership.)
// The health score's steps follow Lifeguard's: each missed probe or
// refuted suspicion adds one.
func DefaultThresholds() Thresholds {
	return Thresholds{
		ElevatedLag: 200 * time.Millisecond, HighLag: time.Second, CriticalLag: 3 * time.Second,
		ElevatedLHM: 2, HighLHM: 4, CriticalLHM: 6,
	}
}

// Reading is one grading: the level and what put the node there.
type Reading struct {
	Level  Level
	Lag    time.Duration
	LHM    int
	Reason string // empty at NORMAL
}

// Classify grades lag and lhm against t: the worse of the two signals.
func Classify(lag time.Duration, lhm int, t Thresholds) Reading {
	r := Reading{Lag: lag, LHM: lhm}
	grade := func(l Level, lagAt time.Duration, lhmAt int) {
		switch {
		case r.Level >= l:
		case lagAt > 0 && lag >= lagAt:
			r.Level, r.Reason = l, fmt.Sprintf("scheduler lag %s ≥ %s", lag.Round(time.Millisecond), lagAt)
		case lhmAt > 0 && lhm >= lhmAt:
			r.Level, r.Reason = l, fmt.Sprintf("local health score %d ≥ %d", lhm, lhmAt)
		}
	}
	grade(Critical, t.CriticalLag, t.CriticalLHM)
	grade(High, t.HighLag, t.HighLHM)
	grade(Elevated, t.ElevatedLag, t.ElevatedLHM)
	return r
}

// LagProbe measures scheduler lag: a goroutine asks to wake every Interval
// and records how late it woke. Lag is the worst lateness over the last
// Window, so one starved moment keeps the node degraded for a while rather
// than flapping it between levels on every tick.
type LagProbe struct {
	interval time.Duration
	window   time.Duration
	now      func() time.Time

	mu      sync.Mutex
	samples []sample // within window, oldest first
}

type sample struct {
	at   time.Time
	late time.Duration
}

// NewLagProbe returns a probe ticking every interval (100 ms when zero) and
// remembering window (3 s when zero).
func NewLagProbe(interval, window time.Duration) *LagProbe {
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	if window <= 0 {
		window = 3 * time.Second
	}
	return &LagProbe{interval: interval, window: window, now: time.Now}
}

// Run ticks until ctx ends. Its caller owns the goroutine.
func (p *LagProbe) Run(ctx context.Context) {
	next := p.now().Add(p.interval)
	t := time.NewTimer(p.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := p.now()
		p.observe(now, max(now.Sub(next), 0))
		next = now.Add(p.interval)
		t.Reset(p.interval)
	}
}

func (p *LagProbe) observe(at time.Time, late time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.samples = append(p.samples, sample{at: at, late: late})
	cut := 0
	for cut < len(p.samples) && at.Sub(p.samples[cut].at) > p.window {
		cut++
	}
	p.samples = p.samples[cut:]
}

// Lag is the worst lateness seen over the window, as of now: a probe that
// has not woken for longer than its interval (the process is starved right
// now) counts the time it has been waiting.
func (p *LagProbe) Lag() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	var worst time.Duration
	for _, s := range p.samples {
		if now.Sub(s.at) <= p.window && s.late > worst {
			worst = s.late
		}
	}
	if n := len(p.samples); n > 0 {
		if overdue := now.Sub(p.samples[n-1].at) - p.interval; overdue > worst {
			worst = overdue
		}
	}
	return worst
}
