package security

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func mustReplayGuard(t testing.TB, cfg ReplayConfig) *ReplayGuard {
	t.Helper()
	g, err := NewReplayGuard(cfg)
	if err != nil {
		t.Fatalf("NewReplayGuard: %v", err)
	}
	return g
}

func TestReplayGuardWindow(t *testing.T) {
	const window = 60 * time.Second
	at := func(d time.Duration) func(time.Time) time.Time {
		return func(now time.Time) time.Time { return now.Add(d) }
	}
	tests := []struct {
		name string
		sent func(now time.Time) time.Time
		want error
	}{
		{"now", at(0), nil},
		{"a little late", at(-3 * time.Second), nil},
		{"a little early", at(3 * time.Second), nil},
		{"exactly window late", at(-window), nil},
		{"exactly window early", at(window), nil},
		{"just past the window late", at(-window - time.Nanosecond), ErrStale},
		{"just past the window early", at(window + time.Nanosecond), ErrStale},
		{"an hour late", at(-time.Hour), ErrStale},
		{"zero time", func(time.Time) time.Time { return time.Time{} }, ErrStale},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			g := mustReplayGuard(t, ReplayConfig{Window: window, Now: clk.Now})
			err := g.Check("node-a", 1, tt.sent(clk.Now()))
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("Check = %v, want %v", err, tt.want)
			}
			wantLen := 0
			if tt.want == nil {
				wantLen = 1
			}
			if g.Len() != wantLen {
				t.Errorf("Len = %d, want %d", g.Len(), wantLen)
			}
		})
	}
}

func TestReplayGuardRefusesReplays(t *testing.T) {
	clk := newFakeClock()
	g := mustReplayGuard(t, ReplayConfig{Now: clk.Now})
	now := clk.Now()
	steps := []struct {
		sender string
		id     uint64
		sent   time.Time
		want   error
	}{
		{"node-a", 1, now, nil},
		{"node-a", 1, now, ErrReplay},
		{"node-a", 2, now, nil},
		{"node-b", 1, now, nil}, // ids are per sender
		{"node-b", 1, now, ErrReplay},
		{"node-a", 3, now.Add(-59 * time.Second), nil},
		{"node-a", 3, now.Add(-59 * time.Second), ErrReplay},
	}
	for i, st := range steps {
		if err := g.Check(st.sender, st.id, st.sent); !errors.Is(err, st.want) || (st.want == nil && err != nil) {
			t.Fatalf("step %d Check(%s, %d) = %v, want %v", i, st.sender, st.id, err, st.want)
		}
	}
	if g.Len() != 4 {
		t.Errorf("Len = %d, want 4", g.Len())
	}

	// Inside the window the id is remembered; a moment later it is outside
	// the window and refused as stale instead. Either way, never accepted.
	clk.Advance(59 * time.Second)
	if err := g.Check("node-a", 1, now); !errors.Is(err, ErrReplay) {
		t.Fatalf("replay near the end of the window: %v, want ErrReplay", err)
	}
	clk.Advance(2 * time.Second)
	if err := g.Check("node-a", 1, now); !errors.Is(err, ErrStale) {
		t.Fatalf("replay after the window: %v, want ErrStale", err)
	}
	if g.Len() != 0 {
		t.Errorf("Len = %d after the window passed, want 0 (memory not released)", g.Len())
	}
}

// TestReplayGuardClockStepsBack: after ids have expired from memory, a clock
// stepping back would put them inside the window again. The floor must
// still refuse them.
func TestReplayGuardClockStepsBack(t *testing.T) {
	clk := newFakeClock()
	g := mustReplayGuard(t, ReplayConfig{Window: 10 * time.Second, Now: clk.Now})
	start := clk.Now()
	if err := g.Check("node-a", 1, start); err != nil {
		t.Fatalf("first Check: %v", err)
	}
	clk.Advance(30 * time.Second)
	if g.Len() != 0 {
		t.Fatalf("Len = %d, want 0 once expired", g.Len())
	}
	clk.Set(start)
	if err := g.Check("node-a", 1, start); !errors.Is(err, ErrStale) {
		t.Fatalf("replay after the clock stepped back: %v, want ErrStale", err)
	}
}

