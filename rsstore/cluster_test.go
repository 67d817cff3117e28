package rsstore

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/rainstorm/ckpt"
	"tempest/transport"
	"tempest/wire"
)

// testGroup is three stores over a transport.Hub, with the job table (each
// task's running incarnation) and the cuts a test sets per commit.
type testGroup struct {
	t     *testing.T
	hub   *transport.Hub
	nodes []*testNode
	incs  map[wire.RainstormTask]uint64
	term  uint64
}

type testNode struct {
	g    *testGroup
	id   string
	tr   transport.Transport
	st   *Store
	term uint64
	cut  map[string]bool // peers this node cannot reach
	lose map[string]bool // peers whose answers to this node are lost
	// old makes this node a store from before deltas: it answers a sync
	// as if the request did not say it takes them (an unknown field).
	old bool
	// lateEvery > 0 loses the answer to every lateEvery-th sync page this
	// node asks of each peer (a page that outlasted its timeout).
	lateEvery int
	pageMu    sync.Mutex
	pageCalls map[string]int
}

// late reports whether the answer to this sync page is to be lost, and
// counts the page.
func (n *testNode) late(id string) bool {
	n.pageMu.Lock()
	defer n.pageMu.Unlock()
	if n.pageCalls == nil {
		n.pageCalls = map[string]int{}
	}
	n.pageCalls[id]++
	return n.pageCalls[id]%n.lateEvery == 0
}

func (n *testNode) pageCallsTotal() int {
	n.pageMu.Lock()
	defer n.pageMu.Unlock()
	total := 0
	for _, c := range n.pageCalls {
		total += c
	}
	return total
}

func newTestGroup(t *testing.T) *testGroup {
	g := &testGroup{t: t, hub: transport.NewHub(), incs: map[wire.RainstormTask]uint64{}}
	for i := range 3 {
		n := &testNode{g: g, id: fmt.Sprintf("m%d", i)}
		dir := filepath.Join(t.TempDir(), n.id)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		st, err := Open(dir, n, Config{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		n.st, n.tr = st, g.hub.Node(n.id)
		n.tr.Handle(wire.TypeRainstormReplicate, func(_ context.Context, from transport.Peer, msg wire.Message) (wire.Message, error) {
			ack, err := n.st.HandleReplicate(from.NodeID, msg.(*wire.RainstormReplicate))
			if err != nil {
				return nil, err
			}
			return ack, nil
		})
		n.tr.Handle(wire.TypeRainstormSyncRequest, func(_ context.Context, _ transport.Peer, msg wire.Message) (wire.Message, error) {
			req := *msg.(*wire.RainstormSyncRequest)
			if n.old {
				req.Deltas = false
			}
			return n.st.HandleSync(&req), nil
		})
		g.nodes = append(g.nodes, n)
	}
	t.Cleanup(func() {
		for _, n := range g.nodes {
			_ = n.tr.Close()
			_ = n.st.Close()
		}
	})
	return g
}

// elect makes node i the leader of a new term, synced from the peers from.
func (g *testGroup) elect(i int, from ...int) *testNode {
	g.t.Helper()
	g.term++
	n := g.nodes[i]
	n.term = g.term
	for j, p := range g.nodes {
		if j != i && !slices.Contains(from, j) {
			n.cut = map[string]bool{p.id: true}
		}
	}
	for _, j := range from {
		g.nodes[j].term = g.term
	}
	err := n.st.Sync(context.Background(), g.term)
	n.cut = nil
	if err != nil {
		g.t.Fatal(err)
	}
	return n
}

func (g *testGroup) open(n *testNode, task wire.RainstormTask, inc uint64) {
	g.t.Helper()
	g.incs[task] = inc
	if res := n.st.Commit(context.Background(), n.term, []*Request{{Open: &wire.RainstormOpen{Task: task, Incarnation: inc}}}); res[0].Err != nil {
		g.t.Fatalf("open %d: %v", inc, res[0].Err)
	}
}

// put commits c at n and reports whether it was acknowledged.
func (g *testGroup) put(n *testNode, c *wire.RainstormCheckpoint) bool {
	res := n.st.Commit(context.Background(), n.term, []*Request{{Ckpt: c}})
	a, ok := res[0].Msg.(*wire.RainstormCheckpointAck)
	return res[0].Err == nil && ok && !a.Refused
}

func (n *testNode) Peers() ([]string, int) {
	var ids []string
	for _, p := range n.g.nodes {
		if p != n {
			ids = append(ids, p.id)
		}
	}
	return ids, 2
}

func (n *testNode) Call(ctx context.Context, id string, msg wire.Message) (wire.Message, error) {
	if n.cut[id] {
		return nil, transport.ErrUnreachable
	}
	resp, err := n.tr.Call(ctx, id, msg)
	if _, ok := msg.(*wire.RainstormSyncRequest); ok && n.lateEvery > 0 && n.late(id) {
		return nil, fmt.Errorf("page from %s: %w", id, context.DeadlineExceeded)
	}
	if n.lose[id] {
		return nil, fmt.Errorf("answer from %s lost", id)
	}
	return resp, err
}

func (n *testNode) Admit(r *Request) *Result {
	inc := n.g.incs[r.Task()]
	if r.Open != nil && r.Open.Incarnation != inc {
		return &Result{Err: wire.Errorf(wire.CodeStaleFence, "not the running incarnation")}
	}
	if r.Ckpt != nil && r.Ckpt.Incarnation != inc {
		return &Result{Msg: FencedAck(r.Ckpt, "not the running incarnation")}
	}
	return nil
}

func (n *testNode) Opened(uint64, []*wire.RainstormOpen) {}

func (n *testNode) StaleReason(_ string, term uint64) string {
	if term < n.term {
		return "stale term"
	}
	return ""
}

func (n *testNode) Logger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func rowsCkpt(task wire.RainstormTask, inc, version uint64, rows ...string) *wire.RainstormCheckpoint {
	c := &wire.RainstormCheckpoint{Task: task, Incarnation: inc, Version: version}
	for _, r := range rows {
		c.Rows = append(c.Rows, wire.RainstormRecord{ID: version, Fields: []string{r}})
	}
	return c
}

func fields(rows []wire.RainstormRecord) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.Fields[0])
	}
	return out
}

