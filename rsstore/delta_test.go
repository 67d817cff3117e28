package rsstore

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
)

// countGroup is a group of three where m0 leads one count task.
type countGroup struct {
	*testGroup
	task  wire.RainstormTask
	lead  *testNode
	inc   uint64
	v     uint64
	blobs bool // each checkpoint cuts a batch; the two latest stay unacknowledged
}

func newCountGroup(t *testing.T, blobs bool) *countGroup {
	g := &countGroup{testGroup: newTestGroup(t), task: wire.RainstormTask{Job: "j", Workflow: "count", Stage: 1}, blobs: blobs}
	g.lead = g.elect(0, 1, 2)
	g.reopen()
	return g
}

// reopen opens the task's next incarnation at the leader.
func (g *countGroup) reopen() {
	g.inc++
	g.open(g.lead, g.task, g.inc)
}

// next is the task's next checkpoint, changing groups.
func (g *countGroup) next(groups []wire.RainstormGroupState) *wire.RainstormCheckpoint {
	g.v++
	c := &wire.RainstormCheckpoint{Task: g.task, Incarnation: g.inc, Version: g.v, Groups: groups,
		Inputs: []wire.RainstormInput{{Next: g.v + 1}}}
	if g.blobs {
		c.Outputs = []wire.RainstormOutput{{Next: g.v + 1, Acked: g.v - min(g.v, 2)}}
		c.PendingBlobs = []wire.RainstormBatchBlob{{From: g.task, Seq: g.v, Batch: fmt.Appendf(nil, "batch %d", g.v)}}
	}
	return c
}

// commit commits the next checkpoint until a majority acknowledges it (a
// round may outlast its timeout on a loaded machine; the task resends).
func (g *countGroup) commit(groups []wire.RainstormGroupState) {
	g.t.Helper()
	c := g.next(groups)
	testutil.Eventually(g.t, time.Minute, 10*time.Millisecond, func() error {
		if !g.put(g.lead, c) {
			return fmt.Errorf("version %d not acknowledged", c.Version)
		}
		return nil
	})
}

// build gives the task a state of keys entries on every store.
func (g *countGroup) build(keys int) {
	build(g.commit, keys)
}

// ahead commits n checkpoints of 100 keys each (of a state of keys) that
// m2 misses: m0 and m1 end n versions ahead of it.
func (g *countGroup) ahead(n, keys int) {
	g.lead.cut = map[string]bool{"m2": true}
	for i := range n {
		g.commit(countDelta(spread(100, keys, int(g.v)+i), int64(g.v)+2))
	}
	g.lead.cut = nil
}