func TestReplayGuardEvictionRaisesFloor(t *testing.T) {
	clk := newFakeClock()
	g := mustReplayGuard(t, ReplayConfig{MaxEntries: 4, Now: clk.Now})
	now := clk.Now()
	ago := func(s int) time.Time { return now.Add(-time.Duration(s) * time.Second) }
	steps := []struct {
		name    string
		id      uint64
		sent    time.Time
		want    error
		wantLen int
	}{
		{"fill 1", 1, ago(50), nil, 1},
		{"fill 2", 2, ago(40), nil, 2},
		{"fill 3", 3, ago(30), nil, 3},
		{"fill 4", 4, ago(20), nil, 4},
		{"full: evicts the bucket of id 1", 5, ago(10), nil, 4},
		{"replay of evicted id 1 is refused", 1, ago(50), ErrStale, 4},
		{"fresh id older than the floor is refused", 6, ago(55), ErrStale, 4},
		{"fresh id in the evicted second is refused", 7, ago(50), ErrStale, 4},
		{"full, fresh id older than all remembered: evicts id 2, then refused", 8, ago(45), ErrStale, 3},
		{"fresh id above the new floor", 9, ago(35), nil, 4},
		{"replay of evicted id 2 is refused", 2, ago(40), ErrStale, 4},
		{"remembered id 3 is a replay", 3, ago(30), ErrReplay, 4},
	}
	for _, st := range steps {
		err := g.Check("node-a", st.id, st.sent)
		if !errors.Is(err, st.want) || (st.want == nil && err != nil) {
			t.Fatalf("%s: Check(%d) = %v, want %v", st.name, st.id, err, st.want)
		}
		if g.Len() != st.wantLen {
			t.Fatalf("%s: Len = %d, want %d", st.name, g.Len(), st.wantLen)
		}
	}
}

// TestReplayGuardOverloadInOneSecond: more ids than MaxEntries inside one
// bucket. Eviction must drop the very bucket the ids live in, and the floor
// then refuses all of them.
func TestReplayGuardOverloadInOneSecond(t *testing.T) {
	clk := newFakeClock()
	g := mustReplayGuard(t, ReplayConfig{MaxEntries: 3, Now: clk.Now})
	now := clk.Now()
	for id := range uint64(3) {
		if err := g.Check("node-a", id, now); err != nil {
			t.Fatalf("Check(%d): %v", id, err)
		}
	}
	if err := g.Check("node-a", 3, now); !errors.Is(err, ErrStale) {
		t.Fatalf("Check over capacity in one bucket = %v, want ErrStale", err)
	}
	for id := range uint64(4) {
		if err := g.Check("node-a", id, now); err == nil {
			t.Fatalf("Check(%d) accepted after its bucket was evicted", id)
		}
	}
	if err := g.Check("node-a", 100, now.Add(time.Second)); err != nil {
		t.Fatalf("next second refused: %v", err)
	}
}