// H1: a group that missed its majority is undone on the leader only; the
// peer it reached keeps its rows. The task is replaced, and its successor
// writes that version without rows. A manager elected later must not join
// the replaced incarnation's rows (keyed by version alone, it did).
func TestReplacedIncarnationRowsNotJoined(t *testing.T) {
	g := newTestGroup(t)
	task := wire.RainstormTask{Job: "j", Workflow: "p", Stage: 2}
	lead := g.elect(0, 1, 2)
	g.open(lead, task, 1)
	if !g.put(lead, rowsCkpt(task, 1, 1, "a")) {
		t.Fatal("version 1 not acknowledged")
	}
	lead.cut, lead.lose = map[string]bool{"m2": true}, map[string]bool{"m1": true}
	if g.put(lead, rowsCkpt(task, 1, 2, "b")) {
		t.Fatal("a group on one peer whose answer was lost was acknowledged")
	}
	lead.cut, lead.lose = nil, nil
	g.open(lead, task, 2) // the replacement opens at version 1
	if !g.put(lead, rowsCkpt(task, 2, 2)) {
		t.Fatal("the replacement's version 2 not acknowledged")
	}
	for i := range 3 {
		n := g.elect(i, (i+1)%3)
		if got := fields(n.st.Rows(task)); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("m%d elected shows rows %v, want [a]: a replaced incarnation's rows joined", i, got)
		}
		// A cursor follows the lineage as Rows does (rowsiter.go).
		if got := fields(cursorRows(n.st.RowsCursor(task))); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("m%d's cursor reads rows %v, want [a]", i, got)
		}
	}
}

