package leadership

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"tempest/wire"
)

const et = simElectionTicks

func TestConfigValidate(t *testing.T) {
	good := Config{ID: "a", Peers: []string{"a", "b", "c"}, ElectionTicks: 10, HeartbeatTicks: 2, MaxLeaderLHM: 4}
	tests := []struct {
		name  string
		edit  func(*Config)
		wants []string // substrings that must all appear
	}{
		{"valid", func(*Config) {}, nil},
		{"empty id", func(c *Config) { c.ID = "" }, []string{"ID:"}},
		{"self missing", func(c *Config) { c.Peers = []string{"b", "c"} }, []string{`must include ID "a"`}},
		{"duplicate peer", func(c *Config) { c.Peers = []string{"a", "b", "b"} }, []string{`lists "b" twice`}},
		{"heartbeat not below election", func(c *Config) { c.HeartbeatTicks = 10 }, []string{"HeartbeatTicks"}},
		{"flap without window", func(c *Config) { c.FlapMaxChanges = 3 }, []string{"FlapWindowTicks", "FlapCooldownTicks"}},
		{"every problem at once", func(c *Config) { c.ElectionTicks = 1; c.MaxLeaderLHM = -1; c.FlapMaxChanges = -1 },
			[]string{"ElectionTicks", "HeartbeatTicks", "MaxLeaderLHM", "FlapMaxChanges"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.edit(&c)
			err := c.Validate()
			if len(tc.wants) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors mentioning %v", tc.wants)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, missing %q", err, w)
				}
			}
		})
	}
}

func TestElectsExactlyOneLeader(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) {
			s := newSim(t, 7, simOptions{nodes: n, maxDelay: 1})
			if !s.runUntil(20*et, s.converged) {
				t.Fatalf("no leader after %d ticks", 20*et)
			}
			lead, _ := s.leader()
			if lead.FenceToken != lead.Term || lead.Term == 0 {
				t.Fatalf("leader %+v: fence token should be its (non-zero) term", lead)
			}
			// A healthy group keeps its leader: no elections, no term churn.
			s.run(50 * et)
			if now, ok := s.leader(); !ok || now != lead {
				t.Fatalf("leader changed in a quiet cluster: %+v -> %+v", lead, now)
			}
		})
	}
}

func TestLeaderCrashElectsNewLeaderWithHigherTerm(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) {
			s := newSim(t, 11, simOptions{nodes: n, maxDelay: 1})
			if !s.runUntil(20*et, s.converged) {
				t.Fatal("no first leader")
			}
			old, _ := s.leader()
			s.kill(old.ID)
			if !s.runUntil(20*et, s.converged) {
				t.Fatal("no leader after the first one crashed")
			}
			next, _ := s.leader()
			if next.ID == old.ID || next.Term <= old.Term || next.FenceToken <= old.FenceToken {
				t.Fatalf("after crash of %+v got %+v; want another node with a higher term and fence token", old, next)
			}
			// The old leader comes back as a follower of the new one.
			s.restart(old.ID)
			if !s.runUntil(10*et, s.converged) {
				t.Fatal("restarted node did not rejoin")
			}
			if got, _ := s.leader(); got != next {
				t.Fatalf("restart of the old leader disturbed the new one: %+v -> %+v", next, got)
			}
		})
	}
}

// Pre-vote is what keeps a node that could not hear the leader from bumping
// its term and forcing an election when it comes back.
func TestIsolatedFollowerRejoinsWithoutDisruption(t *testing.T) {
	s := newSim(t, 3, simOptions{nodes: 5, maxDelay: 1})
	if !s.runUntil(20*et, s.converged) {
		t.Fatal("no leader")
	}
	lead, _ := s.leader()
	victim := "n1"
	if victim == lead.ID {
		victim = "n2"
	}
	s.isolate(victim)
	s.run(20 * et)
	if st := s.status(victim); st.Term != lead.Term {
		t.Fatalf("isolated follower moved from term %d to %d", lead.Term, st.Term)
	}
	if st := s.status(victim); st.State == Leader || st.State == Candidate {
		t.Fatalf("isolated follower is %s", st.State)
	}
	s.heal()
	s.run(20 * et)
	if got, ok := s.leader(); !ok || got != lead {
		t.Fatalf("rejoin changed leadership: %+v -> %+v (converged=%v)", lead, got, ok)
	}
}