// TestReplayGuardNeverAcceptsReplay drives a small guard through random
// traffic, clock jumps (both ways) and replays of everything it ever
// accepted. It must never accept one twice and never exceed MaxEntries.
func TestReplayGuardNeverAcceptsReplay(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4, 5} {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed))
			clk := newFakeClock()
			const maxEntries = 64
			window := 10 * time.Second
			g := mustReplayGuard(t, ReplayConfig{Window: window, MaxEntries: maxEntries, Now: clk.Now})
			type msg struct {
				sender string
				id     uint64
				sent   time.Time
			}
			var accepted []msg
			fresh := 0
			for i := range uint64(20000) {
				switch r := rng.IntN(1000); {
				case r < 2:
					clk.Advance(-time.Duration(rng.Int64N(int64(2 * window))))
				case r < 200:
					clk.Advance(time.Duration(rng.Int64N(int64(window / 10))))
				}
				var m msg
				replay := len(accepted) > 0 && rng.IntN(3) == 0
				if replay {
					m = accepted[rng.IntN(len(accepted))]
				} else {
					// Mostly small clock skew, sometimes anywhere in
					// (or just outside) the window.
					spread := int64(2 * time.Second)
					if rng.IntN(10) == 0 {
						spread = int64(2*window + 2*time.Second)
					}
					offset := time.Duration(rng.Int64N(spread) - spread/2)
					m = msg{sender: fmt.Sprintf("node-%d", rng.IntN(3)), id: i, sent: clk.Now().Add(offset)}
				}
				err := g.Check(m.sender, m.id, m.sent)
				if replay && err == nil {
					t.Fatalf("step %d: replay of %s/%d sent %s accepted", i, m.sender, m.id, m.sent)
				}
				if err != nil && !errors.Is(err, ErrReplay) && !errors.Is(err, ErrStale) {
					t.Fatalf("step %d: unexpected error %v", i, err)
				}
				if !replay && err == nil {
					accepted = append(accepted, m)
					fresh++
				}
				if n := g.Len(); n > maxEntries {
					t.Fatalf("step %d: Len = %d, bound %d", i, n, maxEntries)
				}
			}
			t.Logf("%d fresh messages accepted", fresh)
			if fresh < 5000 {
				t.Fatalf("only %d fresh messages accepted; the guard refuses too much", fresh)
			}
		})
	}
}

// TestReplayGuardConcurrent has many goroutines race to deliver the same
// ids; each must be accepted exactly once. It runs the sharded layout
// (default size) and a small guard that evicts constantly.
func TestReplayGuardConcurrent(t *testing.T) {
	for _, maxEntries := range []int{0, 100} {
		t.Run(fmt.Sprintf("MaxEntries=%d", maxEntries), func(t *testing.T) {
			clk := newFakeClock()
			g := mustReplayGuard(t, ReplayConfig{MaxEntries: maxEntries, Now: clk.Now})
			const senders, ids, racers = 3, 2000, 6
			var accepted [senders][ids]atomic.Int32
			var wg sync.WaitGroup
			for r := range racers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range ids {
						for s := range senders {
							if r == 0 && i%100 == 0 {
								clk.Advance(time.Millisecond)
							}
							sent := clk.Now()
							if g.Check(fmt.Sprintf("node-%d", s), uint64(i), sent) == nil {
								accepted[s][i].Add(1)
							}
						}
					}
				}()
			}
			wg.Wait()
			for s := range senders {
				for i := range ids {
					n := accepted[s][i].Load()
					if n > 1 {
						t.Fatalf("node-%d id %d accepted %d times", s, i, n)
					}
					if maxEntries == 0 && n != 1 {
						t.Fatalf("node-%d id %d accepted %d times, want 1", s, i, n)
					}
				}
			}
		})
	}
}

func TestReplayConfigValidate(t *testing.T) {
	_, err := NewReplayGuard(ReplayConfig{Window: -time.Second, MaxEntries: -1})
	if err == nil {
		t.Fatal("negative settings accepted")
	}
	for _, field := range []string{"Window", "MaxEntries"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error %q does not name %s", err, field)
		}
	}
}

// BenchmarkReplayCheck measures Check from parallel receivers at a steady
// 16k messages a second of virtual time: the guard holds about a million ids
// and expires a bucket a second, as on a busy node.
func BenchmarkReplayCheck(b *testing.B) {
	const perMessage = 60 * time.Microsecond // virtual time between messages
	var tick atomic.Int64
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	g := mustReplayGuard(b, ReplayConfig{Now: func() time.Time {
		return base.Add(time.Duration(tick.Load()) * perMessage)
	}})
	var senders atomic.Int32
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		sender := fmt.Sprintf("node-%d", senders.Add(1))
		for pb.Next() {
			n := tick.Add(1)
			if err := g.Check(sender, uint64(n), base.Add(time.Duration(n)*perMessage)); err != nil {
				b.Errorf("Check: %v", err)
				return
			}
		}
	})
	b.ReportMetric(float64(g.Len()), "ids")
}
