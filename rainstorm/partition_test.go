package rainstorm

import (
	"fmt"
	"testing"
)

func TestGroupTaskCoversEveryGroupOnce(t *testing.T) {
	for tasks := 1; tasks <= KeyGroups; tasks++ {
		next := 0
		for task := range tasks {
			lo, hi := TaskGroups(task, tasks)
			if lo != next || hi < lo {
				t.Fatalf("tasks %d: task %d owns [%d,%d), want to start at %d", tasks, task, lo, hi, next)
			}
			for g := lo; g < hi; g++ {
				if got := GroupTask(g, tasks); got != task {
					t.Fatalf("tasks %d: group %d maps to %d, owned by %d", tasks, g, got, task)
				}
			}
			next = hi
		}
		if next != KeyGroups {
			t.Fatalf("tasks %d: groups end at %d", tasks, next)
		}
	}
}

// TestKeyGroupStable pins the hash: changing it would move every key's
// state away from its checkpoints.
func TestKeyGroupStable(t *testing.T) {
	got := fmt.Sprint(KeyGroup(""), KeyGroup("Regulatory"), KeyGroup("Warning"), IDGroup(0), IDGroup(12345))
	if want := "27 51 13 0 81"; got != want {
		t.Fatalf("groups %s, want %s", got, want)
	}
	seen := map[int]bool{}
	for i := range 10000 {
		seen[KeyGroup(fmt.Sprint("k", i))] = true
	}
	if len(seen) != KeyGroups {
		t.Fatalf("10000 keys fill %d of %d groups", len(seen), KeyGroups)
	}
}