func TestLeaderInMinorityStepsDown(t *testing.T) {
	s := newSim(t, 5, simOptions{nodes: 5, maxDelay: 1})
	if !s.runUntil(20*et, s.converged) {
		t.Fatal("no leader")
	}
	old, _ := s.leader()
	minority := []string{old.ID}
	var majority []string
	for _, n := range s.nodes {
		switch {
		case n.id == old.ID:
		case len(minority) < 2:
			minority = append(minority, n.id)
		default:
			majority = append(majority, n.id)
		}
	}
	s.partition(minority, majority)
	start := s.now
	if !s.runUntil(2*et, func() bool { return s.status(old.ID).State != Leader }) {
		t.Fatalf("leader %s in minority %v still leads after two election timeouts", old.ID, minority)
	}
	t.Logf("stepped down after %d ticks", s.now-start)
	var next Status
	if !s.runUntil(20*et, func() bool {
		for _, id := range majority {
			if st := s.status(id); st.State == Leader {
				next = st
				return true
			}
		}
		return false
	}) {
		t.Fatal("majority side elected no leader")
	}
	if next.Term <= old.Term {
		t.Fatalf("new leader term %d, want > %d", next.Term, old.Term)
	}
	s.run(20 * et)
	for _, id := range minority {
		if st := s.status(id); st.State == Leader {
			t.Fatalf("minority node %s became leader: %+v", id, st)
		}
	}
	s.heal()
	if !s.runUntil(20*et, s.converged) {
		t.Fatal("no single leader after heal")
	}
}

func TestQuorumCountsConfiguredMembers(t *testing.T) {
	// Two of five alive is a majority of the living, but not of the group.
	s := newSim(t, 9, simOptions{nodes: 5, maxDelay: 1})
	for _, id := range []string{"n3", "n4", "n5"} {
		s.kill(id)
	}
	s.run(50 * et)
	if c := s.leaderCount(); c != 0 {
		t.Fatalf("%d leaders with 2 of 5 members alive", c)
	}
	s.restart("n3")
	if !s.runUntil(20*et, s.converged) {
		t.Fatal("no leader with 3 of 5 members alive")
	}
}

// harness drives one Machine by hand, for tests that need exact messages.
type harness struct {
	t     *testing.T
	m     *Machine
	store Storage
	cfg   Config
}

func newHarness(t *testing.T, id string, st Storage, edit func(*Config)) *harness {
	t.Helper()
	cfg := Config{
		ID: id, Cluster: "c", Peers: []string{"a", "b", "c"},
		ElectionTicks: et, HeartbeatTicks: 2, MaxLeaderLHM: 4,
		Rand: rand.New(rand.NewPCG(1, 2)),
	}
	if edit != nil {
		edit(&cfg)
	}
	if st == nil {
		st = NewMemoryStorage()
	}
	m, err := NewMachine(cfg, st)
	if err != nil {
		t.Fatalf("NewMachine: %v", err)
	}
	return &harness{t: t, m: m, store: st, cfg: cfg}
}

func (h *harness) ready() Ready {
	h.t.Helper()
	rd, err := h.m.Ready()
	if err != nil {
		h.t.Fatalf("Ready: %v", err)
	}
	return rd
}

// tickUntil ticks until the machine emits a message of type typ, returning
// all messages of that batch.
func (h *harness) tickUntil(max int, typ wire.MsgType) []Outbound {
	h.t.Helper()
	for range max {
		h.m.Tick()
		if msgs := h.ready().Messages; len(msgs) > 0 && msgs[0].Msg.Type() == typ {
			return msgs
		}
	}
	return nil
}

func (h *harness) heartbeat(from string, term uint64) {
	h.m.Step(from, &wire.LeaderHeartbeat{Cluster: h.cfg.Cluster, Term: term, Leader: from})
	h.ready()
}

// makeLeader walks the machine through pre-vote and vote to leadership.
func (h *harness) makeLeader() {
	h.t.Helper()
	if h.tickUntil(3*et, wire.TypePreVoteRequest) == nil {
		h.t.Fatal("no pre-vote")
	}
	h.m.Step("b", &wire.PreVoteResponse{Cluster: "c", Term: h.m.Status().Term + 1, Voter: "b", Granted: true})
	h.ready()
	h.m.Step("b", &wire.VoteResponse{Cluster: "c", Term: h.m.Status().Term, Voter: "b", Granted: true})
	h.ready()
	if st := h.m.Status(); st.State != Leader {
		h.t.Fatalf("not leader: %+v", st)
	}
}

