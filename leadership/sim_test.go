package leadership

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"tempest/wire"
)

// The simulation runs real Machines on a fake network and a fake clock, both
// driven by one seeded generator, in the spirit of etcd-raft's rafttest: the
// same seed replays the same run, so a failing seed is a test case.
//
// Invariants are checked after every delivered message and every tick:
//   - at most one leader per term (every (term, leader) ever seen is kept);
//   - no node votes for two candidates in one term, across restarts;
//   - a node's durable term never goes backwards;
//   - a leader whose candidacy began after another leader was elected has a
//     larger term, hence a larger fence token;
//   - a candidacy that began on the minority side of a partition never wins;
//   - a leader stranded in a minority steps down within two election
//     timeouts.
// After the chaos phase the network heals and the group must converge on one
// leader that everyone follows.

const (
	simElectionTicks  = 10
	simHeartbeatTicks = 2
)

var errInjected = errors.New("injected save failure")

// simStorage is a MemoryStorage that can fail on demand and that checks
// durable-state invariants on every save.
type simStorage struct {
	s       *sim
	id      string
	mem     MemoryStorage
	failing int // next n saves fail
}

func (st *simStorage) Load() (HardState, error) { return st.mem.Load() }

func (st *simStorage) Save(hs HardState) error {
	if st.failing > 0 {
		st.failing--
		return errInjected
	}
	prev, _ := st.mem.Load()
	switch {
	case hs.Term < prev.Term:
		st.s.fail("%s: durable term went back from %d to %d", st.id, prev.Term, hs.Term)
	case hs.Term == prev.Term && prev.VotedFor != "" && hs.VotedFor != prev.VotedFor:
		st.s.fail("%s: durable vote in term %d changed from %s to %q", st.id, hs.Term, prev.VotedFor, hs.VotedFor)
	}
	return st.mem.Save(hs)
}

type simNode struct {
	id       string
	index    int
	store    *simStorage
	m        *Machine // nil while crashed
	lhm      int
	notice   string // the last Ready.Notice
	removed  bool   // a Ready said this node was removed (Ready.Removed)
	restarts int
	prev     Status // last status the checker saw, for edge detection
	since    int    // tick the current leadership stint began
}

type envelope struct {
	from, to string
	msg      wire.Message
	at       int
	seq      uint64
}

type msgQueue []envelope

func (q msgQueue) Len() int { return len(q) }
func (q msgQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q msgQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *msgQueue) Push(x any)   { *q = append(*q, x.(envelope)) }
func (q *msgQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type nodeTerm struct {
	id   string
	term uint64
}

type leaderEvent struct {
	step uint64
	term uint64
	id   string
}

type simOptions struct {
	nodes    int
	maxDelay int
	dropRate float64
	slowRate float64 // fraction of messages delayed by up to 4 election timeouts
	// flap detection; zero leaves it off
	flapMax, flapWindow, flapCooldown int
	priority                          map[string]int      // election priority by node id; absent is 0
	peers                             map[string][]string // a node's static peers, when not every node's
	syncs                             map[string]bool     // nodes whose role syncs before voting (Config.Syncs)
}

type sim struct {
	t    testing.TB
	seed uint64
	rng  *rand.Rand
	opts simOptions
	cfg  Config // template; ID and Rand are set per node

	nodes []*simNode
	byID  map[string]*simNode

	now    int
	step   uint64 // advances on every checked step, orders events within a tick
	queue  msgQueue
	msgSeq uint64

	group         map[string]int     // partition group per node; nil when healed
	cuts          map[[2]string]bool // single broken links, both directions
	partitionTick int
	partitionStep uint64

	leaders   map[uint64]string   // term -> the one leader of that term
	elected   []leaderEvent       // every leader, in order of election
	candidacy map[nodeTerm]uint64 // step at which a node began running for term
	votes     map[nodeTerm]string // (voter, term) -> candidate granted

	trace []string // recent events, printed on failure
	stats simStats
}

// simStats shows that a run actually exercised what it claims to.
type simStats struct {
	iterations, ticks, elections, partitions, kills, saveFailures, delivered int
	maxTerm                                                                  uint64
}

func (a *simStats) add(b simStats) {
	a.iterations += b.iterations
	a.ticks += b.ticks
	a.elections += b.elections
	a.partitions += b.partitions
	a.kills += b.kills
	a.saveFailures += b.saveFailures
	a.delivered += b.delivered
	a.maxTerm = max(a.maxTerm, b.maxTerm)
}

func newSim(t testing.TB, seed uint64, o simOptions) *sim {
	s := &sim{
		t:         t,
		seed:      seed,
		rng:       rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)),
		opts:      o,
		byID:      make(map[string]*simNode),
		leaders:   make(map[uint64]string),
		candidacy: make(map[nodeTerm]uint64),
		votes:     make(map[nodeTerm]string),
	}
	peers := make([]string, o.nodes)
	for i := range peers {
		peers[i] = fmt.Sprintf("n%d", i+1)
	}
	s.cfg = Config{
		Cluster:           "sim",
		Peers:             peers,
		ElectionTicks:     simElectionTicks,
		HeartbeatTicks:    simHeartbeatTicks,
		MaxLeaderLHM:      4,
		FlapMaxChanges:    o.flapMax,
		FlapWindowTicks:   o.flapWindow,
		FlapCooldownTicks: o.flapCooldown,
	}
	for i, id := range peers {
		n := &simNode{id: id, index: i}
		n.store = &simStorage{s: s, id: id}
		s.nodes = append(s.nodes, n)
		s.byID[id] = n
		s.start(n)
	}
	return s
}

