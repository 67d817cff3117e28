package rsstore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/leadership"
	"tempest/transport"
	"tempest/wire"
)

// memberNode is a testNode whose group changes at runtime: each node has
// its own peer view, as each manager does, and answers a learner's copy
// as the manager does (only to a learner, once no commit holds an older
// set).
type memberNode struct {
	*testNode
	view *leadership.PeerView
	down sync.Map // peer id -> true: calls to it fail (set while stores run)
	// onSync, if set, runs as this node answers a leader's sync page.
	onSync func()
}

func (n *memberNode) Call(ctx context.Context, id string, msg wire.Message) (wire.Message, error) {
	if _, down := n.down.Load(id); down {
		return nil, transport.ErrUnreachable
	}
	return n.testNode.Call(ctx, id, msg)
}

func (n *memberNode) Peers() ([]string, int) {
	p := n.view.Load()
	return p.VoterIDs, p.Quorum
}

func (n *memberNode) HoldPeers() ([]string, int, []string, func()) {
	p, release := n.view.Hold()
	return p.VoterIDs, p.Quorum, p.LearnerIDs, release
}

// memberGroup is n0..n(k-1) over one hub, each opened with the voters
// given and no learner.
type memberGroup struct {
	*testGroup
	members map[string]*memberNode
	epoch   uint64
}