// syncAt makes node i the leader of a new term, synced from the peers
// from (the others cut off), and returns what it read.
func (g *countGroup) syncAt(i int, from ...int) *syncReads {
	g.t.Helper()
	g.term++
	n := g.nodes[i]
	n.term = g.term
	n.cut = map[string]bool{}
	for j, p := range g.nodes {
		if j != i && !containsInt(from, j) {
			n.cut[p.id] = true
		}
	}
	for _, j := range from {
		g.nodes[j].term = g.term
	}
	reads := &syncReads{}
	testutil.Eventually(g.t, time.Minute, 10*time.Millisecond, func() error {
		return n.st.sync(context.Background(), g.term, reads)
	})
	n.cut = nil
	g.lead = n
	return reads
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// same fails unless every node in ids holds the task's latest checkpoint
// exactly as node 0 of ids does: head, batches, lineage and every key.
func (g *countGroup) same(ids ...int) {
	g.t.Helper()
	want := g.nodes[ids[0]].st.Latest(g.task)
	for _, i := range ids[1:] {
		got := g.nodes[i].st.Latest(g.task)
		if !reflect.DeepEqual(got, want) {
			g.t.Fatalf("m%d holds version %d of incarnation %d (%d batches, %d groups), m%d version %d of %d (%d batches, %d groups): not the same checkpoint",
				i, got.Version, got.Incarnation, len(got.PendingBlobs), len(got.Groups),
				ids[0], want.Version, want.Incarnation, len(want.PendingBlobs), len(want.Groups))
		}
	}
}

// latestSent counts the latest checkpoints (not rows records) a peer's
// sync answer sent whole.
func latestSent(got *wire.RainstormSyncResponse) int {
	n := 0
	for i := range got.Checkpoints {
		if got.Checkpoints[i].Incarnation != 0 {
			n++
		}
	}
	return n
}

// A new leader one or a few versions behind a peer reads from it the
// keys changed since its own version, as one delta, and ends up with the
// peer's checkpoint exactly: state, unacknowledged batches (some of its
// own acknowledged since), positions and lineage. Read whole, a
// million-key count's sync after a leader change took 15–21 s.
func TestSyncOfAPeerAheadReadsItsDelta(t *testing.T) {
	for _, ahead := range []int{1, 3} {
		t.Run(fmt.Sprintf("ahead=%d", ahead), func(t *testing.T) {
			const keys = 20_000
			g := newCountGroup(t, true)
			g.build(keys)
			g.ahead(ahead, keys)
			reads := g.syncAt(2, 1)
			got := reads.of("m1").got
			if len(got.Deltas) != 1 || latestSent(&got) != 0 {
				t.Fatalf("m1 answered %d deltas and %d whole checkpoints; want the delta alone", len(got.Deltas), latestSent(&got))
			}
			if d := got.Deltas[0]; d.BaseVersion != g.v-uint64(ahead) || d.Checkpoint.Version != g.v {
				t.Fatalf("m1's delta is from version %d to %d, want %d to %d", d.BaseVersion, d.Checkpoint.Version, g.v-uint64(ahead), g.v)
			}
			if n := entries(got.Deltas[0].Checkpoint.Groups); n > 100*ahead {
				t.Fatalf("the delta of %d checkpoints of 100 keys holds %d keys", ahead, n)
			}
			g.same(1, 2)
			// The delta is in m2's history: a checkpoint on it is a delta too.
			g.commit(countDelta(spread(100, keys, 99), 99))
			g.same(2, 0, 1)
		})
	}
}

// A peer sends the whole state where a delta cannot make its checkpoint
// on the leader's: its history does not reach back to the leader's
// version, or its latest is of another incarnation (an open since, whose
// lineage a delta of puts cannot carry).
func TestSyncOfAPeerAheadFallsBackToWhole(t *testing.T) {
	const keys = 5_000
	for _, tc := range []struct {
		name string
		make func(g *countGroup)
	}{
		{"past its history", func(g *countGroup) { g.ahead(histDepth+2, keys) }},
		{"another incarnation", func(g *countGroup) {
			g.lead.cut = map[string]bool{"m2": true}
			g.reopen()
			g.lead.cut = nil
			g.ahead(1, keys)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newCountGroup(t, true)
			g.build(keys)
			tc.make(g)
			reads := g.syncAt(2, 1)
			got := reads.of("m1").got
			if len(got.Deltas) != 0 || latestSent(&got) != 1 {
				t.Fatalf("m1 answered %d deltas and %d whole checkpoints; want the whole state", len(got.Deltas), latestSent(&got))
			}
			g.same(1, 2)
		})
	}
}

// A new leader ahead of a peer reads no state from it (the peer names its
// older version) and spreads to it the delta from that version, cut from
// the leader's history, not its whole state. Both went whole.
func TestSpreadSendsAPeerBehindItsDelta(t *testing.T) {
	const keys = 20_000
	g := newCountGroup(t, true)
	g.build(keys)
	g.ahead(2, keys)
	var w wholeSends
	w.watch(g.testGroup)
	reads := g.syncAt(1, 2)
	got := reads.of("m2").got
	if latestSent(&got) != 0 || len(got.Deltas) != 0 || len(got.Older) != 1 || got.Older[0].Version != g.v-2 {
		t.Fatalf("m2, behind the leader, answered %d checkpoints, %d deltas and named %+v; want its version %d named alone",
			latestSent(&got), len(got.Deltas), got.Older, g.v-2)
	}
	if w.of("m2") != 0 || w.deltasOf("m2") != 1 {
		t.Fatalf("the spread sent m2 %d whole checkpoints and %d deltas; want one delta", w.of("m2"), w.deltasOf("m2"))
	}
	if reads.spreadWhole != 0 || reads.spreadDeltas != 1 {
		t.Fatalf("the sync counts %d whole checkpoints and %d deltas spread; want one delta", reads.spreadWhole, reads.spreadDeltas)
	}
	g.same(1, 2)
}

// Three stores at three versions: the new leader reads a delta from each
// peer ahead of it, stores the newest, and drops the other; the peer left
// between gets a delta too (its version is within the leader's history,
// and no batch is pending that it might hold already).
func TestSyncMergesTheNewestDelta(t *testing.T) {
	const keys = 20_000
	g := newCountGroup(t, false)
	g.build(keys)
	g.ahead(1, keys)
	// m1 stores one more version; m0's group misses its majority (m1's
	// answer is lost, m2 cut off) and is undone there.
	g.lead.cut, g.lead.lose = map[string]bool{"m2": true}, map[string]bool{"m1": true}
	if g.put(g.lead, g.next(countDelta(spread(100, keys, 7), 7))) {
		t.Fatal("a group on one peer whose answer was lost was acknowledged")
	}
	g.lead.cut, g.lead.lose = nil, nil
	var w wholeSends
	w.watch(g.testGroup)
	reads := g.syncAt(2, 0, 1)
	if d0, d1 := reads.of("m0").got.Deltas, reads.of("m1").got.Deltas; len(d0) != 1 || len(d1) != 1 || d1[0].Checkpoint.Version != g.v {
		t.Fatalf("m0 answered %d deltas, m1 %d; want one each, m1's of version %d", len(d0), len(d1), g.v)
	}
	g.same(1, 2, 0)
	if w.of("m0") != 0 || w.deltasOf("m0") != 1 {
		t.Fatalf("the spread sent m0 %d whole checkpoints and %d deltas; want one delta", w.of("m0"), w.deltasOf("m0"))
	}
}

// A delta goes only on the state it was cut from: one read in an earlier
// attempt, whose base this store no longer holds (it stored another
// peer's newer version since), is not stored, and its peer is read again.
// Stored, its keys would have gone on a base that lacks the changes
// between: a state no store ever held.
func TestSyncDeltaOnlyOnItsBase(t *testing.T) {
	const keys = 5_000
	g := newCountGroup(t, false)
	g.build(keys)
	base := g.v
	g.ahead(2, keys)
	m2 := g.nodes[2].st
	before := m2.Latest(g.task)
	// A delta from version base-1 (m2 holds base) to the latest.
	head, state, ok := deltaFrom(g.nodes[1].st.Latest(g.task), g.nodes[1].st.tasks[g.task].state, g.nodes[1].st.tasks[g.task].hist, ver{base - 1, 1})
	if !ok {
		t.Fatal("m1's history does not reach version", base-1)
	}
	head.Groups = state.whole()
	reads := &syncReads{}
	pr := reads.of("m1")
	pr.done = true
	pr.got.Deltas = []wire.RainstormDelta{{BaseVersion: base - 1, BaseIncarnation: 1, Checkpoint: *head}}
	if err := m2.merge([]string{"m1"}, reads); err == nil {
		t.Fatal("a delta on another base than the stored one was merged")
	}
	if reads.of("m1").done {
		t.Fatal("the peer whose delta was on another base is not read again")
	}
	if got := m2.Latest(g.task); !reflect.DeepEqual(got, before) {
		t.Fatalf("m2 holds version %d after a delta on another base, want %d unchanged", got.Version, before.Version)
	}
}

// aheadPair is two stores on their own holding one count task's state of
// keys entries, the peer n checkpoints of 100 keys ahead of the leader:
// the peer's committed, the leader's stored as a peer's replicated deltas.
func aheadPair(tb testing.TB, keys, n int) (peer, leader *Store, task wire.RainstormTask) {
	tb.Helper()
	open := func() *Store {
		s, err := Open(tb.TempDir(), soloHost{}, Config{NoSync: true})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = s.Close() })
		return s
	}
	peer, leader = open(), open()
	lt := openLeaderTask(tb, peer)
	pt := &peerTask{tb: tb, s: leader, task: lt.task}
	build(func(g []wire.RainstormGroupState) {
		lt.checkpoint(g)
		pt.checkpoint(g)
	}, keys)
	for i := range n {
		lt.checkpoint(countDelta(spread(100, keys, i), int64(i+2)))
	}
	return peer, leader, lt.task
}