func (s *sim) fail(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("simulation seed=%d tick=%d (replay: TEMPEST_SIM_SEED=%d go test -run TestSimulation ./leadership/): %s\nrecent events:\n%s",
		s.seed, s.now, s.seed, fmt.Sprintf(format, args...), strings.Join(s.trace, "\n"))
}

func (s *sim) logf(format string, args ...any) {
	const keep = 80
	if len(s.trace) == keep {
		s.trace = s.trace[1:]
	}
	s.trace = append(s.trace, fmt.Sprintf("  t=%d ", s.now)+fmt.Sprintf(format, args...))
}

func (s *sim) start(n *simNode) {
	cfg := s.cfg
	cfg.ID = n.id
	cfg.Priority = s.opts.priority[n.id]
	cfg.Syncs = s.opts.syncs[n.id]
	if p, ok := s.opts.peers[n.id]; ok {
		cfg.Peers = p
	}
	// Each incarnation of each node gets its own stream, derived from the seed.
	cfg.Rand = rand.New(rand.NewPCG(s.seed, uint64(n.restarts)<<32|uint64(n.index)))
	m, err := NewMachine(cfg, n.store)
	if err != nil {
		s.fail("start %s: %v", n.id, err)
	}
	m.SetLHM(n.lhm)
	n.m = m
	n.prev = m.Status()
	n.since = 0
	s.logf("%s started at term %d", n.id, n.prev.Term)
}

func (s *sim) kill(id string) {
	n := s.byID[id]
	if n.m == nil {
		return
	}
	n.m = nil
	s.stats.kills++
	s.logf("%s killed", id)
}

func (s *sim) restart(id string) {
	n := s.byID[id]
	if n.m != nil {
		return
	}
	n.restarts++
	s.start(n)
	s.check()
}

func (s *sim) setLHM(id string, lhm int) {
	n := s.byID[id]
	n.lhm = lhm
	s.logf("%s lhm=%d", id, lhm)
	if n.m != nil {
		n.m.SetLHM(lhm)
		s.flush(n)
		s.check()
	}
}

// partition splits the nodes; nodes named in no group form one more group.
func (s *sim) partition(groups ...[]string) {
	s.group = make(map[string]int)
	for i, g := range groups {
		for _, id := range g {
			s.group[id] = i + 1
		}
	}
	s.partitionTick, s.partitionStep = s.now, s.step
	s.stats.partitions++
	s.logf("partition %v", groups)
}

func (s *sim) isolate(id string) { s.partition([]string{id}) }