func TestPreVoteDoesNotIncrementTerm(t *testing.T) {
	h := newHarness(t, "a", nil, nil)
	msgs := h.tickUntil(3*et, wire.TypePreVoteRequest)
	if len(msgs) != 2 {
		t.Fatalf("pre-vote went to %d peers, want 2", len(msgs))
	}
	st := h.m.Status()
	if st.State != PreCandidate || st.Term != 0 {
		t.Fatalf("after timeout: %+v, want pre-candidate at term 0", st)
	}
	if req := msgs[0].Msg.(*wire.PreVoteRequest); req.Term != 1 {
		t.Fatalf("pre-vote proposes term %d, want 1", req.Term)
	}
	if h.store.(*MemoryStorage).Saves() != 0 {
		t.Fatal("pre-vote wrote durable state")
	}
	// A majority of pre-votes, and only then, bumps the term and asks for votes.
	h.m.Step("b", &wire.PreVoteResponse{Cluster: "c", Term: 1, Voter: "b", Granted: true})
	rd := h.ready()
	if st := h.m.Status(); st.State != Candidate || st.Term != 1 {
		t.Fatalf("after pre-vote majority: %+v, want candidate at term 1", st)
	}
	if len(rd.Messages) != 2 || rd.Messages[0].Msg.Type() != wire.TypeVoteRequest {
		t.Fatalf("candidate sent %v, want two vote requests", rd.Messages)
	}
	if hs, _ := h.store.Load(); hs != (HardState{Term: 1, VotedFor: "a"}) {
		t.Fatalf("vote requests left before the self-vote was durable: stored %+v", hs)
	}
}

func TestPreVoteGrantRules(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(h *harness)
		req    wire.PreVoteRequest
		grant  bool
		reason string
	}{
		{"no leader, fresh term", nil, wire.PreVoteRequest{Term: 1, LHM: 0}, true, ""},
		{"candidate behind", func(h *harness) { h.heartbeat("c", 5); h.m.Tick(); h.tickPastLease() }, wire.PreVoteRequest{Term: 5}, false, "stale term"},
		{"leader heard recently", func(h *harness) { h.heartbeat("c", 1) }, wire.PreVoteRequest{Term: 2}, false, "leader alive"},
		{"leader lease lapsed", func(h *harness) { h.heartbeat("c", 1); h.tickPastLease() }, wire.PreVoteRequest{Term: 2}, true, ""},
		{"unhealthy candidate", nil, wire.PreVoteRequest{Term: 1, LHM: 5}, false, "candidate unhealthy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Voter "a" never campaigns here: it is too unhealthy to.
			h := newHarness(t, "a", nil, nil)
			h.m.SetLHM(100)
			if tc.setup != nil {
				tc.setup(h)
			}
			before := h.m.Status()
			req := tc.req
			req.Cluster, req.Candidate = "c", "b"
			h.m.Step("b", &req)
			rd := h.ready()
			if len(rd.Messages) != 1 {
				t.Fatalf("got %d messages, want one response", len(rd.Messages))
			}
			resp := rd.Messages[0].Msg.(*wire.PreVoteResponse)
			if resp.Granted != tc.grant || resp.Reason != tc.reason {
				t.Fatalf("response %+v, want granted=%v reason=%q", resp, tc.grant, tc.reason)
			}
			if after := h.m.Status(); after.Term != before.Term {
				t.Fatalf("answering a pre-vote changed term %d -> %d", before.Term, after.Term)
			}
		})
	}
}

func (h *harness) tickPastLease() {
	for range et {
		h.m.Tick()
	}
	h.ready()
}