// syncFrom reads every page of peer's store as leader's sync does (each
// page encoded and decoded as the transport would), joins them and
// stores what they hold in leader, asking for deltas or not. It returns
// the pages read and their encoded bytes.
func syncFrom(tb testing.TB, leader, peer *Store, deltas bool) (pages, size int) {
	tb.Helper()
	var (
		pr    peerRead
		after []byte
	)
	for {
		resp := peer.snapshot(nil, after, syncAsk{have: leader.have(), deltas: deltas})
		b, err := wire.Marshal(resp)
		if err != nil {
			tb.Fatal(err)
		}
		var r wire.RainstormSyncResponse
		if err := wire.Unmarshal(b, &r); err != nil {
			tb.Fatal(err)
		}
		pages, size = pages+1, size+len(b)
		for i := range r.Checkpoints {
			if c, err := pr.parts.Add(&r.Checkpoints[i]); err != nil {
				tb.Fatal(err)
			} else if c != nil {
				pr.got.Checkpoints = append(pr.got.Checkpoints, *c)
			}
		}
		for i := range r.Deltas {
			if c, err := pr.dparts.Add(&r.Deltas[i].Checkpoint); err != nil {
				tb.Fatal(err)
			} else if c != nil {
				pr.got.Deltas = append(pr.got.Deltas, wire.RainstormDelta{BaseVersion: r.Deltas[i].BaseVersion,
					BaseIncarnation: r.Deltas[i].BaseIncarnation, Checkpoint: *c})
			}
		}
		if !r.More {
			break
		}
		after = r.Next
	}
	pr.done = true
	reads := &syncReads{peers: map[string]*peerRead{"peer": &pr}}
	if err := leader.merge([]string{"peer"}, reads); err != nil {
		tb.Fatal(err)
	}
	return pages, size
}

