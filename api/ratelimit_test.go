package api

import (
	"math"
	"sync"
	"testing"
	"time"
)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestIPLimiter(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	l := newIPLimiter(2, 3, clock.Now) // 2/s, burst 3

	type step struct {
		advance   time.Duration
		ip        string
		wantOK    bool
		wantAfter time.Duration
	}
	steps := []step{
		{0, "a", true, 0},
		{0, "a", true, 0},
		{0, "a", true, 0},
		{0, "a", false, 500 * time.Millisecond}, // burst spent; one token per 500ms
		{0, "b", true, 0},                       // another client has its own bucket
		{0, "a", false, 500 * time.Millisecond}, // a refusal does not push the wait further
		{500 * time.Millisecond, "a", true, 0},
		{0, "a", false, 500 * time.Millisecond},
	}
	for i, s := range steps {
		clock.Advance(s.advance)
		ok, after := l.allow(s.ip)
		if ok != s.wantOK || after != s.wantAfter {
			t.Fatalf("step %d (%s): allow = %v, %v; want %v, %v", i, s.ip, ok, after, s.wantOK, s.wantAfter)
		}
	}
}

func TestIPLimiterForgetsIdleClients(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	l := newIPLimiter(10, 10, clock.Now) // refills in 1s
	for _, ip := range []string{"a", "b", "c"} {
		l.allow(ip)
	}
	if n := l.size(); n != 3 {
		t.Fatalf("size %d, want 3", n)
	}
	clock.Advance(sweepEvery + time.Second)
	l.allow("d")
	if n := l.size(); n != 1 {
		t.Fatalf("size %d after everyone but d idled past a refill, want 1", n)
	}
}

func TestIPLimiterUnlimited(t *testing.T) {
	l := newIPLimiter(math.Inf(1), 1, time.Now)
	for range 1000 {
		if ok, _ := l.allow("a"); !ok {
			t.Fatal("unlimited limiter refused")
		}
	}
}