func TestVoteGrantRules(t *testing.T) {
	tests := []struct {
		name   string
		stored HardState
		lead   string // a leader heard this term, via heartbeat
		req    wire.VoteRequest
		grant  bool
		term   uint64 // term in the response
		reason string
	}{
		{"fresh term", HardState{Term: 3}, "", wire.VoteRequest{Term: 4, Candidate: "b"}, true, 4, ""},
		{"not yet voted this term", HardState{Term: 3}, "", wire.VoteRequest{Term: 3, Candidate: "b"}, true, 3, ""},
		{"same candidate again", HardState{Term: 3, VotedFor: "b"}, "", wire.VoteRequest{Term: 3, Candidate: "b"}, true, 3, ""},
		{"already voted this term", HardState{Term: 3, VotedFor: "c"}, "", wire.VoteRequest{Term: 3, Candidate: "b"}, false, 3, "already voted"},
		{"stale term, no vote yet", HardState{Term: 5}, "", wire.VoteRequest{Term: 4, Candidate: "b"}, false, 5, "stale term"},
		{"leader known this term", HardState{Term: 3}, "c", wire.VoteRequest{Term: 3, Candidate: "b"}, false, 3, "leader known"},
		{"unhealthy candidate", HardState{Term: 3}, "", wire.VoteRequest{Term: 4, Candidate: "b", LHM: 5}, false, 4, "candidate unhealthy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := NewMemoryStorage()
			st.Save(tc.stored)
			h := newHarness(t, "a", st, nil)
			h.m.SetLHM(100) // "a" never campaigns itself
			if tc.lead != "" {
				h.heartbeat(tc.lead, tc.stored.Term)
			}
			req := tc.req
			req.Cluster = "c"
			h.m.Step(req.Candidate, &req)
			msgs := h.ready().Messages
			if len(msgs) != 1 {
				t.Fatalf("got %d replies, want 1", len(msgs))
			}
			r := msgs[0].Msg.(*wire.VoteResponse)
			if r.Granted != tc.grant || r.Term != tc.term || r.Reason != tc.reason {
				t.Fatalf("reply %+v, want granted=%v term=%d reason=%q", r, tc.grant, tc.term, tc.reason)
			}
			hs, _ := st.Load()
			if tc.grant && hs.VotedFor != req.Candidate {
				t.Fatalf("granted but stored %+v", hs)
			}
			if !tc.grant && hs.VotedFor != tc.stored.VotedFor {
				t.Fatalf("refused but vote changed to %+v", hs)
			}
		})
	}
}

// A candidate must count only answers to its own round: a grant from an
// earlier term is not a vote for this one.
func TestCandidateIgnoresStaleResponses(t *testing.T) {
	h := newHarness(t, "a", nil, nil)
	h.tickUntil(3*et, wire.TypePreVoteRequest)
	h.m.Step("b", &wire.PreVoteResponse{Cluster: "c", Term: 1, Voter: "b", Granted: true})
	h.ready() // candidate, term 1
	h.tickUntil(3*et, wire.TypePreVoteRequest)
	// A grant for an older round (proposed term 1) must not count for term 2.
	h.m.Step("b", &wire.PreVoteResponse{Cluster: "c", Term: 1, Voter: "b", Granted: true})
	h.ready()
	if st := h.m.Status(); st.State != PreCandidate || st.Term != 1 {
		t.Fatalf("stale pre-vote grant counted: %+v", st)
	}
	h.m.Step("b", &wire.PreVoteResponse{Cluster: "c", Term: 2, Voter: "b", Granted: true})
	h.ready() // candidate, term 2
	h.m.Step("b", &wire.VoteResponse{Cluster: "c", Term: 1, Voter: "b", Granted: true})
	h.ready()
	if st := h.m.Status(); st.State != Candidate || st.Term != 2 {
		t.Fatalf("vote from term 1 counted in term 2: %+v", st)
	}
}

// A node that cannot hear the leader but can reach the other followers is the
// classic disruptor; the followers' lease keeps it from forcing an election.
func TestFollowerCutFromLeaderDoesNotDisrupt(t *testing.T) {
	s := newSim(t, 13, simOptions{nodes: 3, maxDelay: 1})
	if !s.runUntil(20*et, s.converged) {
		t.Fatal("no leader")
	}
	lead, _ := s.leader()
	victim := "n1"
	if victim == lead.ID {
		victim = "n2"
	}
	s.cut(lead.ID, victim)
	s.run(30 * et)
	for _, n := range s.nodes {
		if st := n.m.Status(); st.Term != lead.Term {
			t.Fatalf("%s moved to term %d (leader's term %d): the cut follower disrupted the group", n.id, st.Term, lead.Term)
		}
	}
	if st := s.status(lead.ID); st.State != Leader {
		t.Fatalf("leader lost leadership: %+v", st)
	}
	s.heal()
	if !s.runUntil(10*et, s.converged) {
		t.Fatal("no convergence after the link healed")
	}
	if got, _ := s.leader(); got != lead {
		t.Fatalf("leadership changed across a single-link fault: %+v -> %+v", lead, got)
	}
}

