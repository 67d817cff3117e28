package security

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	classControl = iota
	classBulk
	classFree
	numTestClasses
)

func testLimits() []Limit {
	return []Limit{
		classControl: {PerSecond: 10, Burst: 5},
		classBulk:    {PerSecond: 1000, Burst: 100},
		classFree:    {PerSecond: 0},
	}
}

func mustRateLimiter(t testing.TB, cfg RateLimitConfig) *RateLimiter {
	t.Helper()
	r, err := NewRateLimiter(cfg)
	if err != nil {
		t.Fatalf("NewRateLimiter: %v", err)
	}
	return r
}

func TestRateLimiterFloodFromOneSource(t *testing.T) {
	clk := newFakeClock()
	r := mustRateLimiter(t, RateLimitConfig{Limits: testLimits(), Now: clk.Now})
	for i := range 5 {
		if ok, _ := r.Allow("10.0.0.1:4000", classControl); !ok {
			t.Fatalf("message %d within the burst refused", i)
		}
	}
	ok, retry := r.Allow("10.0.0.1:4000", classControl)
	if ok {
		t.Fatal("message past the burst allowed")
	}
	// 10 tokens a second: the next one is 100ms away.
	if retry != 100*time.Millisecond {
		t.Fatalf("retryAfter = %s, want 100ms", retry)
	}
	if ok, _ := r.Allow("10.0.0.2:4000", classControl); !ok {
		t.Fatal("a quiet source was refused because another flooded")
	}
	if ok, _ := r.Allow("10.0.0.1:4000", classBulk); !ok {
		t.Fatal("a flood in one class refused another class")
	}
	// A refusal takes no token, so waiting exactly retryAfter is enough.
	clk.Advance(retry - time.Millisecond)
	if ok, _ := r.Allow("10.0.0.1:4000", classControl); ok {
		t.Fatal("allowed before retryAfter passed")
	}
	clk.Advance(time.Millisecond)
	if ok, _ := r.Allow("10.0.0.1:4000", classControl); !ok {
		t.Fatal("refused after waiting retryAfter")
	}
}

func TestRateLimiterRetryAfter(t *testing.T) {
	tests := []struct {
		name    string
		limit   Limit
		elapsed time.Duration // after the burst is spent
		want    time.Duration
	}{
		{"empty bucket, 10/s", Limit{PerSecond: 10, Burst: 1}, 0, 100 * time.Millisecond},
		{"part refilled, 10/s", Limit{PerSecond: 10, Burst: 1}, 40 * time.Millisecond, 60 * time.Millisecond},
		{"slow class, 1 per minute", Limit{PerSecond: 1.0 / 60, Burst: 3}, 15 * time.Second, 45 * time.Second},
		{"fast class, 20k/s", Limit{PerSecond: 20_000, Burst: 4_000}, 0, 50 * time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			r := mustRateLimiter(t, RateLimitConfig{Limits: []Limit{tt.limit}, Now: clk.Now})
			for range tt.limit.Burst {
				if ok, _ := r.Allow("peer", 0); !ok {
					t.Fatal("burst refused")
				}
			}
			clk.Advance(tt.elapsed)
			ok, retry := r.Allow("peer", 0)
			if ok {
				t.Fatal("allowed with an empty bucket")
			}
			if d := retry - tt.want; d < -time.Microsecond || d > time.Microsecond {
				t.Fatalf("retryAfter = %s, want %s", retry, tt.want)
			}
		})
	}
}

func TestRateLimiterUnlimitedAndUnknownClasses(t *testing.T) {
	r := mustRateLimiter(t, RateLimitConfig{Limits: testLimits(), Now: newFakeClock().Now})
	for range 10_000 {
		if ok, _ := r.Allow("peer", classFree); !ok {
			t.Fatal("unlimited class refused")
		}
	}
	if r.Len() != 0 {
		t.Errorf("unlimited class tracked %d sources, want 0", r.Len())
	}
	for _, class := range []int{-1, numTestClasses, 1 << 20} {
		if ok, retry := r.Allow("peer", class); ok || retry != 0 {
			t.Errorf("class %d: Allow = %v, %s; want refused with retryAfter 0", class, ok, retry)
		}
	}
}

