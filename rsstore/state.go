package rsstore

import (
	"sync"

	"github.com/google/btree"

	"tempest/wire"
)

// aggState is one task's aggregate state at one stored checkpoint: every
// entry, ordered by key group then key (the order of the state bucket's
// keys), in a copy-on-write B-tree. A checkpoint's state is its
// predecessor's with the task's delta put in (with): the clone is O(1) and
// each put copies only the path to its entry, so composing costs the delta
// times log n however large the state is, and every earlier version stays
// a valid, unchanged snapshot — the committer reverts to it, readers (an
// open's reply, a sync page) page through it while later versions are
// composed. A whole state sent by a sync or by a leader that did not know
// this store's base is folded in by diff: one pass, then the keys that
// differ.
//
// An aggState is never changed once another goroutine can see it. nil is
// the empty state.
type aggState struct {
	t *btree.BTreeG[item]

	// mu serializes Clone, which marks the shared nodes read-only by
	// swapping t's copy-on-write context (a write to t), and guards groups.
	mu     sync.Mutex
	groups []wire.RainstormGroupState // every entry in wire form, once asked for
}

// item is one entry of an aggregate's state.
type item struct {
	group uint8 // < ckpt.KeyGroups, which fits a byte as in stateKey
	e     wire.RainstormAggregate
}

func itemLess(a, b item) bool {
	if a.group != b.group {
		return a.group < b.group
	}
	return a.e.Key < b.e.Key
}

// stateDegree is the B-tree's minimum fan-out: a node holds up to 31
// entries, so a put copies a few small nodes (about 1.5 KiB each) and a
// million entries are five levels deep.
const stateDegree = 16

// with returns s with the entries of delta put in (a delta's entry
// replaces the key's value). s is not changed; with no entries it is
// returned itself.
func (s *aggState) with(delta []wire.RainstormGroupState) *aggState {
	if entries(delta) == 0 {
		return s
	}
	out := s.clone()
	for _, g := range delta {
		for _, e := range g.Entries {
			out.t.ReplaceOrInsert(item{group: uint8(g.Group), e: e})
		}
	}
	return out
}

// clone returns a state holding s's entries that the caller may change
// until it publishes it: O(1), the nodes are shared until written.
func (s *aggState) clone() *aggState {
	if s == nil {
		return &aggState{t: btree.NewG(stateDegree, itemLess)}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return &aggState{t: s.t.Clone()}
}

// diff returns the state holding exactly the entries of groups (a whole
// state: in group order, sorted by key within a group) and what it
// changes from s: per group in order, each key it puts with its new value,
// and each key of s it drops with its key alone (the change's delta, as
// writeState and a revert read it). It walks s and groups side by side,
// so storing a whole state a peer or a sync sent costs one pass over it
// and the keys that differ; with none it returns s itself and no delta.
func (s *aggState) diff(groups []wire.RainstormGroupState) (*aggState, []wire.RainstormGroupState) {
	var (
		puts, dels []item
		touched    []wire.RainstormGroupState
		gi, ei     int
	)
	touch := func(it item) {
		if n := len(touched); n == 0 || touched[n-1].Group != int(it.group) {
			touched = append(touched, wire.RainstormGroupState{Group: int(it.group)})
		}
		last := &touched[len(touched)-1]
		last.Entries = append(last.Entries, it.e)
	}
	// next is groups' next entry, not yet taken.
	next := func() (item, bool) {
		for gi < len(groups) && ei >= len(groups[gi].Entries) {
			gi, ei = gi+1, 0
		}
		if gi == len(groups) {
			return item{}, false
		}
		return item{group: uint8(groups[gi].Group), e: groups[gi].Entries[ei]}, true
	}
	put := func(it item) {
		ei++
		puts = append(puts, it)
		touch(it)
	}
	if s != nil {
		s.t.Ascend(func(have item) bool {
			for {
				want, ok := next()
				switch {
				case !ok || itemLess(have, want): // groups lacks have's key
					dels = append(dels, have)
					touch(item{group: have.group, e: wire.RainstormAggregate{Key: have.e.Key}})
					return true
				case itemLess(want, have): // a key s lacks
					put(want)
				case want.e != have.e:
					put(want)
					return true
				default:
					ei++
					return true
				}
			}
		})
	}
	for want, ok := next(); ok; want, ok = next() {
		put(want)
	}
	if len(puts) == 0 && len(dels) == 0 {
		return s, nil
	}
	out := s.clone()
	for _, it := range puts {
		out.t.ReplaceOrInsert(it)
	}
	for _, it := range dels {
		out.t.Delete(it)
	}
	return out, touched
}

func entries(groups []wire.RainstormGroupState) int {
	n := 0
	for i := range groups {
		n += len(groups[i].Entries)
	}
	return n
}

// get returns key's entry in group g.
func (s *aggState) get(g int, key string) (wire.RainstormAggregate, bool) {
	if s == nil {
		return wire.RainstormAggregate{}, false
	}
	it, ok := s.t.Get(item{group: uint8(g), e: wire.RainstormAggregate{Key: key}})
	return it.e, ok
}

// Len is how many entries s holds.
func (s *aggState) Len() int {
	if s == nil {
		return 0
	}
	return s.t.Len()
}

// whole returns every entry of s per group, in group order and by key
// within a group: what a whole checkpoint carries. It costs the whole
// state the first time and is kept (while s is the latest, an open's
// parts and a sync's pages ask for it again); the caller must not change
// it.
func (s *aggState) whole() []wire.RainstormGroupState {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	groups := s.groups
	s.mu.Unlock()
	if groups != nil || s.t.Len() == 0 {
		return groups
	}
	// Built outside mu: a committer cloning s does not wait for it (a
	// clone only marks the nodes shared; reading them is safe meanwhile).
	groups = make([]wire.RainstormGroupState, 0, 16)
	flat := make([]wire.RainstormAggregate, 0, s.t.Len())
	start := 0
	s.t.Ascend(func(it item) bool {
		if n := len(groups); n == 0 || groups[n-1].Group != int(it.group) {
			if n > 0 {
				groups[n-1].Entries = flat[start:len(flat):len(flat)]
			}
			start = len(flat)
			groups = append(groups, wire.RainstormGroupState{Group: int(it.group)})
		}
		flat = append(flat, it.e)
		return true
	})
	groups[len(groups)-1].Entries = flat[start:len(flat):len(flat)]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.groups == nil {
		s.groups = groups
	}
	return s.groups
}