// H2: a new leader's merge adopts a version only the peer an undone group
// reached holds. Before it answers anyone, a majority must hold it: else
// a resend is told "already stored" and the next leader may never see it.
func TestAdoptedCheckpointOnMajorityBeforeAnswer(t *testing.T) {
	g := newTestGroup(t)
	task := wire.RainstormTask{Job: "j", Workflow: "p", Stage: 1}
	lead := g.elect(0, 1, 2)
	g.open(lead, task, 1)
	if !g.put(lead, rowsCkpt(task, 1, 1)) {
		t.Fatal("version 1 not acknowledged")
	}
	lead.cut, lead.lose = map[string]bool{"m2": true}, map[string]bool{"m1": true}
	if g.put(lead, rowsCkpt(task, 1, 2, "b")) {
		t.Fatal("a group on one peer whose answer was lost was acknowledged")
	}
	lead = g.elect(1, 2) // m1 holds version 2; m2 does not
	if !g.put(lead, rowsCkpt(task, 1, 2, "b")) {
		t.Fatal("the resend of the adopted version was not acknowledged")
	}
	if l := g.nodes[2].st.Latest(task); l == nil || l.Version != 2 {
		t.Fatalf("version 2 acknowledged while m2 holds %+v: on m1 alone", l)
	}
	if got := fields(g.nodes[2].st.Rows(task)); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("m2's rows %v, want [b]", got)
	}
	// A deposed leader (m0 still believes it leads term 1) answers no task.
	if res := g.nodes[0].st.Commit(context.Background(), 1, []*Request{{Ckpt: rowsCkpt(task, 1, 2, "b")}}); res[0].Err == nil {
		t.Fatalf("a deposed leader answered %+v", res[0].Msg)
	}
}

// H4: a peer that missed a group is caught up by a whole state, which
// carries the rows of its own version only. Once a new leader has synced
// from it, it holds every version's rows: a later leader that reads it
// and a manager it does not share them with still shows them all.
func TestFollowerGetsRowsItMissed(t *testing.T) {
	g := newTestGroup(t)
	task := wire.RainstormTask{Job: "j", Workflow: "p", Stage: 1}
	lead := g.elect(0, 1, 2)
	g.open(lead, task, 1)
	lead.cut = map[string]bool{"m2": true}
	if !g.put(lead, rowsCkpt(task, 1, 1, "a")) || !g.put(lead, rowsCkpt(task, 1, 2, "b")) {
		t.Fatal("versions on m0 and m1 not acknowledged")
	}
	lead.cut = nil
	if !g.put(lead, rowsCkpt(task, 1, 3, "c")) {
		t.Fatal("version 3 not acknowledged")
	}
	if got := fields(g.nodes[2].st.Rows(task)); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("m2, caught up by a whole state, holds rows %v; want [c] (the test's premise)", got)
	}
	g.elect(1, 2) // m1 leads, synced from m2
	if got := fields(g.nodes[2].st.Rows(task)); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("m2 after the sync holds rows %v, want [a b c]", got)
	}
}

// bigState is a count task's state of n keys over the key groups, each
// key padded so that a few hundred thousand bytes of keys add up fast.
func bigState(n int) []wire.RainstormGroupState {
	pad := strings.Repeat("p", 200)
	gs := make([]wire.RainstormGroupState, ckpt.KeyGroups)
	for g := range gs {
		gs[g].Group = g
	}
	for i := range n {
		g := i % ckpt.KeyGroups
		gs[g].Entries = append(gs[g].Entries, wire.RainstormAggregate{Key: fmt.Sprintf("k%08d-%s", i, pad), Count: int64(i%5 + 1)})
	}
	return gs
}

