package jobs

import (
	"sync"
	"testing"
)

// Many readers of one update share one build; a new update builds again.
func TestMemoBuildsOncePerKey(t *testing.T) {
	var m Memo[uint64, []string]
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			got := m.Get(1, func() []string { return []string{"one"} })
			if len(got) != 1 || got[0] != "one" {
				t.Errorf("got %v", got)
			}
		})
	}
	wg.Wait()
	if n := m.Builds(); n != 1 {
		t.Fatalf("%d builds for one key, want 1", n)
	}
	if got := m.Get(2, func() []string { return []string{"two"} }); got[0] != "two" {
		t.Fatalf("a new key read the old value %v", got)
	}
	if n := m.Builds(); n != 2 {
		t.Fatalf("%d builds for two keys, want 2", n)
	}
}
