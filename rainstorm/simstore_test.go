package rainstorm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"tempest/rsstore"
	"tempest/transport"
	"tempest/wire"
)

// The replicated-store model: the simulation's tasks checkpoint to three
// real rsstore.Stores, one per manager, over a transport.Hub. The model
// plays the managers' job table (each task's running incarnation, which
// the store's Host admits requests by) and their elections, and it cuts
// the network per commit: a group that reaches no peer, one that reaches
// a peer whose answer is lost (undone on the leader, kept by that peer),
// a peer that misses a group and is caught up later by whole state, a
// leader change that syncs from a majority, and a checkpoint that reaches
// a deposed leader that still believes it leads.

type storeFaults struct {
	minority float64 // per put: the group reaches no peer
	lostAck  float64 // per put: one peer stores the group, its answer is lost, the other is cut off
	behind   float64 // per put: one peer misses the group
	elect    float64 // per put: a leader change first
	deposed  float64 // per put: it reaches a deposed leader instead
}

var storeHeavy = storeFaults{minority: 0.04, lostAck: 0.06, behind: 0.1, elect: 0.03, deposed: 0.05}

var errLostAnswer = errors.New("the answer was lost")

type replNode struct {
	model *replStore
	id    string
	tr    transport.Transport
	st    *rsstore.Store
	term  uint64 // the newest term this manager knows of
	leads uint64 // the term it believes it leads (and synced) in; 0: none
	cut   map[string]bool
	lose  map[string]bool
}

type replStore struct {
	t      testing.TB
	r      *rand.Rand
	f      storeFaults
	hub    *transport.Hub
	nodes  []*replNode
	leader int
	term   uint64
	incs   map[wire.RainstormTask]uint64
	closed bool

	// What the faults did, for the test to check they happened.
	undone, lost, behind, elections, deposedPuts int
}

