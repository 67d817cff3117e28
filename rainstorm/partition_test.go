package rainstorm

import (
	"fmt"
	"testing"

	"tempest/wire"
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

// TestStateFollowsGroupsOnResize: a stage's state, re-cut for 5 tasks by
// key group, puts every key in the task that the routing now sends it to.
func TestStateFollowsGroupsOnResize(t *testing.T) {
	var all []wire.RainstormAggregate
	for i := range 500 {
		all = append(all, wire.RainstormAggregate{Key: fmt.Sprint("key-", i), Count: int64(i)})
	}
	total := 0
	for task := range 5 {
		lo, hi := TaskGroups(task, 5)
		part := StateOfGroups(all, lo, hi)
		for _, e := range part {
			if got := GroupTask(KeyGroup(e.Key), 5); got != task {
				t.Fatalf("key %s handed to task %d, routed to %d", e.Key, task, got)
			}
		}
		total += len(part)
	}
	if total != len(all) {
		t.Fatalf("%d of %d keys handed over", total, len(all))
	}
}