// The sync of a peer a version ahead costs the delta, not the state: the
// pages and bytes read are about the same on a 150k-key state as on a
// 50k-key one (the whole state is five pages against two), and the
// leader ends with the peer's checkpoint.
func TestSyncOfAPeerAheadCostsItsDelta(t *testing.T) {
	const small, large = 50_000, 150_000
	cost := func(keys int) (pages, size int) {
		peer, leader, task := aheadPair(t, keys, 1)
		pages, size = syncFrom(t, leader, peer, true)
		if got, want := leader.Latest(task), peer.Latest(task); got.Version != want.Version || !reflect.DeepEqual(got.Groups, want.Groups) {
			t.Fatalf("the leader holds version %d after the sync, the peer %d (or another state)", got.Version, want.Version)
		}
		return pages, size
	}
	ps, bs := cost(small)
	pl, bl := cost(large)
	t.Logf("sync of a peer one version ahead: %d pages, %d bytes on %d keys; %d pages, %d bytes on %d keys", ps, bs, small, pl, bl, large)
	if pl > ps || bl > bs+bs/2 {
		t.Fatalf("the sync's cost grows with the state: %d pages, %d bytes on %d keys; %d pages, %d bytes on %d keys", ps, bs, small, pl, bl, large)
	}
}

// BenchmarkSyncOfAPeerAhead is a new leader's read of a peer two
// checkpoints ahead and the store of what it read, the whole state (as
// before deltas, and with a peer that does not send them) against the
// delta. The leader's task is put back to its version after each run (in
// memory; its disk keeps the keys, which a run writes again).
func BenchmarkSyncOfAPeerAhead(b *testing.B) {
	for _, keys := range []int{200_000, 1_000_000} {
		peer, leader, task := aheadPair(b, keys, 2)
		saved := *leader.tasks[task]
		for _, deltas := range []bool{false, true} {
			b.Run(fmt.Sprintf("keys=%d/deltas=%v", keys, deltas), func(b *testing.B) {
				var pages, size int
				for b.Loop() {
					pages, size = syncFrom(b, leader, peer, deltas)
					leader.mu.Lock()
					restored := saved
					leader.tasks[task] = &restored
					leader.mu.Unlock()
				}
				b.ReportMetric(float64(pages), "pages/op")
				b.ReportMetric(float64(size), "bytes-read/op")
			})
		}
	}
}