func newReplStore(t testing.TB, seed uint64, f storeFaults) *replStore {
	t.Helper()
	m := &replStore{t: t, r: rand.New(rand.NewPCG(seed, 0x570e)), f: f, hub: transport.NewHub(transport.WithSeed(seed)),
		incs: map[wire.RainstormTask]uint64{}}
	dir := t.TempDir()
	for i := range 3 {
		n := &replNode{model: m, id: fmt.Sprintf("m%d", i)}
		n.tr = m.hub.Node(n.id)
		ndir := filepath.Join(dir, n.id)
		if err := os.Mkdir(ndir, 0o700); err != nil {
			t.Fatal(err)
		}
		st, err := rsstore.Open(ndir, n, rsstore.Config{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		n.st = st
		n.tr.Handle(wire.TypeRainstormReplicate, func(_ context.Context, from transport.Peer, msg wire.Message) (wire.Message, error) {
			ack, err := n.st.HandleReplicate(from.NodeID, msg.(*wire.RainstormReplicate))
			if err != nil {
				return nil, err
			}
			return ack, nil
		})
		n.tr.Handle(wire.TypeRainstormSyncRequest, func(_ context.Context, _ transport.Peer, msg wire.Message) (wire.Message, error) {
			return n.st.HandleSync(msg.(*wire.RainstormSyncRequest)), nil
		})
		m.nodes = append(m.nodes, n)
	}
	t.Cleanup(m.Close) // when a run fails before its own Close
	m.elect(0, []int{1, 2})
	return m
}

// Close stops the managers, once.
func (m *replStore) Close() {
	if m.closed {
		return
	}
	m.closed = true
	for _, n := range m.nodes {
		_ = n.tr.Close()
		_ = n.st.Close()
	}
}

// elect makes node i the leader of a new term, synced from the peers
// named (with it, a majority); they learn the term.
func (m *replStore) elect(i int, from []int) {
	m.term++
	m.leader = i
	m.elections++
	n := m.nodes[i]
	n.term = m.term
	for _, p := range m.nodes {
		if p != n && !slices.Contains(from, slices.Index(m.nodes, p)) {
			n.cut = setOf(n.cut, p.id)
		}
	}
	for _, j := range from {
		m.nodes[j].term = m.term
		m.nodes[j].leads = 0
	}
	err := n.st.Sync(context.Background(), m.term)
	n.cut = nil
	if err != nil {
		m.t.Fatalf("term %d: %s syncs from %v: %v", m.term, n.id, from, err)
	}
	n.leads = m.term
}

func setOf(s map[string]bool, id string) map[string]bool {
	if s == nil {
		s = map[string]bool{}
	}
	s[id] = true
	return s
}

// electRandom moves the lead to another manager, which syncs from both
// others or from one: half the time the one that is not the old leader,
// which is then deposed without knowing it.
func (m *replStore) electRandom() {
	old := m.leader
	i := (old + 1 + m.r.IntN(2)) % 3
	third := 3 - i - old
	switch m.r.IntN(4) {
	case 0, 1:
		m.elect(i, []int{third})
	case 2:
		m.elect(i, []int{old})
	default:
		m.elect(i, []int{old, third})
	}
}

// rsstore.Host, one per manager.

func (n *replNode) Peers() ([]string, int) {
	var ids []string
	for _, p := range n.model.nodes {
		if p != n {
			ids = append(ids, p.id)
		}
	}
	return ids, 2
}

func (n *replNode) Call(ctx context.Context, id string, msg wire.Message) (wire.Message, error) {
	if n.cut[id] {
		return nil, fmt.Errorf("%s -> %s: %w", n.id, id, transport.ErrUnreachable)
	}
	resp, err := n.tr.Call(ctx, id, msg)
	if n.lose[id] {
		return nil, errLostAnswer
	}
	return resp, err
}

func (n *replNode) Admit(r *rsstore.Request) *rsstore.Result {
	inc := n.model.incs[r.Task()]
	if o := r.Open; o != nil {
		if o.Incarnation != inc {
			return &rsstore.Result{Err: wire.Errorf(wire.CodeStaleFence, "incarnation %d is not the running %d", o.Incarnation, inc)}
		}
		return nil
	}
	if r.Ckpt.Incarnation != inc {
		return &rsstore.Result{Msg: rsstore.FencedAck(r.Ckpt, "not the running incarnation")}
	}
	return nil
}

func (n *replNode) Opened(uint64, []*wire.RainstormOpen) {}

func (n *replNode) StaleReason(sender string, term uint64) string {
	if term < n.term {
		return fmt.Sprintf("stale term %d: %s is in term %d", term, n.id, n.term)
	}
	return ""
}

func (n *replNode) Logger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// CheckpointStore and simStore, through the current leader.

func (m *replStore) Fence(t wire.RainstormTask, inc uint64) (*wire.RainstormCheckpoint, error) {
	if inc <= m.incs[t] {
		return nil, fmt.Errorf("fence task %d.%d: incarnation %d is not newer than %d", t.Stage, t.Index, inc, m.incs[t])
	}
	m.incs[t] = inc // the job table: the new dispatch's token
	res := m.nodes[m.leader].st.Commit(context.Background(), m.term, []*rsstore.Request{{Open: &wire.RainstormOpen{Task: t, Incarnation: inc}}})
	if res[0].Err != nil {
		return nil, res[0].Err
	}
	c := res[0].Msg.(*wire.RainstormOpenReply).Checkpoint
	if c == nil {
		return nil, nil
	}
	if err := UnpackPending(c); err != nil {
		return nil, err
	}
	return c, nil
}

func (m *replStore) Put(c *wire.RainstormCheckpoint) *wire.RainstormCheckpointAck {
	packed, err := PackPending(c)
	if err != nil {
		m.t.Fatal(err)
	}
	// As the wire does: the store never shares the task's memory.
	b, err := wire.Marshal(packed)
	if err != nil {
		m.t.Fatal(err)
	}
	c = new(wire.RainstormCheckpoint)
	if err := wire.Unmarshal(b, c); err != nil {
		m.t.Fatal(err)
	}
	if m.r.Float64() < m.f.elect {
		m.electRandom()
	}
	n, term := m.nodes[m.leader], m.term
	if m.r.Float64() < m.f.deposed {
		for _, d := range m.nodes {
			if d.leads != 0 && d.leads < m.term {
				n, term = d, d.leads
				m.deposedPuts++
				break
			}
		}
	}
	var peers []string
	for _, p := range m.nodes {
		if p != n {
			peers = append(peers, p.id)
		}
	}
	m.r.Shuffle(len(peers), func(i, j int) { peers[i], peers[j] = peers[j], peers[i] })
	switch x := m.r.Float64(); {
	case x < m.f.minority:
		n.cut = setOf(setOf(nil, peers[0]), peers[1])
		m.undone++
	case x < m.f.minority+m.f.lostAck:
		n.cut, n.lose = setOf(nil, peers[1]), setOf(nil, peers[0])
		m.lost++
	case x < m.f.minority+m.f.lostAck+m.f.behind:
		n.cut = setOf(nil, peers[0])
		m.behind++
	}
	res := n.st.Commit(context.Background(), term, []*rsstore.Request{{Ckpt: c}})
	n.cut, n.lose = nil, nil
	if res[0].Err != nil {
		return nil
	}
	return res[0].Msg.(*wire.RainstormCheckpointAck)
}

func (m *replStore) Done(t wire.RainstormTask) bool {
	l := m.nodes[m.leader].st.Latest(t)
	return l != nil && l.Done
}

func (m *replStore) Output(t wire.RainstormTask) []Record { return m.nodes[m.leader].st.Rows(t) }

func (m *replStore) Latest(t wire.RainstormTask) *wire.RainstormCheckpoint {
	return m.nodes[m.leader].st.Latest(t)
}

// TestSimExactlyOnceReplicatedStore runs the exactly-once simulation
// against three real stores with the faults above on top of the tasks'
// own: every seed's output equals the sequential pass, read from the
// leader at the end and again from each manager once it has been elected
// and synced from one other.
func TestSimExactlyOnceReplicatedStore(t *testing.T) {
	var undone, lost, elections, deposed int
	seeds := simSeeds(t)
	if os.Getenv("TEMPEST_RS_SIM_SEEDS") == "" {
		// Each seed costs several times a MemStore one (every commit
		// a bbolt write and a round over the hub): one seed of every
		// case under make test's race detector, a few without it.
		seeds = max(1, seeds/5)
	}
	for _, c := range simCases(t) {
		for seed := uint64(1); seed <= uint64(seeds); seed++ {
			t.Logf("%s seed %d", c.name, seed) // a failure inside the run names neither
			m := newReplStore(t, seed, storeHeavy)
			s, got := runSimOn(t, seed, heavy, c.spec(true), c.data, nil, ExecOptions{}, m)
			if !reflect.DeepEqual(got, c.expect) {
				m.Close()
				t.Fatalf("%s seed %d: output differs from the sequential pass (%d rows, want %d; %d crashes, %d elections)\n%s",
					c.name, seed, len(got), len(c.expect), s.crashes, m.elections, diffRows(got, c.expect))
			}
			if err := s.countsAgree(len(got)); err != nil {
				m.Close()
				t.Fatalf("%s seed %d: counts disagree with the output: %v", c.name, seed, err)
			}
			for i := range 3 {
				m.elect(i, []int{(i + 1 + m.r.IntN(2)) % 3})
				if got := s.output(); !reflect.DeepEqual(got, c.expect) {
					m.Close()
					t.Fatalf("%s seed %d: manager m%d, elected at the end, shows output unlike the sequential pass (%d rows, want %d)\n%s",
						c.name, seed, i, len(got), len(c.expect), diffRows(got, c.expect))
				}
			}
			undone, lost, elections, deposed = undone+m.undone, lost+m.lost, elections+m.elections, deposed+m.deposedPuts
			m.Close()
		}
	}
	if undone == 0 || lost == 0 || elections == 0 || deposed == 0 {
		t.Fatalf("store faults not exercised: %d groups undone, %d answers lost, %d elections, %d puts to a deposed leader", undone, lost, elections, deposed)
	}
	t.Logf("%d groups undone, %d answers lost, %d elections, %d puts to a deposed leader", undone, lost, elections, deposed)
}