// cut breaks the link between a and b only: they can still reach everyone
// else, which is the shape (a flaky NIC, one bad route) that tempts a node to
// start elections the rest of the group does not need.
func (s *sim) cut(a, b string) {
	if s.cuts == nil {
		s.cuts = make(map[[2]string]bool)
	}
	s.cuts[[2]string{a, b}] = true
	s.cuts[[2]string{b, a}] = true
	s.logf("cut %s-%s", a, b)
}

func (s *sim) heal() {
	s.group = nil
	s.cuts = nil
	s.partitionTick, s.partitionStep = s.now, s.step
	s.logf("heal")
}

func (s *sim) reachable(a, b string) bool {
	return s.group[a] == s.group[b] && !s.cuts[[2]string{a, b}]
}

// sameSide reports whether a and b are on the same side of the partition,
// ignoring single cut links.
func (s *sim) sameSide(a, b string) bool { return s.group[a] == s.group[b] }

// minority reports whether id's side of the current partition is too small
// to form a quorum of the configured membership.
func (s *sim) minority(id string) bool {
	if s.group == nil {
		return false
	}
	size := 0
	for _, n := range s.nodes {
		if s.sameSide(id, n.id) {
			size++
		}
	}
	return size < len(s.nodes)/2+1
}

// flush takes n's output: messages go on the wire with a random delay (or
// are lost), and every granted vote is recorded for the double-vote check.
func (s *sim) flush(n *simNode) {
	rd, err := n.m.Ready()
	if err != nil {
		s.stats.saveFailures++
		s.logf("%s ready: %v", n.id, err)
		return
	}
	if rd.Notice != "" {
		n.notice = rd.Notice
		n.removed = n.removed || rd.Removed
		s.logf("%s notice: %s", n.id, rd.Notice)
	}
	if rd.StateChange != nil {
		st := rd.StateChange
		s.logf("%s -> %s term=%d leader=%q fence=%d", n.id, st.State, st.Term, st.Leader, st.FenceToken)
		if st.Term != n.store.mem.hs.Term {
			s.fail("%s reported term %d before it was durable (stored %d)", n.id, st.Term, n.store.mem.hs.Term)
		}
	}
	for _, o := range rd.Messages {
		if v, ok := o.Msg.(*wire.VoteResponse); ok && v.Granted {
			if hs := n.store.mem.hs; hs.Term != v.Term || hs.VotedFor != o.To {
				s.fail("%s sent a vote for %s in term %d before persisting it (stored %+v)", n.id, o.To, v.Term, n.store.mem.hs)
			}
			k := nodeTerm{n.id, v.Term}
			if c, ok := s.votes[k]; ok && c != o.To {
				s.fail("%s voted twice in term %d: for %s and %s", n.id, v.Term, c, o.To)
			}
			s.votes[k] = o.To
		}
		if s.opts.dropRate > 0 && s.rng.Float64() < s.opts.dropRate {
			continue
		}
		delay := s.rng.IntN(s.opts.maxDelay + 1)
		if s.opts.slowRate > 0 && s.rng.Float64() < s.opts.slowRate {
			// A straggler that arrives rounds later, after terms have moved
			// on: responses must be matched to the round they answer.
			delay = s.rng.IntN(4 * simElectionTicks)
		}
		s.msgSeq++
		heap.Push(&s.queue, envelope{from: n.id, to: o.To, msg: o.Msg, at: s.now + delay, seq: s.msgSeq})
	}
}