// A new leader spreads what a store it read lacks; a state over the
// transport's cap (the hub refuses a message over it, as QUIC does) and a
// rows record over a page go in parts, and the peer joins them before it
// stores them: else the sync fails and the term never answers a task.
func TestSpreadStateOverMessageCap(t *testing.T) {
	g := newTestGroup(t)
	task := wire.RainstormTask{Job: "j", Workflow: "p", Stage: 1}
	lead := g.elect(0, 1, 2)
	g.open(lead, task, 1)
	lead.cut = map[string]bool{"m2": true} // m2 misses the state
	c := &wire.RainstormCheckpoint{Task: task, Incarnation: 1, Version: 1, Groups: bigState(50_000)}
	for i := range 25_000 {
		c.Rows = append(c.Rows, wire.RainstormRecord{ID: uint64(i), Fields: []string{strings.Repeat("r", 200)}})
	}
	if ckpt.Size(c) <= wire.MaxMessageSize {
		t.Fatalf("the checkpoint's %d bytes fit one message: the test's premise", ckpt.Size(c))
	}
	// Moving 12 MB takes a few messages, each bounded by QuorumTimeout:
	// on a loaded machine a round may miss it, and the task resends, as
	// a leader whose sync failed syncs again.
	testutil.Eventually(t, 2*time.Minute, 10*time.Millisecond, func() error {
		res := lead.st.Commit(context.Background(), lead.term, []*Request{{Ckpt: c}})
		if a, ok := res[0].Msg.(*wire.RainstormCheckpointAck); res[0].Err != nil || !ok || a.Refused {
			return fmt.Errorf("version 1 not acknowledged by m0 and m1: %v %+v", res[0].Err, res[0].Msg)
		}
		return nil
	})
	lead.cut = nil
	if l := g.nodes[2].st.Latest(task); l != nil && l.Version != 0 {
		t.Fatalf("m2 holds version %d: the test's premise is that it missed version 1", l.Version)
	}
	// m1 leads, synced from m2, which lacks the state and its rows.
	g.term++
	for _, i := range []int{1, 2} {
		g.nodes[i].term = g.term
	}
	g.nodes[1].cut = map[string]bool{"m0": true}
	testutil.Eventually(t, 2*time.Minute, 10*time.Millisecond, func() error {
		return g.nodes[1].st.Sync(context.Background(), g.term)
	})
	l := g.nodes[2].st.Latest(task)
	if l == nil || l.Version != 1 || l.Incarnation != 1 {
		t.Fatalf("m2 after the sync holds %+v, want version 1 of incarnation 1", l)
	}
	if !reflect.DeepEqual(l.Groups, c.Groups) {
		t.Fatal("m2's state after the sync is not the leader's")
	}
	if rows := g.nodes[2].st.Rows(task); len(rows) != len(c.Rows) {
		t.Fatalf("m2 after the sync holds %d rows, want %d", len(rows), len(c.Rows))
	}
	if len(l.Opened) != 1 || l.Opened[0].Incarnation != 1 {
		t.Fatalf("m2's lineage %+v, want incarnation 1's open", l.Opened)
	}
}

// A new leader's sync of a store over several pages, where some page of
// each peer is late in every attempt, still ends: an attempt goes on from
// the page the last one stopped at. Read again from the first page every
// attempt, it never ended, and the term answered no task.
func TestSyncResumesAfterALatePage(t *testing.T) {
	g := newTestGroup(t)
	task := wire.RainstormTask{Job: "j", Workflow: "p", Stage: 1}
	lead := g.elect(1, 2)
	g.open(lead, task, 1)
	c := &wire.RainstormCheckpoint{Task: task, Incarnation: 1, Version: 1, Groups: bigState(12_000)}
	if ckpt.Size(c) <= 2*syncPage {
		t.Fatalf("the checkpoint's %d bytes fit two sync pages: the test's premise is three", ckpt.Size(c))
	}
	lead.cut = map[string]bool{"m0": true} // m0 lacks the state: it reads every page
	testutil.Eventually(t, 2*time.Minute, 10*time.Millisecond, func() error {
		if !g.put(lead, c) {
			return fmt.Errorf("version 1 not acknowledged")
		}
		return nil
	})
	lead.cut = nil

	// m0 leads; every second page it asks of a peer is late.
	g.term++
	for _, n := range g.nodes {
		n.term = g.term
	}
	m0 := g.nodes[0]
	m0.lateEvery = 2
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m0.st.Lead(ctx, g.term)
	}()
	defer func() {
		cancel()
		<-done
	}()
	testutil.Eventually(t, time.Minute, 10*time.Millisecond, func() error {
		if !m0.st.Synced(g.term) {
			return fmt.Errorf("m0 has not synced term %d after %d pages asked", g.term, m0.pageCallsTotal())
		}
		return nil
	})
	l := m0.st.Latest(task)
	if l == nil || l.Version != 1 || !reflect.DeepEqual(l.Groups, c.Groups) {
		t.Fatalf("m0 after its sync holds %+v, want version 1 and its state", l)
	}
}