func newMemberGroup(t *testing.T, ids []string, voters []string) *memberGroup {
	g := &memberGroup{testGroup: &testGroup{t: t, hub: transport.NewHub(), incs: map[wire.RainstormTask]uint64{}},
		members: map[string]*memberNode{}, epoch: 1}
	for _, id := range ids {
		n := &memberNode{testNode: &testNode{g: g.testGroup, id: id}}
		n.view = leadership.NewPeerView(leadership.NewPeerSet(id, g.config(voters, nil)))
		dir := filepath.Join(t.TempDir(), id)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		st, err := Open(dir, n, Config{NoSync: true, QuorumTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		n.st, n.tr = st, g.hub.Node(id)
		n.tr.Handle(wire.TypeRainstormReplicate, func(_ context.Context, from transport.Peer, msg wire.Message) (wire.Message, error) {
			ack, err := n.st.HandleReplicate(from.NodeID, msg.(*wire.RainstormReplicate))
			if err != nil {
				return nil, err
			}
			return ack, nil
		})
		n.tr.Handle(wire.TypeRainstormSyncRequest, func(ctx context.Context, from transport.Peer, msg wire.Message) (wire.Message, error) {
			req := msg.(*wire.RainstormSyncRequest)
			if req.Term != 0 {
				if n.onSync != nil {
					n.onSync()
				}
				return n.st.HandleSync(req), nil
			}
			if _, ok := n.view.Load().Learners[from.NodeID]; !ok {
				return nil, wire.Errorf(wire.CodeRejected, "%s is not a learner", from.NodeID)
			}
			if _, err := n.view.Settled(ctx); err != nil {
				return nil, err
			}
			return n.st.HandleCopy(req)
		})
		g.members[id] = n
		g.nodes = append(g.nodes, n.testNode)
	}
	t.Cleanup(func() {
		for _, n := range g.members {
			_ = n.tr.Close()
			_ = n.st.Close()
		}
	})
	return g
}

func (g *memberGroup) config(voters, learners []string) *leadership.Configuration {
	c := &leadership.Configuration{Epoch: g.epoch}
	for _, id := range voters {
		c.Members = append(c.Members, leadership.Member{ID: id, QUIC: id})
	}
	for _, id := range learners {
		c.Learners = append(c.Learners, leadership.Member{ID: id, QUIC: id})
	}
	return c
}

// change puts a new configuration into effect on every node.
func (g *memberGroup) change(voters, learners []string) {
	g.epoch++
	c := g.config(voters, learners)
	for id, n := range g.members {
		n.view.Set(leadership.NewPeerSet(id, c))
	}
}

// lead makes id the leader of a new term, synced from the voters from
// (every other node cut off during the sync).
func (g *memberGroup) lead(id string, from ...string) *memberNode {
	g.t.Helper()
	g.term++
	n := g.members[id]
	n.term = g.term
	n.cut = map[string]bool{}
	for other, p := range g.members {
		if other != id && !slices.Contains(from, other) {
			n.cut[other] = true
		} else {
			p.term = g.term
		}
	}
	err := n.st.Sync(context.Background(), g.term)
	n.cut = nil
	if err != nil {
		g.t.Fatal(err)
	}
	return n
}

// countCkpt is version v of a count task: one key per version set to v,
// and a row naming the version.
func countCkpt(task wire.RainstormTask, v uint64) *wire.RainstormCheckpoint {
	c := rowsCkpt(task, 1, v, fmt.Sprintf("%s/%d", task.Workflow, v))
	c.Groups = countDelta([]int{int(v)}, int64(v))
	return c
}

// holdsAll reports whether n holds what lead holds of every task: the same
// latest checkpoint, state and rows.
func holdsAll(lead, n *memberNode, tasks []wire.RainstormTask) error {
	for _, task := range tasks {
		want, got := lead.st.Latest(task), n.st.Latest(task)
		if got == nil || verOf(got) != verOf(want) {
			return fmt.Errorf("%s holds task %s at %v, the leader at %v", n.id, task.Workflow, verOf(got), verOf(want))
		}
		if !reflect.DeepEqual(got.Groups, want.Groups) {
			return fmt.Errorf("%s holds task %s's version %d with another state", n.id, task.Workflow, got.Version)
		}
		if w, h := fields(lead.st.Rows(task)), fields(n.st.Rows(task)); !slices.Equal(w, h) {
			return fmt.Errorf("%s holds task %s's rows %v, the leader %v", n.id, task.Workflow, h, w)
		}
	}
	return nil
}

// A manager added while checkpoints land ends holding every checkpoint the
// voters hold: those acknowledged before it was a learner through its
// copy of the leader's store, those after through the leader's commits,
// whichever of the two reached it first.
func TestLearnerHoldsEveryCheckpoint(t *testing.T) {
	g := newMemberGroup(t, []string{"m0", "m1", "m2", "m3"}, []string{"m0", "m1", "m2"})
	lead := g.lead("m0", "m1", "m2")
	var tasks []wire.RainstormTask
	next := map[wire.RainstormTask]uint64{}
	for i := range 6 {
		task := wire.RainstormTask{Job: "j", Workflow: fmt.Sprintf("p%d", i), Stage: 1}
		tasks = append(tasks, task)
		g.open(lead.testNode, task, 1)
		for range 3 {
			next[task]++
			if !g.put(lead.testNode, countCkpt(task, next[task])) {
				t.Fatalf("task %s version %d not acknowledged", task.Workflow, next[task])
			}
		}
	}

	// Checkpoints go on landing while m3 is added and copies.
	ctx, stop := context.WithCancel(context.Background())
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		acked int
	)
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			task := tasks[i%len(tasks)]
			next[task]++
			if !g.put(lead.testNode, countCkpt(task, next[task])) {
				t.Errorf("task %s version %d not acknowledged", task.Workflow, next[task])
				return
			}
			mu.Lock()
			acked++
			mu.Unlock()
		}
	})
	ackedSoFar := func() int {
		mu.Lock()
		defer mu.Unlock()
		return acked
	}
	waitAcked := func(n int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for ackedSoFar() < n {
			if time.Now().After(deadline) || t.Failed() {
				stop()
				wg.Wait()
				t.Fatalf("%d checkpoints acknowledged, waited for %d", ackedSoFar(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitAcked(10)
	g.change([]string{"m0", "m1", "m2"}, []string{"m3"})
	waitAcked(ackedSoFar() + 10)
	if _, err := g.members["m3"].st.CopyFrom(context.Background(), "m0"); err != nil {
		t.Fatal(err)
	}
	waitAcked(ackedSoFar() + 10)
	stop()
	wg.Wait()

	// The last groups may still be on their way to m3: wait for them.
	waitHoldsAll(t, lead, g.members["m3"], tasks)
}

// The hole the learner path closes: a checkpoint durable on {m0, m1}
// only; m3 added, then m0 removed; a new leader reading the majority
// {m2, m3} of {m1, m2, m3} must find it.
func TestReplacedManagersKeepCheckpoint(t *testing.T) {
	g := newMemberGroup(t, []string{"m0", "m1", "m2", "m3"}, []string{"m0", "m1", "m2"})
	lead := g.lead("m0", "m1", "m2")
	task := wire.RainstormTask{Job: "j", Workflow: "p", Stage: 1}
	g.open(lead.testNode, task, 1)
	lead.cut = map[string]bool{"m2": true}
	for v := uint64(1); v <= 3; v++ {
		if !g.put(lead.testNode, countCkpt(task, v)) {
			t.Fatalf("version %d not acknowledged", v)
		}
	}
	g.change([]string{"m0", "m1", "m2"}, []string{"m3"})
	m3 := g.members["m3"]
	if _, err := m3.st.CopyFrom(context.Background(), "m0"); err != nil {
		t.Fatal(err)
	}
	// Acknowledged after the copy: m3 has it only if the leader sends it.
	if !g.put(lead.testNode, countCkpt(task, 4)) {
		t.Fatal("version 4 not acknowledged")
	}
	deadline := time.Now().Add(20 * time.Second)
	for h := m3.st.Head(task); h == nil || h.Version < 4; h = m3.st.Head(task) {
		if time.Now().After(deadline) {
			t.Fatalf("m3 holds %v of the task, not the version 4 acknowledged after its copy", verOf(h))
		}
		time.Sleep(10 * time.Millisecond)
	}
	lead.cut = nil
	g.change([]string{"m0", "m1", "m2", "m3"}, nil) // m3 promoted
	g.change([]string{"m1", "m2", "m3"}, nil)       // m0 removed
	n := g.lead("m2", "m3")
	if h := n.st.Latest(task); h == nil || h.Version != 4 || !reflect.DeepEqual(h.Groups, lead.st.Latest(task).Groups) {
		t.Fatalf("m2, synced from {m2, m3}, holds %v of the task; version 4 was acknowledged", verOf(h))
	}
	if got, want := fields(n.st.Rows(task)), []string{"p/1", "p/2", "p/3", "p/4"}; !slices.Equal(got, want) {
		t.Fatalf("m2 holds rows %v, want %v", got, want)
	}
}

// Only a leader that read a majority's stores answers a copy: a follower
// (or a new leader before its sync) may lack a checkpoint that majority
// holds, and the learner would count without it.
func TestLearnerCopiesOnlyFromASyncedLeader(t *testing.T) {
	g := newMemberGroup(t, []string{"m0", "m1", "m2", "m3"}, []string{"m0", "m1", "m2"})
	lead := g.lead("m0", "m1", "m2")
	task := wire.RainstormTask{Job: "j", Workflow: "p", Stage: 1}
	g.open(lead.testNode, task, 1)
	if !g.put(lead.testNode, countCkpt(task, 1)) {
		t.Fatal("version 1 not acknowledged")
	}
	g.change([]string{"m0", "m1", "m2"}, []string{"m3"})
	m3 := g.members["m3"]
	if _, err := m3.st.CopyFrom(context.Background(), "m1"); err == nil {
		t.Fatal("a follower answered a learner's copy")
	}
	if _, err := m3.st.CopyFrom(context.Background(), "m0"); err != nil {
		t.Fatal(err)
	}
	if h := m3.st.Head(task); h == nil || h.Version != 1 {
		t.Fatalf("m3 copied %v of the task", verOf(h))
	}
}

// A learner that cannot be reached fails no commit: the voters' majority
// answers. Its feed keeps the groups and sends them, in order, once it can
// be reached.
func TestUnreachableLearnerFailsNoCommitAndCatchesUp(t *testing.T) {
	g, lead, m3, task := learnerCopied(t)
	lead.down.Store("m3", true)
	for v := uint64(1); v <= 20; v++ {
		if !g.put(lead.testNode, countCkpt(task, v)) {
			t.Fatalf("version %d not acknowledged while the learner is unreachable", v)
		}
	}
	if h := m3.st.Head(task); h != nil && h.Version > 0 {
		t.Fatalf("the unreachable learner holds version %d", h.Version)
	}
	lead.down.Delete("m3")
	waitHoldsAll(t, lead, m3, []wire.RainstormTask{task})
}

// removalGate is the manager's wait before a removal of id, on lead.
func removalGate(ctx context.Context, lead *memberNode, id string) error {
	return lead.st.RemovalFed(ctx, func(ctx context.Context) ([]string, error) {
		p, err := lead.view.Settled(ctx)
		if err != nil {
			return nil, err
		}
		return p.VoterIDs, nil
	}, id)
}

// A learner promoted while its feed still holds a group: a removal must
// wait for the group to reach it, or the checkpoint sits on one of the
// three voters left ({m1}: m2 was cut off when it committed).
func TestRemovalWaitsForAPromotedLearnersFeed(t *testing.T) {
	g, lead, m3, task := learnerCopied(t)
	lead.cut = map[string]bool{"m2": true}
	lead.down.Store("m3", true)
	if !g.put(lead.testNode, countCkpt(task, 1)) {
		t.Fatal("version 1 not acknowledged")
	}
	g.change([]string{"m0", "m1", "m2", "m3"}, nil) // m3 promoted, version 1 still queued for it

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := removalGate(ctx, lead, "m0")
	cancel()
	if err == nil {
		t.Fatalf("a removal of m0 may go ahead while m3 holds %v of the task, not the acknowledged version 1", verOf(m3.st.Head(task)))
	}
	lead.down.Delete("m3")
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := removalGate(ctx, lead, "m0"); err != nil {
		t.Fatal(err)
	}
	g.change([]string{"m1", "m2", "m3"}, nil) // m0 removed
	n := g.lead("m2", "m3")                   // m1 lost
	if h := n.st.Latest(task); h == nil || h.Version != 1 {
		t.Fatalf("m2, synced from {m2, m3}, holds %v of the task; version 1 was acknowledged", verOf(h))
	}
}

// learnerMissedByLeader is m0 leading {m0, m1, m2} with the learner m3,
// which copied m0's store and then missed versions 2..4 of two tasks: m0's
// feed can no longer reach it.
func learnerMissedByLeader(t *testing.T) (*memberGroup, []wire.RainstormTask) {
	g := newMemberGroup(t, []string{"m0", "m1", "m2", "m3"}, []string{"m0", "m1", "m2"})
	lead := g.lead("m0", "m1", "m2")
	tasks := []wire.RainstormTask{{Job: "j", Workflow: "p", Stage: 1}, {Job: "j", Workflow: "q", Stage: 1}}
	for _, task := range tasks {
		g.open(lead.testNode, task, 1)
		if !g.put(lead.testNode, countCkpt(task, 1)) {
			t.Fatal("version 1 not acknowledged")
		}
	}
	g.change([]string{"m0", "m1", "m2"}, []string{"m3"})
	if _, err := g.members["m3"].st.CopyFrom(context.Background(), "m0"); err != nil {
		t.Fatal(err)
	}
	lead.down.Store("m3", true)
	for _, task := range tasks {
		for v := uint64(2); v <= 4; v++ {
			if !g.put(lead.testNode, countCkpt(task, v)) {
				t.Fatalf("version %d not acknowledged", v)
			}
		}
	}
	return g, tasks
}

// waitHoldsAll waits until n holds what lead holds of every task.
func waitHoldsAll(t *testing.T, lead, n *memberNode, tasks []wire.RainstormTask) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error { return holdsAll(lead, n, tasks) })
}

// A leader deposed before its feed sent a learner its last groups: the
// next leader's feed starts by reading the learner's store and sending it
// what it lacks, so the learner ends holding them without any new commit.
func TestNewLeaderCatchesUpItsLearners(t *testing.T) {
	g, tasks := learnerMissedByLeader(t)
	m1, m3 := g.members["m1"], g.members["m3"]
	m1.down.Store("m3", true) // m3 unreachable through m1's sync too: the catch-up retries
	g.lead("m1", "m2")
	m1.down.Delete("m3")
	waitHoldsAll(t, m1, m3, tasks)
	if h := m3.st.Head(tasks[0]); h.Version != 4 {
		t.Fatalf("m3 holds version %d, 4 was acknowledged", h.Version)
	}
}

// A learner promoted while the next leader's sync runs: the sync read the
// voters without it and spread what it merged on a majority of those, so
// the promoted voter is caught up as a learner would be, and a removal
// waits for that.
func TestNewLeaderCatchesUpAVoterPromotedDuringItsSync(t *testing.T) {
	g, tasks := learnerMissedByLeader(t)
	m1, m2, m3 := g.members["m1"], g.members["m2"], g.members["m3"]
	var once sync.Once
	m2.onSync = func() {
		once.Do(func() { g.change([]string{"m0", "m1", "m2", "m3"}, nil) }) // m3 promoted
	}
	m1.down.Store("m3", true)
	g.lead("m1", "m2")
	if p := m1.view.Load(); !slices.Contains(p.VoterIDs, "m3") {
		t.Fatalf("m3 not promoted during the sync: voters %v", p.VoterIDs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := removalGate(ctx, m1, "m0")
	cancel()
	if err == nil {
		t.Fatalf("a removal of m0 may go ahead while m3 holds %v, not the acknowledged version 4", verOf(m3.st.Head(tasks[0])))
	}
	m1.down.Delete("m3")
	waitHoldsAll(t, m1, m3, tasks)
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := removalGate(ctx, m1, "m0"); err != nil {
		t.Fatal(err)
	}
}

// learnerCopied is voters m0 (leading), m1 and m2 with one task opened,
// and m3 added as a learner that has copied m0's store.
func learnerCopied(t *testing.T) (*memberGroup, *memberNode, *memberNode, wire.RainstormTask) {
	t.Helper()
	g := newMemberGroup(t, []string{"m0", "m1", "m2", "m3"}, []string{"m0", "m1", "m2"})
	lead := g.lead("m0", "m1", "m2")
	task := wire.RainstormTask{Job: "j", Workflow: "p", Stage: 1}
	g.open(lead.testNode, task, 1)
	g.change([]string{"m0", "m1", "m2"}, []string{"m3"})
	m3 := g.members["m3"]
	if _, err := m3.st.CopyFrom(context.Background(), "m0"); err != nil {
		t.Fatal(err)
	}
	return g, lead, m3, task
}
