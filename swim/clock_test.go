package swim

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

func TestVersionedClockRejectsStale(t *testing.T) {
	c := NewVersionedClock(nil)
	if c.IsStale("w1", 0) {
		t.Error("unknown entity reported stale")
	}
	if !c.Update("w1", 5) {
		t.Fatal("first version rejected")
	}
	for _, v := range []uint64{0, 4, 5} {
		if !c.IsStale("w1", v) {
			t.Errorf("version %d not stale after 5", v)
		}
		if c.ShouldAccept("w1", v) || c.Update("w1", v) {
			t.Errorf("version %d accepted after 5", v)
		}
	}
	if c.IsStale("w1", 6) || !c.ShouldAccept("w1", 6) {
		t.Error("newer version refused")
	}
	if v, ok := c.Version("w1"); !ok || v != 6 {
		t.Errorf("version = %d, %v", v, ok)
	}
	if c.IsStale("w2", 1) {
		t.Error("entities are not independent")
	}

	// A restarted entity counting from 1 again is accepted once forgotten.
	c.Forget("w1")
	if !c.ShouldAccept("w1", 1) {
		t.Error("forgotten entity still stale")
	}
}

func TestVersionedClockCleanup(t *testing.T) {
	fc := &fakeClock{now: time.Unix(1000, 0)}
	c := NewVersionedClock(fc.Now)
	c.Update("old", 1)
	fc.Advance(30 * time.Second)
	c.Update("new", 1)
	fc.Advance(30 * time.Second)

	// A stale update does not refresh the entry's age.
	c.Update("old", 1)
	if n := c.CleanupOlderThan(45 * time.Second); n != 1 {
		t.Fatalf("dropped %d, want 1", n)
	}
	if _, ok := c.Version("old"); ok {
		t.Error("old entity survived cleanup")
	}
	if _, ok := c.Version("new"); !ok {
		t.Error("recent entity dropped")
	}
	if c.CleanupOlderThan(45*time.Second) != 0 || c.Len() != 1 {
		t.Error("second cleanup changed something")
	}
}

// Many goroutines race to apply the same versions: each version must be
// accepted at most once, accepted versions must rise per goroutine's view,
// and the last word must be the highest version.
func TestVersionedClockConcurrent(t *testing.T) {
	c := NewVersionedClock(nil)
	const workers, versions = 8, 2000
	var accepted atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for v := uint64(1); v <= versions; v++ {
				// Workers walk at different strides so they interleave.
				if c.ShouldAccept("e", v*uint64(w+1)%versions+1) {
					accepted.Add(1)
				}
				c.IsStale("e", v)
			}
		})
	}
	wg.Wait()
	if got, _ := c.Version("e"); got != versions {
		t.Errorf("final version %d, want %d", got, versions)
	}
	if a := accepted.Load(); a < 1 || a > versions {
		t.Errorf("%d acceptances for %d distinct versions", a, versions)
	}
}