// check runs the safety invariants over every live node.
func (s *sim) check() {
	s.t.Helper()
	s.step++
	for _, n := range s.nodes {
		if n.m == nil {
			continue
		}
		st := n.m.Status()
		if st == n.prev && (st.State != Leader || s.group == nil) {
			continue // nothing new to check; keeps the race-enabled run fast
		}
		if st.State == Candidate || st.State == Leader {
			k := nodeTerm{n.id, st.Term}
			if _, ok := s.candidacy[k]; !ok {
				s.candidacy[k] = s.step
			}
		}
		if st.State != Leader {
			if st.FenceToken != 0 {
				s.fail("%s is %s but has fence token %d", n.id, st.State, st.FenceToken)
			}
			n.prev = st
			continue
		}
		if st.FenceToken != st.Term || st.Leader != n.id {
			s.fail("%s leads term %d with fence %d and leader %q", n.id, st.Term, st.FenceToken, st.Leader)
		}
		newStint := n.prev.State != Leader || n.prev.Term != st.Term
		if newStint {
			n.since = s.now
			s.onElected(n.id, st.Term)
		}
		if s.minority(n.id) {
			since := max(n.since, s.partitionTick)
			if s.now-since > 2*simElectionTicks {
				s.fail("%s still leads term %d from a minority partition after %d ticks", n.id, st.Term, s.now-since)
			}
		}
		n.prev = st
	}
}

func (s *sim) onElected(id string, term uint64) {
	if l, ok := s.leaders[term]; ok && l != id {
		s.fail("two leaders in term %d: %s and %s", term, l, id)
	}
	if _, ok := s.leaders[term]; ok {
		return // re-observed after a restart of the checker's view; same leader
	}
	s.leaders[term] = id
	began := s.candidacy[nodeTerm{id, term}]
	for _, ev := range s.elected {
		if ev.step < began && ev.term >= term {
			s.fail("%s elected with fence token %d although %s already led with token %d before its candidacy began",
				id, term, ev.id, ev.term)
		}
	}
	if s.group != nil && s.minority(id) && began > s.partitionStep {
		s.fail("%s won term %d on the minority side of a partition", id, term)
	}
	s.elected = append(s.elected, leaderEvent{step: s.step, term: term, id: id})
	s.stats.elections++
	s.stats.maxTerm = max(s.stats.maxTerm, term)
}

// tick delivers every message due by now, then ticks every live node.
func (s *sim) tick() {
	for len(s.queue) > 0 && s.queue[0].at <= s.now {
		e := heap.Pop(&s.queue).(envelope)
		n := s.byID[e.to]
		if n.m == nil || !s.reachable(e.from, e.to) {
			continue
		}
		n.m.Step(e.from, e.msg)
		s.stats.delivered++
		s.flush(n)
		s.check()
	}
	for _, n := range s.nodes {
		if n.m == nil {
			continue
		}
		n.m.Tick()
		s.flush(n)
		s.check()
	}
	s.now++
	s.stats.ticks++
}

func (s *sim) run(ticks int) {
	for range ticks {
		s.tick()
	}
}

// runUntil ticks until cond holds, for at most max ticks.
func (s *sim) runUntil(max int, cond func() bool) bool {
	for range max {
		if cond() {
			return true
		}
		s.tick()
	}
	return cond()
}

// leader returns the one live leader every live node follows, if the group
// has converged on one.
func (s *sim) leader() (Status, bool) {
	var lead Status
	found := 0
	for _, n := range s.nodes {
		if n.m != nil && n.m.Status().State == Leader {
			lead = n.m.Status()
			found++
		}
	}
	if found != 1 {
		return Status{}, false
	}
	for _, n := range s.nodes {
		if n.m == nil {
			continue
		}
		if st := n.m.Status(); st.Leader != lead.ID || st.Term != lead.Term {
			return Status{}, false
		}
	}
	return lead, true
}

func (s *sim) converged() bool { _, ok := s.leader(); return ok }

func (s *sim) status(id string) Status { return s.byID[id].m.Status() }

func (s *sim) leaderCount() int {
	c := 0
	for _, n := range s.nodes {
		if n.m != nil && n.m.Status().State == Leader {
			c++
		}
	}
	return c
}