// A peer from before deltas ignores the request's new field: it sends the
// whole state of a version ahead of the leader's and its own older one,
// and the leader stores them as before (a leader from before deltas never
// asks, and a peer answers it whole: syncFrom without deltas).
func TestSyncWithAPeerFromBeforeDeltas(t *testing.T) {
	const keys = 5_000
	g := newCountGroup(t, true)
	g.build(keys)
	g.ahead(2, keys)
	g.nodes[1].old, g.nodes[2].old = true, true
	reads := g.syncAt(2, 1)
	if got := reads.of("m1").got; len(got.Deltas) != 0 || latestSent(&got) != 1 {
		t.Fatalf("m1, from before deltas, answered %d deltas and %d whole checkpoints; want the whole state", len(got.Deltas), latestSent(&got))
	}
	g.same(1, 2)
	// m2 leads; m1 misses a version.
	g.lead.cut = map[string]bool{"m1": true}
	g.commit(countDelta(spread(100, keys, 5), 5))
	g.lead.cut = nil
	reads = g.syncAt(0, 1)
	if got := reads.of("m1").got; len(got.Older) != 0 || latestSent(&got) != 1 {
		t.Fatalf("m1, from before deltas and behind, named %d versions and sent %d whole checkpoints; want its state", len(got.Older), latestSent(&got))
	}
	g.same(0, 1, 2)
}

// A delta over a sync page goes in parts the leader joins, and ends with
// the peer's checkpoint.
func TestSyncDeltaOverPages(t *testing.T) {
	const keys = 60_000
	g := newCountGroup(t, true)
	g.build(keys)
	g.lead.cut = map[string]bool{"m2": true}
	g.commit(countDelta(span(0, 30_000), 7))
	g.commit(countDelta(span(20_000, 30_000), 8))
	g.lead.cut = nil
	reads := g.syncAt(2, 1)
	got := reads.of("m1").got
	if len(got.Deltas) != 1 || latestSent(&got) != 0 || reads.pages < 2 {
		t.Fatalf("m1 answered %d deltas and %d whole checkpoints over %d pages; want one delta over pages", len(got.Deltas), latestSent(&got), reads.pages)
	}
	if n := entries(got.Deltas[0].Checkpoint.Groups); n != 50_000 {
		t.Fatalf("the delta of two checkpoints changing 50k keys between them holds %d keys", n)
	}
	g.same(1, 2)
}

// A page resumed from a cursor that was cutting a delta on another base
// than the reader's version now starts that delta again from part 0, on
// the new base: the parts of a delta on one base are not the parts of one
// on another.
func TestSyncCursorOfADeltaOnAnotherBase(t *testing.T) {
	s, lt := storeWithState(t, 60_000)
	defer s.Close()
	x := lt.v
	lt.checkpoint(countDelta(span(0, 30_000), 7))
	y := lt.v
	lt.checkpoint(countDelta(span(30_000, 30_000), 8))
	lt.checkpoint(countDelta(span(0, 30_000), 9))
	ask := func(v uint64) syncAsk {
		return syncAsk{deltas: true, have: []wire.RainstormHave{{Task: lt.task, Version: v, Incarnation: 1}}}
	}
	first := s.snapshot(nil, nil, ask(x))
	if len(first.Deltas) != 1 || !first.More || first.Deltas[0].BaseVersion != x {
		t.Fatalf("the first page holds %d deltas (more: %v); want part 0 of the delta on version %d", len(first.Deltas), first.More, x)
	}
	next := s.snapshot(nil, first.Next, ask(y))
	if len(next.Deltas) == 0 {
		t.Fatalf("the page after, asked on version %d, holds no delta", y)
	}
	if d := next.Deltas[0]; d.Checkpoint.Part != 0 || d.BaseVersion != y {
		t.Fatalf("the page after, asked on version %d, goes on with part %d of a delta on version %d", y, d.Checkpoint.Part, d.BaseVersion)
	}
	if again := s.snapshot(nil, first.Next, ask(x)); len(again.Deltas) == 0 || again.Deltas[0].Checkpoint.Part != 1 {
		t.Fatal("the page after, asked on the same version, does not go on with part 1")
	}
}
