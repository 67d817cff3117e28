package rsstore

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"tempest/rainstorm"
	"tempest/rainstorm/ckpt"
	"tempest/wire"
)

// countDelta is a count task's delta setting each of keys to count: per
// key group in group order, sorted by key within a group, as
// rainstorm.Aggregate.Delta makes it.
func countDelta(keys []int, count int64) []wire.RainstormGroupState {
	byGroup := map[int][]wire.RainstormAggregate{}
	for _, i := range keys {
		k := fmt.Sprintf("key-%08d", i)
		g := rainstorm.KeyGroup(k)
		byGroup[g] = append(byGroup[g], wire.RainstormAggregate{Key: k, Count: count})
	}
	var out []wire.RainstormGroupState
	for g := range ckpt.KeyGroups {
		if es := byGroup[g]; len(es) > 0 {
			slices.SortFunc(es, func(a, b wire.RainstormAggregate) int { return strings.Compare(a.Key, b.Key) })
			out = append(out, wire.RainstormGroupState{Group: g, Entries: es})
		}
	}
	return out
}

func span(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

// spread is n keys scattered over [0, of): a checkpoint of a count over
// uniform keys touches every key group and most of the state's pages.
func spread(n, of, seed int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = (seed*7919 + i*(of/n) + i*i) % of
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// leaderTask drives one count task's checkpoints through a store's
// committer, as the only manager of its group.
type leaderTask struct {
	tb   testing.TB
	s    *Store
	task wire.RainstormTask
	v    uint64
}

func openLeaderTask(tb testing.TB, s *Store) *leaderTask {
	tb.Helper()
	lt := &leaderTask{tb: tb, s: s, task: wire.RainstormTask{Job: "j", Workflow: "count", Stage: 1}}
	if err := s.Sync(context.Background(), 1); err != nil {
		tb.Fatal(err)
	}
	res := s.Commit(context.Background(), 1, []*Request{{Open: &wire.RainstormOpen{Task: lt.task, Incarnation: 1}}})
	if res[0].Err != nil {
		tb.Fatal(res[0].Err)
	}
	return lt
}

func (lt *leaderTask) checkpoint(groups []wire.RainstormGroupState) {
	lt.tb.Helper()
	lt.v++
	c := &wire.RainstormCheckpoint{Task: lt.task, Incarnation: 1, Version: lt.v,
		Inputs: []wire.RainstormInput{{Next: lt.v + 1}}, Groups: groups}
	res := lt.s.Commit(context.Background(), 1, []*Request{{Ckpt: c}})
	if res[0].Err != nil {
		lt.tb.Fatalf("checkpoint %d: %v", lt.v, res[0].Err)
	}
	if a := res[0].Msg.(*wire.RainstormCheckpointAck); a.Refused {
		lt.tb.Fatalf("checkpoint %d refused: %s", lt.v, a.Reason)
	}
}

// peerTask feeds one count task's checkpoints to a store as a leader's
// deltas, each on the version before.
type peerTask struct {
	tb   testing.TB
	s    *Store
	task wire.RainstormTask
	v    uint64
}

func (pt *peerTask) checkpoint(groups []wire.RainstormGroupState) {
	pt.tb.Helper()
	d := wire.RainstormDelta{BaseVersion: pt.v, BaseIncarnation: 1,
		Checkpoint: wire.RainstormCheckpoint{Task: pt.task, Incarnation: 1, Version: pt.v + 1, Groups: groups}}
	if pt.v == 0 {
		d.BaseIncarnation = 0
	}
	n, missing, err := pt.s.storeReplicated(&wire.RainstormReplicate{Term: 1, Deltas: []wire.RainstormDelta{d}}, func() string { return "" })
	if err != nil || n != 1 || len(missing) > 0 {
		pt.tb.Fatalf("delta %d: stored %d, missing %v, %v", pt.v+1, n, missing, err)
	}
	pt.v++
}

// storeWithState opens a store on its own (the caller closes it), a task
// led there, and checkpoints it to hold keys entries.
func storeWithState(t *testing.T, keys int) (*Store, *leaderTask) {
	t.Helper()
	s, err := Open(t.TempDir(), soloHost{}, Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	lt := openLeaderTask(t, s)
	build(lt.checkpoint, keys)
	return s, lt
}

// build gives a task a state of keys entries, in checkpoints of 25k keys.
func build(checkpoint func([]wire.RainstormGroupState), keys int) {
	for from := 0; from < keys; from += 25_000 {
		checkpoint(countDelta(span(from, min(25_000, keys-from)), 1))
	}
}

// heapPer is the bytes f allocates per call, over runs calls.
func heapPer(runs int, f func(i int)) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range runs {
		f(i)
	}
	runtime.ReadMemStats(&after)
	return float64(after.TotalAlloc-before.TotalAlloc) / float64(runs)
}

// A checkpoint costs what it changes, not the state it changes: a
// 100-key delta on a 200k-key state allocates about what it does on a
// 25k-key one, on the leader (compose, write, answer) and on a peer (a
// replicated delta composed and written). When every checkpoint rebuilt
// and diffed the whole state, a count over a million distinct keys read
// 1.4k records/s and never finished.
func TestCheckpointCostIsItsDelta(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 200k-key state")
	}
	const small, large, delta, runs = 25_000, 200_000, 100, 8
	cost := func(keys int) (leader, peer float64) {
		s, lt := storeWithState(t, keys)
		defer s.Close()
		leader = heapPer(runs, func(i int) { lt.checkpoint(countDelta(spread(delta, keys, i), int64(i+2))) })

		p, err := Open(t.TempDir(), soloHost{}, Config{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		pt := &peerTask{tb: t, s: p, task: lt.task}
		build(pt.checkpoint, keys)
		peer = heapPer(runs, func(i int) { pt.checkpoint(countDelta(spread(delta, keys, i), int64(i+2))) })
		return leader, peer
	}
	ls, ps := cost(small)
	ll, pl := cost(large)
	t.Logf("bytes allocated per %d-key checkpoint: leader %.0f on %d keys, %.0f on %d; peer %.0f, %.0f", delta, ls, small, ll, large, ps, pl)
	// The state grows 8×; its B-tree and the file's are a level deeper
	// at most. A cost that follows the state grows about 5× (the file's
	// share is about a page per key either way).
	if ll > 2*ls || pl > 2*ps {
		t.Fatalf("a checkpoint's cost grows with the state: leader %.0f → %.0f bytes, peer %.0f → %.0f bytes for the same %d-key delta on %d then %d keys",
			ls, ll, ps, pl, delta, small, large)
	}
}

// A group that missed its majority is undone key by key: each key its
// delta wrote gets back the value before, a key it added goes, on disk
// and in memory; a state read before a checkpoint is unchanged by it; and
// a restart reloads the state every acknowledged delta composed.
func TestStateDeltasRevertAndReload(t *testing.T) {
	dir := t.TempDir()
	s := openSolo(t, dir)
	lt := openLeaderTask(t, s)
	var want []wire.RainstormGroupState
	for v := range 4 {
		d := countDelta(spread(300, 2_000, v), int64(v+1))
		want = ckpt.ComposeGroups(want, d)
		lt.checkpoint(d)
	}
	read := s.Latest(lt.task)
	if !reflect.DeepEqual(read.Groups, want) {
		t.Fatalf("composed state: %d groups, want %d", len(read.Groups), len(want))
	}
	readCopy := ckpt.ComposeGroups(nil, want) // a deep copy

	// Version 5 changes some keys and adds others; its group misses
	// its majority.
	head, state := s.head(lt.task)
	d := countDelta(append(spread(50, 2_000, 9), span(5_000, 50)...), 99)
	next := compose(head, &wire.RainstormCheckpoint{Task: lt.task, Incarnation: 1, Version: 5, Groups: d})
	group := []change{{prev: head, next: next, prevState: state, nextState: state.with(d), delta: d}}
	if err := s.persist(group, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.revert(group); err != nil {
		t.Fatal(err)
	}
	lt.checkpoint(countDelta(span(7_000, 10), 1)) // version 5 again, another delta
	want = ckpt.ComposeGroups(want, countDelta(span(7_000, 10), 1))
	if !reflect.DeepEqual(read.Groups, readCopy) {
		t.Fatal("a state read before a checkpoint changed")
	}
	if l := s.Latest(lt.task); l.Version != 5 || !reflect.DeepEqual(l.Groups, want) {
		t.Fatalf("in memory after the undone group: version %d, state equal %v", l.Version, reflect.DeepEqual(l.Groups, want))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openSolo(t, dir)
	defer s.Close()
	if l := s.Latest(lt.task); l == nil || l.Version != 5 || !reflect.DeepEqual(l.Groups, want) {
		t.Fatalf("reloaded: %v, state equal %v", l != nil, l != nil && reflect.DeepEqual(l.Groups, want))
	}
}

// A whole state folded in by diff: the result holds exactly its entries,
// the delta names exactly the keys that changed (so writing the delta
// turns the stored entries into the new ones), the state it started from
// is unchanged, and a state diffed against itself is itself.
func TestStateDiff(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	random := func(n int) map[string]int64 {
		m := map[string]int64{}
		for range n {
			m[fmt.Sprintf("key-%08d", rng.IntN(3000))] = int64(rng.IntN(3))
		}
		return m
	}
	toGroups := func(m map[string]int64) []wire.RainstormGroupState {
		var gs []wire.RainstormGroupState
		for k, v := range m {
			gs = ckpt.ComposeGroups(gs, []wire.RainstormGroupState{{Group: rainstorm.KeyGroup(k), Entries: []wire.RainstormAggregate{{Key: k, Count: v}}}})
		}
		return gs
	}
	prev, next := random(2000), random(2000)
	pg, ng := toGroups(prev), toGroups(next)
	ps := (*aggState)(nil).with(pg)
	ns, delta := ps.diff(ng)
	if !reflect.DeepEqual(ns.whole(), ng) {
		t.Fatalf("diffed state: %d entries, want %d", ns.Len(), len(next))
	}
	if !reflect.DeepEqual(ps.whole(), pg) {
		t.Fatal("the state diffed from changed")
	}
	have := maps.Clone(prev)
	for _, g := range delta {
		for _, e := range g.Entries {
			if rainstorm.KeyGroup(e.Key) != g.Group {
				t.Fatalf("key %s named in group %d", e.Key, g.Group)
			}
			v, ok := ns.get(g.Group, e.Key)
			if old, had := have[e.Key]; had && ok && old == v.Count {
				t.Fatalf("unchanged key %s named", e.Key)
			}
			if ok {
				have[e.Key] = v.Count
			} else {
				delete(have, e.Key)
			}
		}
	}
	if !reflect.DeepEqual(have, next) {
		t.Fatalf("after the delta: %d keys, want %d", len(have), len(next))
	}
	if same, d := ns.diff(ckpt.ComposeGroups(nil, ng)); same != ns || d != nil {
		t.Fatalf("a state against itself: a new state %v, delta of %d groups", same != ns, len(d))
	}
	if empty, d := ns.diff(nil); empty.Len() != 0 || entries(d) != len(next) {
		t.Fatalf("against no entries: %d left, %d named", empty.Len(), entries(d))
	}
}

// BenchmarkCheckpoint commits a 1k-key delta of a count task onto states
// of 10k, 100k and 1M keys, on the leader and on a peer: the cost per
// checkpoint (time, bytes) should not follow the state.
func BenchmarkCheckpoint(b *testing.B) {
	for _, keys := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("leader/keys=%d", keys), func(b *testing.B) {
			s, err := Open(b.TempDir(), soloHost{}, Config{NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			lt := openLeaderTask(b, s)
			build(lt.checkpoint, keys)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				lt.checkpoint(countDelta(spread(1_000, keys, i), int64(i+2)))
			}
		})
		b.Run(fmt.Sprintf("peer/keys=%d", keys), func(b *testing.B) {
			s, err := Open(b.TempDir(), soloHost{}, Config{NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			pt := &peerTask{tb: b, s: s, task: wire.RainstormTask{Job: "j", Workflow: "count", Stage: 1}}
			build(pt.checkpoint, keys)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				pt.checkpoint(countDelta(spread(1_000, keys, i), int64(i+2)))
			}
		})
	}
}