func TestRestartNeverDoubleVotes(t *testing.T) {
	stores := map[string]func(t *testing.T) (Storage, func() Storage){
		"memory": func(*testing.T) (Storage, func() Storage) {
			st := NewMemoryStorage()
			return st, func() Storage { return st }
		},
		"bolt": func(t *testing.T) (Storage, func() Storage) {
			path := t.TempDir() + "/leadership.db"
			open := func() Storage {
				st, err := OpenBoltStorage(path)
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				t.Cleanup(func() { st.Close() })
				return st
			}
			return open(), func() Storage { return open() }
		},
	}
	for name, mk := range stores {
		t.Run(name, func(t *testing.T) {
			first, reopen := mk(t)
			h := newHarness(t, "a", first, nil)
			h.m.SetLHM(100)
			h.m.Step("b", &wire.VoteRequest{Cluster: "c", Term: 7, Candidate: "b"})
			if r := h.ready().Messages[0].Msg.(*wire.VoteResponse); !r.Granted {
				t.Fatalf("vote for b refused: %+v", r)
			}
			// Crash: the machine's memory is gone, the store is not.
			if bs, ok := first.(*BoltStorage); ok {
				bs.Close()
			}
			h2 := newHarness(t, "a", reopen(), nil)
			h2.m.SetLHM(100)
			if st := h2.m.Status(); st.Term != 7 {
				t.Fatalf("restarted at term %d, want 7", st.Term)
			}
			h2.m.Step("c", &wire.VoteRequest{Cluster: "c", Term: 7, Candidate: "c"})
			if r := h2.ready().Messages[0].Msg.(*wire.VoteResponse); r.Granted {
				t.Fatalf("restarted node voted again in term 7: %+v", r)
			}
		})
	}
}

type failingStorage struct {
	MemoryStorage
	fail bool
}

func (f *failingStorage) Save(hs HardState) error {
	if f.fail {
		return errors.New("disk full")
	}
	return f.MemoryStorage.Save(hs)
}

func TestUnsavedVoteIsNeverSent(t *testing.T) {
	st := &failingStorage{fail: true}
	h := newHarness(t, "a", st, nil)
	h.m.SetLHM(100)
	h.m.Step("b", &wire.VoteRequest{Cluster: "c", Term: 2, Candidate: "b"})
	rd, err := h.m.Ready()
	if err == nil || len(rd.Messages) != 0 || rd.StateChange != nil {
		t.Fatalf("Ready with failing storage = %+v, %v; want error and nothing released", rd, err)
	}
	// The vote never left, so forgetting it is safe; once the disk recovers
	// the node works normally.
	st.fail = false
	h.m.Step("c", &wire.VoteRequest{Cluster: "c", Term: 3, Candidate: "c"})
	msgs := h.ready().Messages
	if len(msgs) != 1 || !msgs[0].Msg.(*wire.VoteResponse).Granted {
		t.Fatalf("after recovery: %+v", msgs)
	}
	if hs, _ := st.Load(); hs != (HardState{Term: 3, VotedFor: "c"}) {
		t.Fatalf("stored %+v", hs)
	}
}

func TestHigherTermMakesFollower(t *testing.T) {
	tests := []struct {
		name string
		msg  wire.Message
	}{
		{"heartbeat", &wire.LeaderHeartbeat{Cluster: "c", Term: 9, Leader: "b"}},
		{"heartbeat ack", &wire.LeaderHeartbeatAck{Cluster: "c", Term: 9, Follower: "b"}},
		{"vote response", &wire.VoteResponse{Cluster: "c", Term: 9, Voter: "b"}},
		{"pre-vote rejection", &wire.PreVoteResponse{Cluster: "c", Term: 9, Voter: "b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "a", nil, nil)
			h.makeLeader()
			h.m.Step("b", tc.msg)
			h.ready()
			if st := h.m.Status(); st.State != Follower || st.Term != 9 || st.FenceToken != 0 {
				t.Fatalf("after %s at term 9: %+v", tc.name, st)
			}
		})
	}
}

