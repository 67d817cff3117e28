package rounds

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tempest/internal/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

// Group commit: a call finding fewer than inflight rounds running starts
// one at once, alone; calls arriving while inflight rounds run wait and go
// together, at most max to a round, in as few rounds as max allows; every
// call gets its own answer; never more than inflight rounds run at once.
func TestRoundsGroupCommit(t *testing.T) {
	for _, tc := range []struct {
		inflight, max, queued int
		wantQueuedRounds      int
	}{
		{inflight: 1, max: 8, queued: 29, wantQueuedRounds: 4},
		{inflight: 2, max: 8, queued: 29, wantQueuedRounds: 4},
		{inflight: 2, max: 64, queued: 29, wantQueuedRounds: 1},
		{inflight: 3, max: 10, queued: 30, wantQueuedRounds: 3},
	} {
		t.Run(fmt.Sprintf("inflight%d-max%d-queued%d", tc.inflight, tc.max, tc.queued), func(t *testing.T) {
			var inFlight, most, runs atomic.Int32
			var sizes sync.Map // round number → calls in it
			release := make(chan struct{})
			r := New(tc.inflight, tc.max, func(_ context.Context, in []int) []int {
				n := runs.Add(1)
				sizes.Store(n, len(in))
				cur := inFlight.Add(1)
				defer inFlight.Add(-1)
				for {
					m := most.Load()
					if cur <= m || most.CompareAndSwap(m, cur) {
						break
					}
				}
				if n <= int32(tc.inflight) {
					<-release // the first rounds are slow: the others queue behind them
				}
				out := make([]int, len(in))
				for i, v := range in {
					out[i] = v * 10
				}
				return out
			})
			n := tc.inflight + tc.queued
			got := make([]int, n)
			var wg sync.WaitGroup
			// The first inflight calls each start a round of their own at
			// once: nothing waits for an idle slot.
			for i := range tc.inflight {
				wg.Go(func() { got[i] = r.Do(context.Background(), i) })
				testutil.Eventually(t, 5*time.Second, time.Millisecond, func() error {
					if int(runs.Load()) != i+1 {
						return fmt.Errorf("%d rounds started, want %d", runs.Load(), i+1)
					}
					return nil
				})
			}
			for i := tc.inflight; i < n; i++ {
				wg.Go(func() { got[i] = r.Do(context.Background(), i) })
			}
			testutil.Eventually(t, 5*time.Second, time.Millisecond, func() error {
				r.mu.Lock()
				defer r.mu.Unlock()
				if len(r.queue) != tc.queued {
					return fmt.Errorf("%d calls queued, want %d", len(r.queue), tc.queued)
				}
				return nil
			})
			if runs.Load() != int32(tc.inflight) {
				t.Fatalf("%d rounds started while %d were in flight", runs.Load(), tc.inflight)
			}
			close(release)
			wg.Wait()
			for i, v := range got {
				if v != i*10 {
					t.Fatalf("call %d got %d, want %d", i, v, i*10)
				}
			}
			if got := int(runs.Load()) - tc.inflight; got != tc.wantQueuedRounds {
				t.Errorf("the %d queued calls went in %d rounds, want %d", tc.queued, got, tc.wantQueuedRounds)
			}
			sizes.Range(func(k, v any) bool {
				if v.(int) > tc.max {
					t.Errorf("round %d carried %d calls, over %d", k, v, tc.max)
				}
				return true
			})
			if most.Load() > int32(tc.inflight) {
				t.Errorf("%d rounds ran at once, over %d", most.Load(), tc.inflight)
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.running != 0 || len(r.queue) != 0 {
				t.Fatalf("rounds left running=%d with %d queued", r.running, len(r.queue))
			}
		})
	}
}

// A round runs on when the caller that leads it leaves: it carries other
// callers' work, which must not fail with it.
func TestRoundOutlivesItsLeader(t *testing.T) {
	release := make(chan struct{})
	var sawCancel atomic.Bool
	r := New(1, 1, func(ctx context.Context, in []int) []int {
		<-release
		sawCancel.Store(ctx.Err() != nil)
		return slices.Clone(in)
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() { done <- r.Do(ctx, 7) }()
	cancel()
	close(release)
	if got := <-done; got != 7 {
		t.Fatalf("got %d, want 7", got)
	}
	if sawCancel.Load() {
		t.Fatal("the round saw its leader's cancellation")
	}
}

// Many callers hammering rounds at once: every call gets its own answer,
// no more than inflight rounds ever run, and when all is done no slot is
// left taken. A slot handed to a waiting call twice (the call at the head
// of the queue handed the next round by two rounds ending together) is
// lost for good, and with it, in the end, every round.
func TestRoundsNeverLoseASlot(t *testing.T) {
	const inflight, callers, calls = 2, 16, 400
	var cur, most atomic.Int32
	r := New(inflight, 4, func(_ context.Context, in []int) []int {
		n := cur.Add(1)
		defer cur.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		runtime.Gosched()
		return slices.Clone(in)
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for g := range callers {
			wg.Go(func() {
				for i := range calls {
					v := g*calls + i
					if got := r.Do(context.Background(), v); got != v {
						t.Errorf("call %d got %d", v, got)
						return
					}
				}
			})
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		r.mu.Lock()
		defer r.mu.Unlock()
		t.Fatalf("calls stuck: %d rounds counted running, %d calls queued", r.running, len(r.queue))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running != 0 || len(r.queue) != 0 {
		t.Fatalf("all calls returned, yet %d rounds counted running and %d calls queued: a slot was lost", r.running, len(r.queue))
	}
	if most.Load() > inflight {
		t.Errorf("%d rounds ran at once, over %d", most.Load(), inflight)
	}
}

// Calls to different keys never share a round or wait on each other's,
// calls to one key do, and a key's group is dropped once its calls are
// done (workers come and go; their groups must not pile up).
func TestKeyedGroupsPerKeyAndDropsIdle(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	seen := map[string][][]int{}
	k := NewKeyed(1, 64, func(_ context.Context, key string, in []int) []int {
		mu.Lock()
		seen[key] = append(seen[key], slices.Clone(in))
		first := len(seen[key]) == 1
		mu.Unlock()
		if first && key == "a" {
			<-release // key a's first round is slow: a's next calls queue
		}
		return slices.Clone(in)
	})
	var wg sync.WaitGroup
	wg.Go(func() { k.Do(context.Background(), "a", 0) })
	testutil.Eventually(t, 5*time.Second, time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(seen["a"]) != 1 {
			return fmt.Errorf("a's first round not started")
		}
		return nil
	})
	for i := 1; i <= 5; i++ {
		wg.Go(func() {
			if got := k.Do(context.Background(), "a", i); got != i {
				t.Errorf("a: call %d got %d", i, got)
			}
		})
	}
	// Key b is not held up by a's slow round.
	if got := k.Do(context.Background(), "b", 9); got != 9 {
		t.Fatalf("b: got %d, want 9", got)
	}
	testutil.Eventually(t, 5*time.Second, time.Millisecond, func() error {
		k.mu.Lock()
		defer k.mu.Unlock()
		g := k.groups["a"]
		if g == nil {
			return fmt.Errorf("a's group is gone while its calls run")
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.queue) != 5 {
			return fmt.Errorf("%d of a's calls queued, want 5", len(g.queue))
		}
		return nil
	})
	close(release)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(seen["a"]) != 2 || len(seen["a"][1]) != 5 {
		t.Errorf("a's rounds: %v, want [0] then the 5 queued calls together", seen["a"])
	}
	if len(seen["b"]) != 1 {
		t.Errorf("b's rounds: %v, want one", seen["b"])
	}
	if n := k.keys(); n != 0 {
		t.Errorf("%d groups kept after every call returned, want 0", n)
	}
}
