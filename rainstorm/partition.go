package rainstorm

import (
	"tempest/rainstorm/ckpt"
	"tempest/wire"
)

// KeyGroups is the number of key groups tuples are partitioned into. A
// key belongs to one group for the life of a pipeline, and a stage's tasks
// own contiguous ranges of groups, as Flink does with its 128 default
// maximum parallelism: a task's state is a set of whole groups, so a
// restart or a resize moves groups with their state, never a key without
// its state (which `hash % live tasks` would do). It also bounds a stage at
// KeyGroups tasks.
const KeyGroups = ckpt.KeyGroups

// KeyGroup returns key's group: FNV-1a, then a finaliser so that keys that
// differ in their last byte spread over all groups. Stable across processes
// and releases: it is part of where state lives.
func KeyGroup(key string) int {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	return int(mix64(h) % KeyGroups)
}

// IDGroup is the group of a record routed by its input id (stages with no
// key): records spread evenly and a given record always goes the same way.
func IDGroup(id uint64) int { return int(mix64(id) % KeyGroups) }

// mix64 is the splitmix64 finaliser.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// GroupTask returns the task of a stage of tasks tasks that owns group.
func GroupTask(group, tasks int) int { return group * tasks / KeyGroups }

// TaskGroups returns the groups [lo, hi) task owns among tasks tasks:
// the inverse of GroupTask, for moving state on a resize.
func TaskGroups(task, tasks int) (lo, hi int) {
	lo = (task*KeyGroups + tasks - 1) / tasks
	hi = ((task+1)*KeyGroups + tasks - 1) / tasks
	return lo, hi
}

// StateOfGroups returns the entries of an aggregate's state whose keys fall
// in groups [lo, hi): how a resize hands a task's groups, with their state,
// to the tasks that own them after it.
func StateOfGroups(snap []wire.RainstormAggregate, lo, hi int) []wire.RainstormAggregate {
	var out []wire.RainstormAggregate
	for _, e := range snap {
		if g := KeyGroup(e.Key); g >= lo && g < hi {
			out = append(out, e)
		}
	}
	return out
}