func TestIgnoresForeignAndForgedMessages(t *testing.T) {
	tests := []struct {
		name string
		from string
		msg  wire.Message
	}{
		{"other cluster", "b", &wire.LeaderHeartbeat{Cluster: "gates", Term: 9, Leader: "b"}},
		{"non-member", "z", &wire.LeaderHeartbeat{Cluster: "c", Term: 9, Leader: "z"}},
		{"sender mismatch", "b", &wire.LeaderHeartbeat{Cluster: "c", Term: 9, Leader: "c"}},
		{"from self", "a", &wire.LeaderHeartbeat{Cluster: "c", Term: 9, Leader: "a"}},
		{"unrelated type", "b", &wire.Ping{Seq: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "a", nil, nil)
			h.m.Step(tc.from, tc.msg)
			rd := h.ready()
			if st := h.m.Status(); st.Term != 0 || st.Leader != "" || len(rd.Messages) != 0 {
				t.Fatalf("message was not ignored: status %+v, sent %v", st, rd.Messages)
			}
		})
	}
}

func TestCheckQuorum(t *testing.T) {
	h := newHarness(t, "a", nil, nil)
	h.makeLeader()
	// One follower keeps acking: with self that is 2 of 3, a quorum.
	for range 5 * et {
		h.m.Tick()
		for _, o := range h.ready().Messages {
			if hb, ok := o.Msg.(*wire.LeaderHeartbeat); ok && o.To == "b" {
				h.m.Step("b", &wire.LeaderHeartbeatAck{Cluster: "c", Term: hb.Term, Follower: "b", Success: true, Seq: hb.Seq})
			}
		}
	}
	if st := h.m.Status(); st.State != Leader {
		t.Fatalf("leader with a quorum of acks stepped down: %+v", st)
	}
	// Silence: at most two election timeouts later it must stop leading.
	for i := range 2 * et {
		h.m.Tick()
		h.ready()
		if h.m.Status().State != Leader {
			t.Logf("stepped down %d ticks after acks stopped", i+1)
			return
		}
	}
	t.Fatalf("leader without acks still leads: %+v", h.m.Status())
}

func TestLHMEligibility(t *testing.T) {
	t.Run("unhealthy follower never campaigns", func(t *testing.T) {
		h := newHarness(t, "a", nil, nil)
		h.m.SetLHM(5)
		if msgs := h.tickUntil(10*et, wire.TypePreVoteRequest); msgs != nil {
			t.Fatalf("node with LHM 5 > 4 started a pre-vote: %v", msgs)
		}
		h.m.SetLHM(4)
		if msgs := h.tickUntil(3*et, wire.TypePreVoteRequest); msgs == nil {
			t.Fatal("node back at LHM 4 never campaigned")
		}
	})
	t.Run("unhealthy leader steps down", func(t *testing.T) {
		h := newHarness(t, "a", nil, nil)
		h.makeLeader()
		term := h.m.Status().Term
		h.m.SetLHM(5)
		rd := h.ready()
		if st := h.m.Status(); st.State != Follower || st.Term != term || st.FenceToken != 0 {
			t.Fatalf("leader with LHM 5: %+v", st)
		}
		if rd.StateChange == nil || rd.StateChange.State != Follower {
			t.Fatalf("step-down not reported: %+v", rd.StateChange)
		}
	})
	t.Run("unhealthy pre-candidate aborts", func(t *testing.T) {
		h := newHarness(t, "a", nil, nil)
		h.tickUntil(3*et, wire.TypePreVoteRequest)
		h.m.SetLHM(8)
		h.m.Step("b", &wire.PreVoteResponse{Cluster: "c", Term: 1, Voter: "b", Granted: true})
		h.ready()
		if st := h.m.Status(); st.State != Follower || st.Term != 0 {
			t.Fatalf("unhealthy pre-candidate went on: %+v", st)
		}
	})
	t.Run("cluster moves leadership off an unhealthy leader", func(t *testing.T) {
		s := newSim(t, 21, simOptions{nodes: 3, maxDelay: 1})
		if !s.runUntil(20*et, s.converged) {
			t.Fatal("no leader")
		}
		old, _ := s.leader()
		s.setLHM(old.ID, 6)
		if !s.runUntil(20*et, s.converged) {
			t.Fatal("no new leader after the old one became unhealthy")
		}
		next, _ := s.leader()
		if next.ID == old.ID || next.Term <= old.Term {
			t.Fatalf("leadership %+v -> %+v; want another node, higher term", old, next)
		}
	})
}