// chaos injects one tick's worth of random faults.
func (s *sim) chaos() {
	r := s.rng.Float64()
	pick := func() *simNode { return s.nodes[s.rng.IntN(len(s.nodes))] }
	switch {
	case r < 0.010:
		// Random two-way split; a group may be empty, which is an isolation.
		var a []string
		for _, n := range s.nodes {
			if s.rng.IntN(2) == 0 {
				a = append(a, n.id)
			}
		}
		s.partition(a)
	case r < 0.015:
		s.isolate(pick().id)
	case r < 0.030:
		s.heal()
	case r < 0.036:
		s.kill(pick().id)
	case r < 0.056:
		for _, n := range s.nodes {
			if n.m == nil {
				s.restart(n.id)
				break
			}
		}
	case r < 0.060:
		s.setLHM(pick().id, 6)
	case r < 0.070:
		if n := pick(); n.lhm != 0 {
			s.setLHM(n.id, 0)
		}
	case r < 0.080:
		if a, b := pick(), pick(); a != b {
			s.cut(a.id, b.id)
		}
	case r < 0.085:
		n := pick()
		n.store.failing = 1 + s.rng.IntN(3)
		s.logf("%s storage fails next %d saves", n.id, n.store.failing)
	}
}

// settle removes every fault and waits for the group to converge.
func (s *sim) settle() {
	s.heal()
	s.opts.dropRate = 0
	s.opts.slowRate = 0
	for _, n := range s.nodes {
		n.store.failing = 0
		if n.lhm != 0 {
			s.setLHM(n.id, 0)
		}
		s.restart(n.id)
	}
	budget := s.opts.flapCooldown + 40*simElectionTicks
	if !s.runUntil(budget, s.converged) {
		s.fail("no single leader %d ticks after the network healed", budget)
	}
}

func simIterations(t *testing.T) int {
	if v := os.Getenv("TEMPEST_SIM_ITERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("TEMPEST_SIM_ITERS=%q: want a positive integer", v)
		}
		return n
	}
	if testing.Short() {
		return 60
	}
	return 300
}

// runSimulation runs one seeded chaos iteration.
func runSimulation(t *testing.T, seed uint64) simStats {
	pr := rand.New(rand.NewPCG(seed, 1))
	sizes := []int{1, 2, 3, 3, 3, 4, 5, 5, 5}
	o := simOptions{
		nodes:    sizes[pr.IntN(len(sizes))],
		maxDelay: pr.IntN(4),
		dropRate: []float64{0, 0, 0.05, 0.2}[pr.IntN(4)],
		slowRate: []float64{0, 0.01, 0.05}[pr.IntN(3)],
	}
	if pr.IntN(2) == 0 {
		o.flapMax, o.flapWindow, o.flapCooldown = 3, 100, 40
	}
	s := newSim(t, seed, o)
	for range 250 + pr.IntN(150) {
		s.chaos()
		s.tick()
	}
	s.settle()
	s.stats.iterations = 1
	return s.stats
}

func TestSimulation(t *testing.T) {
	if v := os.Getenv("TEMPEST_SIM_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("TEMPEST_SIM_SEED=%q: %v", v, err)
		}
		st := runSimulation(t, seed)
		t.Logf("seed %d: %+v", seed, st)
		return
	}
	iters := simIterations(t)
	start := time.Now()
	// Seeds are independent, so shard them across the CPUs; each seed's run
	// stays single-threaded and deterministic.
	shards := min(runtime.GOMAXPROCS(0), iters)
	totals := make([]simStats, shards)
	t.Run("seeds", func(t *testing.T) {
		for sh := range shards {
			t.Run(fmt.Sprintf("shard%d", sh), func(t *testing.T) {
				t.Parallel()
				for seed := uint64(sh + 1); seed <= uint64(iters); seed += uint64(shards) {
					totals[sh].add(runSimulation(t, seed))
				}
			})
		}
	})
	var total simStats
	for _, st := range totals {
		total.add(st)
	}
	t.Logf("%d seeded iterations in %s: %+v", iters, time.Since(start).Round(time.Millisecond), total)
}

// TestSimulationReplays guards the property the whole approach rests on: a
// seed fully determines a run.
func TestSimulationReplays(t *testing.T) {
	trace := func() string {
		s := newSim(t, 42, simOptions{nodes: 5, maxDelay: 2, dropRate: 0.1})
		for range 300 {
			s.chaos()
			s.tick()
		}
		return strings.Join(s.trace, "\n")
	}
	if a, b := trace(), trace(); a != b {
		t.Fatalf("same seed, different runs:\n%s\n---\n%s", a, b)
	}
}