func TestRateLimiterLRUBound(t *testing.T) {
	clk := newFakeClock()
	r := mustRateLimiter(t, RateLimitConfig{
		Limits:     []Limit{{PerSecond: 1, Burst: 1}},
		MaxSources: 3,
		Now:        clk.Now,
	})
	allow := func(remote string) bool { ok, _ := r.Allow(remote, 0); return ok }
	// a, b and c each spend their one token.
	for _, remote := range []string{"a", "b", "c"} {
		if !allow(remote) {
			t.Fatalf("%s's first message refused", remote)
		}
	}
	// a is seen again (and refused), so b is now the least recently seen.
	if allow("a") {
		t.Fatal("a allowed twice without refill")
	}
	if !allow("d") {
		t.Fatal("new source d refused")
	}
	if r.Len() != 3 {
		t.Fatalf("Len = %d, want the bound 3", r.Len())
	}
	// b was forgotten, so it has a full bucket again; a and c were kept and
	// are still empty.
	if !allow("b") {
		t.Error("b was not the one evicted")
	}
	if allow("a") {
		t.Error("a was evicted although recently seen")
	}
	for i := range 1000 {
		allow(fmt.Sprintf("spray-%d", i))
		if r.Len() > 3 {
			t.Fatalf("Len = %d exceeds MaxSources 3", r.Len())
		}
	}
}

func TestRateLimiterConcurrent(t *testing.T) {
	clk := newFakeClock()
	r := mustRateLimiter(t, RateLimitConfig{
		Limits:     []Limit{{PerSecond: 100, Burst: 50}, {PerSecond: 0}},
		MaxSources: 16 * 256, // sharded layout
		Now:        clk.Now,
	})
	const goroutines, perGoroutine = 8, 2000
	var allowed [4]atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perGoroutine {
				src := i % len(allowed)
				if ok, retry := r.Allow(fmt.Sprintf("10.0.0.%d:1", src), 0); ok {
					allowed[src].Add(1)
				} else if retry <= 0 {
					t.Errorf("refused with retryAfter %s", retry)
					return
				}
				r.Allow(fmt.Sprintf("spray-%d-%d", g, i), 1)
			}
		}()
	}
	wg.Wait()
	// The clock never moved, so each source got exactly its burst.
	for src := range allowed {
		if n := allowed[src].Load(); n != 50 {
			t.Errorf("source %d allowed %d messages, want the burst of 50", src, n)
		}
	}
}

func TestRateLimitConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  RateLimitConfig
		want []string // fragments the error must contain; nil means valid
	}{
		{"default", DefaultRateLimitConfig(4), nil},
		{"unlimited needs no burst", RateLimitConfig{Limits: []Limit{{PerSecond: 0, Burst: 0}}}, nil},
		{"negative rate", RateLimitConfig{Limits: []Limit{{PerSecond: -1, Burst: 1}}}, []string{"Limits[0].PerSecond"}},
		{"infinite rate", RateLimitConfig{Limits: []Limit{{PerSecond: math.Inf(1), Burst: 1}}}, []string{"Limits[0].PerSecond"}},
		{"NaN rate", RateLimitConfig{Limits: []Limit{{PerSecond: math.NaN(), Burst: 1}}}, []string{"Limits[0].PerSecond"}},
		{"zero burst", RateLimitConfig{Limits: []Limit{{PerSecond: 1}, {PerSecond: 5, Burst: 0}}}, []string{"Limits[0].Burst", "Limits[1].Burst"}},
		{"negative sources and burst, all reported", RateLimitConfig{Limits: []Limit{{PerSecond: 1, Burst: -3}}, MaxSources: -1}, []string{"Limits[0].Burst", "MaxSources"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewRateLimiter(tt.cfg)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("NewRateLimiter refused a valid config: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("NewRateLimiter accepted an invalid config")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %s", err, w)
				}
			}
		})
	}
}

func TestDefaultRateLimitConfig(t *testing.T) {
	cfg := DefaultRateLimitConfig(3)
	if len(cfg.Limits) != 3 {
		t.Fatalf("%d limits, want 3", len(cfg.Limits))
	}
	for i, l := range cfg.Limits {
		// Generous by design: a busy manager fans out thousands of progress
		// messages a second to one peer.
		if l.PerSecond < 10_000 || l.Burst < 1_000 {
			t.Errorf("class %d limit %+v is too tight for a busy cluster", i, l)
		}
	}
}

func BenchmarkRateLimiterAllow(b *testing.B) {
	r := mustRateLimiter(b, DefaultRateLimitConfig(4))
	remotes := make([]string, 1024)
	for i := range remotes {
		remotes[i] = fmt.Sprintf("10.0.%d.%d:7946", i/256, i%256)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * 7919
		for pb.Next() {
			i++
			r.Allow(remotes[i%len(remotes)], i%4)
		}
	})
}