// wholeSends records, per peer, how many whole states (or parts of one)
// the leader sent it in replicated groups, and how many deltas, and the
// estimated bytes of both.
type wholeSends struct {
	mu     sync.Mutex
	to     map[string]int
	deltas map[string]int
	bytes  map[string]int
}

func (w *wholeSends) watch(g *testGroup) {
	w.to, w.deltas, w.bytes = map[string]int{}, map[string]int{}, map[string]int{}
	g.hub.SetHook(func(_, to string, msg wire.Message) bool {
		if r, ok := msg.(*wire.RainstormReplicate); ok {
			w.mu.Lock()
			w.to[to] += len(r.Checkpoints)
			w.deltas[to] += len(r.Deltas)
			for i := range r.Checkpoints {
				w.bytes[to] += ckpt.Size(&r.Checkpoints[i])
			}
			for i := range r.Deltas {
				w.bytes[to] += ckpt.Size(&r.Deltas[i].Checkpoint)
			}
			w.mu.Unlock()
		}
		return true
	})
	g.t.Cleanup(func() { g.hub.SetHook(nil) })
}

func (w *wholeSends) of(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.to[id]
}

func (w *wholeSends) deltasOf(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.deltas[id]
}

func (w *wholeSends) bytesOf(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.bytes[id]
}

// A replacement's open changes no entry of its task's state: it reaches
// the peers as its head alone, and each peer ends up with the new
// incarnation, its lineage and every key. And a peer whose answer to a
// round came too late (it stored the group) gets the next checkpoint as a
// delta. Both went whole: a million-key count shipped its whole state to
// every peer on each open, and on every checkpoint after one late answer.
func TestOpenAndLateAnswerReplicateAsDeltas(t *testing.T) {
	g := newTestGroup(t)
	task := wire.RainstormTask{Job: "j", Workflow: "p", Stage: 1}
	lead := g.elect(0, 1, 2)
	g.open(lead, task, 1)
	state := bigState(4_000)
	if !g.put(lead, &wire.RainstormCheckpoint{Task: task, Incarnation: 1, Version: 1, Groups: state}) {
		t.Fatal("version 1 not acknowledged")
	}
	var sends wholeSends
	sends.watch(g)
	g.open(lead, task, 2)
	for _, n := range g.nodes {
		l := n.st.Latest(task)
		if l == nil || l.Incarnation != 2 || len(l.Opened) != 2 || l.Opened[1] != (wire.RainstormOpened{Incarnation: 2, Version: 1}) {
			t.Fatalf("%s after the open holds %+v", n.id, l)
		}
		if !reflect.DeepEqual(l.Groups, state) {
			t.Fatalf("%s after the open holds %d groups, want %d", n.id, len(l.Groups), len(state))
		}
	}
	if n := sends.of("m1") + sends.of("m2"); n > 0 {
		t.Fatalf("the open sent %d whole states to peers that held its base", n)
	}

	lead.lose = map[string]bool{"m1": true} // m1 stores version 2; its answer is lost
	delta := []wire.RainstormGroupState{{Group: 3, Entries: []wire.RainstormAggregate{{Key: "a", Count: 1}}}}
	if !g.put(lead, &wire.RainstormCheckpoint{Task: task, Incarnation: 2, Version: 2, Groups: delta}) {
		t.Fatal("version 2 not acknowledged by m0 and m2")
	}
	lead.lose = nil
	delta[0].Entries[0].Count = 2
	if !g.put(lead, &wire.RainstormCheckpoint{Task: task, Incarnation: 2, Version: 3, Groups: delta}) {
		t.Fatal("version 3 not acknowledged")
	}
	if n := sends.of("m1"); n > 0 {
		t.Fatalf("m1, which stored version 2 but whose answer was lost, was sent %d whole states", n)
	}
	want := ckpt.ComposeGroups(state, delta)
	for _, n := range g.nodes {
		if l := n.st.Latest(task); l == nil || l.Version != 3 || !reflect.DeepEqual(l.Groups, want) {
			t.Fatalf("%s holds %v", n.id, l != nil && reflect.DeepEqual(l.Groups, want))
		}
	}
}