func TestFlappingStartsCooldown(t *testing.T) {
	h := newHarness(t, "a", nil, func(c *Config) {
		c.FlapMaxChanges, c.FlapWindowTicks, c.FlapCooldownTicks = 3, 100, 60
	})
	// Four different leaders within the window: one more than tolerated.
	for i, lead := range []string{"b", "c", "b", "c"} {
		h.heartbeat(lead, uint64(i+1))
		h.m.Tick()
		h.ready()
	}
	if !h.m.CoolingDown() {
		t.Fatal("four leadership changes in 4 ticks did not start a cooldown")
	}
	// The leader goes quiet. Normally "a" would campaign within 2*et ticks;
	// during the cooldown it must not.
	for i := range 55 {
		h.m.Tick()
		for _, o := range h.ready().Messages {
			t.Fatalf("tick %d of cooldown: sent %s", i, o.Msg.Type())
		}
	}
	if h.tickUntil(3*et, wire.TypePreVoteRequest) == nil {
		t.Fatal("no election after the cooldown ended")
	}
	if h.m.CoolingDown() {
		t.Fatal("still cooling down")
	}
}

func TestFlappingToleratesSlowChanges(t *testing.T) {
	h := newHarness(t, "a", nil, func(c *Config) {
		c.FlapMaxChanges, c.FlapWindowTicks, c.FlapCooldownTicks = 3, 20, 60
	})
	// Changes spread wider than the window never add up to a flap.
	for i := range 10 {
		h.heartbeat([]string{"b", "c"}[i%2], uint64(i+1))
		for range 8 {
			h.m.Tick()
			h.ready()
		}
		h.heartbeat([]string{"b", "c"}[i%2], uint64(i+1))
		if h.m.CoolingDown() {
			t.Fatalf("cooldown after change %d although changes were 8 ticks apart", i+1)
		}
	}
}

func TestReadyReportsStatusChangesOnce(t *testing.T) {
	h := newHarness(t, "a", nil, nil)
	if rd := h.ready(); rd.StateChange != nil {
		t.Fatalf("fresh machine reported a change: %+v", rd.StateChange)
	}
	h.heartbeat("b", 4)
	h.m.Step("b", &wire.LeaderHeartbeat{Cluster: "c", Term: 4, Leader: "b"})
	rd := h.ready()
	if rd.StateChange != nil {
		t.Fatalf("second identical heartbeat reported a change: %+v", rd.StateChange)
	}
	if st := h.m.Status(); st.Leader != "b" || st.Term != 4 {
		t.Fatalf("status %+v", st)
	}
}

// A leader that learns of a newer term steps down even when its disk cannot
// record that term: the step-down is reported with the error, so the driver
// can tell the role to stop leading.
func TestStepDownReportedWhenSaveFails(t *testing.T) {
	st := &failingStorage{}
	h := newHarness(t, "a", st, nil)
	h.makeLeader()
	term := h.m.Status().Term
	st.fail = true
	h.m.Step("b", &wire.LeaderHeartbeat{Cluster: "c", Term: term + 5, Leader: "b"})
	rd, err := h.m.Ready()
	if err == nil {
		t.Fatal("Ready with failing storage: no error")
	}
	if len(rd.Messages) != 0 {
		t.Fatalf("messages released without a durable term: %+v", rd.Messages)
	}
	if rd.StateChange == nil || rd.StateChange.State == Leader || rd.StateChange.FenceToken != 0 {
		t.Fatalf("step-down not reported: %+v", rd.StateChange)
	}
}

// A node whose term cannot be made durable never leads, even alone.
func TestUnsavedTermNeverLeads(t *testing.T) {
	st := &failingStorage{fail: true}
	h := newHarness(t, "a", st, func(c *Config) { c.Peers = []string{"a"} })
	for range 5 * et {
		h.m.Tick()
		rd, _ := h.m.Ready()
		if rd.StateChange != nil && rd.StateChange.State == Leader {
			t.Fatalf("led with an unsaved term: %+v", rd.StateChange)
		}
		if s := h.m.Status(); s.State == Leader {
			t.Fatalf("machine leads with an unsaved term: %+v", s)
		}
	}
	st.fail = false
	for range 5 * et {
		h.m.Tick()
		h.ready()
	}
	if s := h.m.Status(); s.State != Leader {
		t.Fatalf("after the disk recovered: %+v", s)
	}
}