// stateMissedByM2 is a group of three where m0 leads, a task opened on
// all three and its version 1, a state of 10k keys, stored on m0 and m1
// only: m2 holds only the open.
func stateMissedByM2(t *testing.T) (*testGroup, wire.RainstormTask, *wire.RainstormCheckpoint) {
	t.Helper()
	g := newTestGroup(t)
	task := wire.RainstormTask{Job: "j", Workflow: "p", Stage: 1}
	lead := g.elect(0, 1, 2)
	g.open(lead, task, 1)
	lead.cut = map[string]bool{"m2": true} // m2 misses the state
	c := &wire.RainstormCheckpoint{Task: task, Incarnation: 1, Version: 1, Groups: bigState(10_000)}
	testutil.Eventually(t, time.Minute, 10*time.Millisecond, func() error {
		if !g.put(lead, c) {
			return fmt.Errorf("version 1 not acknowledged by m0 and m1")
		}
		return nil
	})
	lead.cut = nil
	return g, task, c
}

// A new leader's spread sends each peer what that peer lacks: the peer
// that missed a state gets it, the one that holds it gets nothing. When
// every peer got whatever any store lacked, a million-key state went to
// every peer after each leader change, each message bounded by the quorum
// timeout, and syncs missed their majority ("what the sync read is on 1
// managers").
func TestSpreadSendsEachPeerWhatItLacks(t *testing.T) {
	g, task, c := stateMissedByM2(t)

	var w wholeSends
	w.watch(g)
	g.term++
	for _, n := range g.nodes {
		n.term = g.term
	}
	testutil.Eventually(t, time.Minute, 10*time.Millisecond, func() error {
		return g.nodes[1].st.Sync(context.Background(), g.term)
	})
	if l := g.nodes[2].st.Latest(task); l == nil || l.Version != 1 || !reflect.DeepEqual(l.Groups, c.Groups) {
		t.Fatalf("m2 after the sync holds %+v, want version 1 and its state", l)
	}
	if w.bytesOf("m2") < ckpt.Size(c)/2 || w.of("m0")+w.deltasOf("m0") != 0 {
		t.Fatalf("the new leader sent %d bytes to m2, which lacked the state, and %d checkpoints to m0, which held it; want the state and none",
			w.bytesOf("m2"), w.of("m0")+w.deltasOf("m0"))
	}
}

// A new leader that holds a task's latest version reads no state of it
// from a peer holding the same: the peer names it. Read in full from
// every peer, a million-key state cost each leader change some 30 pages
// per peer, each about a second on a loaded host, while no task could
// checkpoint; and a peer holding another version still sends its state.
func TestSyncReadsNoStateTheLeaderHolds(t *testing.T) {
	g, task, c := stateMissedByM2(t)
	size := ckpt.Size(c)

	g.term++
	for _, n := range g.nodes {
		n.term = g.term
	}
	reads := &syncReads{}
	testutil.Eventually(t, time.Minute, 10*time.Millisecond, func() error {
		return g.nodes[1].st.sync(context.Background(), g.term, reads)
	})
	if got := reads.of("m0").got; len(got.Checkpoints) != 0 || len(got.Same) != 1 || got.Same[0].Version != 1 {
		t.Fatalf("m0, holding version 1 as the leader does, sent %d checkpoints and named %+v; want none and version 1", len(got.Checkpoints), got.Same)
	}
	if reads.bytes > size/4 {
		t.Fatalf("the sync read %d bytes for a state of %d the leader holds", reads.bytes, size)
	}
	if l := g.nodes[2].st.Latest(task); l == nil || l.Version != 1 || !reflect.DeepEqual(l.Groups, c.Groups) {
		t.Fatalf("m2 after the sync holds %+v, want version 1 and its state", l)
	}
}
