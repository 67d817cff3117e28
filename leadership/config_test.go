package leadership

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"tempest/internal/testutil"
	"tempest/transport"
	"tempest/wire"
)

func members(ids ...string) []Member {
	out := make([]Member, 0, len(ids))
	for _, id := range ids {
		out = append(out, Member{ID: id}) // the Machine's tests run without addresses
	}
	return out
}

// leaderOf is the one live node leading, if the nodes in ids all follow it.
func (s *sim) leaderOf(ids ...string) (string, bool) {
	lead := ""
	for _, id := range ids {
		n := s.byID[id]
		if n.m == nil {
			continue
		}
		st := n.m.Status()
		if st.State == Leader {
			if lead != "" {
				return "", false
			}
			lead = id
		}
	}
	if lead == "" {
		return "", false
	}
	term := s.status(lead).Term
	for _, id := range ids {
		if n := s.byID[id]; n.m != nil {
			if st := n.m.Status(); st.Leader != lead || st.Term != term {
				return "", false
			}
		}
	}
	return lead, true
}

// change proposes members on the current leader of ids and runs until the
// change is in effect there and every node of want follows one leader.
func (s *sim) change(t *testing.T, ids []string, next []string) string {
	t.Helper()
	var lead string
	if !s.runUntil(30*et, func() bool { var ok bool; lead, ok = s.leaderOf(ids...); return ok }) {
		t.Fatalf("no leader among %v", ids)
	}
	var c *Configuration
	if !s.runUntil(30*et, func() bool {
		var err error
		c, err = s.byID[lead].m.ProposeMembers(members(next...))
		if errors.Is(err, ErrNotSettled) {
			return false
		}
		if err != nil {
			t.Fatalf("ProposeMembers(%v) on %s: %v", next, lead, err)
		}
		return true
	}) {
		t.Fatalf("configuration never settled on %s", lead)
	}
	s.flush(s.byID[lead])
	ok := s.runUntil(30*et, func() bool {
		l, ok := s.leaderOf(next...)
		if !ok {
			return false
		}
		for _, id := range next {
			if n := s.byID[id]; n.m != nil && n.m.Members().Epoch < c.Epoch {
				return false
			}
		}
		return s.byID[l].m.Members().Epoch >= c.Epoch
	})
	if !ok {
		var views []string
		for _, n := range s.nodes {
			if n.m != nil {
				views = append(views, fmt.Sprintf("%s: %+v %s", n.id, n.m.Status(), n.m.Members()))
			}
		}
		t.Fatalf("change to %s not in effect on every member:\n%s\n%s", c, strings.Join(views, "\n"), strings.Join(s.trace, "\n"))
	}
	l, _ := s.leaderOf(next...)
	return l
}

// A group of three grows to five and shrinks back to three, one member at a
// time, with a leader crash in the middle; the simulation's checks (one
// leader per term, one vote per term, nothing reported before it is
// durable) run on every step. Then a member removed while it was down comes
// back with its old configuration: it is refused, says why, and disturbs
// nobody's term.
func TestMembershipGrowsAndShrinksOneAtATime(t *testing.T) {
	for seed := range uint64(10) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			three := []string{"n1", "n2", "n3"}
			four := []string{"n1", "n2", "n3", "n4"}
			five := []string{"n1", "n2", "n3", "n4", "n5"}
			s := newSim(t, seed, simOptions{nodes: 5, maxDelay: 2, peers: map[string][]string{
				"n1": three, "n2": three, "n3": three,
				"n4": four, // a joiner's own config names itself; the group refuses it until added
				"n5": {"n1", "n2", "n3", "n5"},
			}})
			s.change(t, three, four)
			lead := s.change(t, four, five)
			// The leader of five crashes: the other four elect one (a majority
			// of five is three) and it comes back as a follower.
			s.kill(lead)
			if !s.runUntil(40*et, func() bool { _, ok := s.leaderOf(five...); return ok }) {
				t.Fatal("no leader of five after a crash")
			}
			s.restart(lead)
			// n5 is removed while it is down, so it never stores its removal.
			s.kill("n5")
			s.change(t, five, four)
			lead = s.change(t, four, three)
			if s.byID["n4"].m.Members().Has("n4") {
				t.Fatalf("n4 stored its removal, yet still counts itself a member: %s", s.byID["n4"].m.Members())
			}
			term := s.status(lead).Term
			s.restart("n5")
			s.run(30 * et)
			if l, ok := s.leaderOf(three...); !ok || l != lead || s.status(lead).Term != term {
				t.Fatalf("a removed member's return disturbed the group: leader %q (was %s in term %d), now term %d", l, lead, term, s.status(lead).Term)
			}
			if st := s.status("n5"); st.State == Leader {
				t.Fatalf("removed n5 leads: %+v", st)
			}
			if got := s.byID["n5"].notice; !strings.Contains(got, "not a member") && !strings.Contains(got, "stale configuration") {
				t.Fatalf("n5 was not told why it is refused: notice %q", got)
			}
			if !s.byID["n5"].removed {
				t.Fatalf("n5 was refused (%q) but not told it was removed, so its role would not stop", s.byID["n5"].notice)
			}
			if st := s.status("n4"); st.State != Follower || st.Term > term {
				t.Fatalf("removed n4 campaigns: %+v", st)
			}
		})
	}
}

func TestProposeMembersRules(t *testing.T) {
	h := newHarness(t, "a", nil, nil)
	if _, err := h.m.ProposeMembers(members("a", "b", "c", "d")); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("follower: %v, want ErrNotLeader", err)
	}
	h.makeLeader()
	term := h.m.Status().Term
	if _, err := h.m.ProposeMembers(members("a", "b", "c", "d")); !errors.Is(err, ErrNotSettled) {
		t.Fatalf("before any ack: %v, want ErrNotSettled", err)
	}
	ack := func(from string, epoch uint64) {
		h.m.Step(from, &wire.LeaderHeartbeatAck{Cluster: "c", Term: term, Follower: from, Success: true, Seq: 1, ConfigEpoch: epoch})
	}
	ack("b", 0)
	h.ready()
	for _, bad := range [][]string{{"a", "b", "c", "d", "e"}, {"a"} /* two removed */, {"a", "b", "d"}} {
		if _, err := h.m.ProposeMembers(members(bad...)); !errors.Is(err, ErrOneAtATime) {
			t.Fatalf("change to %v: %v, want ErrOneAtATime", bad, err)
		}
	}
	next, err := h.m.ProposeMembers(members("a", "b", "c", "d"))
	if err != nil || next.Epoch != 1 {
		t.Fatalf("add d: %v, %v", next, err)
	}
	if _, err := h.m.ProposeMembers(members("a", "b", "c")); !errors.Is(err, ErrChangePending) {
		t.Fatalf("second change while one is pending: %v, want ErrChangePending", err)
	}
	// The change goes to every member, d included, and is stored before it
	// leaves; it is not in effect yet.
	rd := h.ready()
	got := map[string]bool{}
	for _, o := range rd.Messages {
		if hb, ok := o.Msg.(*wire.LeaderHeartbeat); ok && hb.Config != nil && hb.Config.Epoch == 1 {
			got[o.To] = true
		}
	}
	if !got["b"] || !got["c"] || !got["d"] {
		t.Fatalf("change sent to %v, want b, c and d", got)
	}
	if hs, _ := h.store.Load(); hs.Config == nil || hs.Config.Epoch != 1 {
		t.Fatalf("stored %+v before sending the change", hs)
	}
	if h.m.Members().Epoch != 0 || h.m.Quorum() != 2 {
		t.Fatalf("change in effect before a majority stored it: %s", h.m.Members())
	}
	// d storing it does not count (it is not in the old configuration); b does.
	ack("d", 1)
	if h.m.Members().Epoch != 0 {
		t.Fatal("a new member's ack committed the change")
	}
	ack("b", 1)
	if c := h.m.Members(); c.Epoch != 1 || h.m.Quorum() != 3 {
		t.Fatalf("after a majority of the old three stored it: %s quorum %d", c, h.m.Quorum())
	}
}

// A voter refuses a candidate of an older configuration epoch, and a
// stranger, saying why; neither moves its term.
func TestStaleCandidatesAreRefusedWithAReason(t *testing.T) {
	h := newHarness(t, "a", nil, nil)
	h.m.Step("b", &wire.LeaderHeartbeat{Cluster: "c", Term: 2, Leader: "b",
		Config: &wire.GroupConfig{Epoch: 3, Members: []wire.GroupMember{{ID: "a"}, {ID: "b"}, {ID: "c"}, {ID: "d"}}}})
	h.ready()
	h.tickPastLease()
	h.m.Step("c", &wire.VoteRequest{Cluster: "c", Term: 9, Candidate: "c", ConfigEpoch: 2})
	h.m.Step("z", &wire.PreVoteRequest{Cluster: "c", Term: 9, Candidate: "z", ConfigEpoch: 7})
	rd := h.ready()
	if len(rd.Messages) != 2 {
		t.Fatalf("want two refusals, got %+v", rd.Messages)
	}
	if r := rd.Messages[0].Msg.(*wire.VoteResponse); r.Granted || !strings.Contains(r.Reason, "stale configuration epoch 2") || r.ConfigEpoch != 3 {
		t.Fatalf("stale candidate answered %+v", r)
	}
	if r := rd.Messages[1].Msg.(*wire.PreVoteResponse); r.Granted || !strings.Contains(r.Reason, "z is not a member") {
		t.Fatalf("stranger answered %+v", r)
	}
	if st := h.m.Status(); st.Term != 2 {
		t.Fatalf("term moved to %d", st.Term)
	}
}

// The stored configuration survives a restart and replaces the static peers.
func TestConfigurationIsDurable(t *testing.T) {
	path := filepath.Join(testutil.DataDir(t, "a"), "election.db")
	st, err := OpenBoltStorage(path)
	if err != nil {
		t.Fatal(err)
	}
	c := &Configuration{Epoch: 4, Members: members("a", "b", "d")}
	if err := st.Save(HardState{Term: 3, VotedFor: "b", Config: c}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	st, err = OpenBoltStorage(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m, err := NewMachine(Config{ID: "a", Cluster: "c", Peers: []string{"a", "b", "c"}, ElectionTicks: et, HeartbeatTicks: 2, MaxLeaderLHM: 4}, st)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Members(); got.Epoch != 4 || !slices.Equal(got.IDs(), []string{"a", "b", "d"}) {
		t.Fatalf("after restart: %s, want epoch 4 [a b d]", got)
	}
}

// Over a transport, Elector.ChangeMembers adds a member that started
// outside the group: it is refused until the change, then follows the
// leader, and every member reports the new configuration through
// OnMembersChange.
func TestElectorChangeMembersAddsAJoiner(t *testing.T) {
	hub := transport.NewHub()
	three := map[string]string{"m1": "m1", "m2": "m2", "m3": "m3"}
	four := maps.Clone(three)
	four["m4"] = "m4"
	var mu sync.Mutex
	seen := map[string]uint64{}
	electors := map[string]*Elector{}
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	for _, id := range []string{"m1", "m2", "m3", "m4"} {
		peers := three
		if id == "m4" {
			peers = four
		}
		e, err := New(ElectorConfig{
			Cluster: "managers/members", Transport: hub.Node(id), Peers: peers, Profile: TestProfile(),
			Storage: NewMemoryStorage(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			OnMembersChange: func(c *Configuration) {
				mu.Lock()
				seen[id] = c.Epoch
				mu.Unlock()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		electors[id] = e
		wg.Go(func() {
			if err := e.Run(ctx); err != nil {
				t.Errorf("%s: Run = %v", id, err)
			}
		})
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		for id := range four {
			hub.Node(id).Close()
		}
	})
	var lead *Elector
	testutil.Eventually(t, waitFor, pollGap, func() error {
		for _, id := range []string{"m1", "m2", "m3"} {
			if e := electors[id]; e.IsLeader() {
				lead = e
				return nil
			}
		}
		return errors.New("no leader among m1..m3")
	})
	var next []Member
	for id, addr := range four {
		next = append(next, Member{ID: id, QUIC: addr})
	}
	cctx, ccancel := context.WithTimeout(ctx, waitFor)
	defer ccancel()
	var c *Configuration
	testutil.Eventually(t, waitFor, pollGap, func() error {
		var err error
		c, err = lead.ChangeMembers(cctx, next)
		if errors.Is(err, ErrNotSettled) {
			return err // the first acks of this term are still on their way
		}
		if err != nil {
			t.Fatalf("ChangeMembers: %v", err)
		}
		return nil
	})
	if c.Epoch != 1 || !c.Has("m4") {
		t.Fatalf("in effect: %s", c)
	}
	testutil.Eventually(t, waitFor, pollGap, func() error {
		mu.Lock()
		defer mu.Unlock()
		for id, e := range electors {
			if got := e.Members().Epoch; got != 1 || seen[id] != 1 {
				return fmt.Errorf("%s: epoch %d, reported %d", id, got, seen[id])
			}
			if st := e.Status(); st.Leader != lead.Status().ID {
				return fmt.Errorf("%s follows %q", id, st.Leader)
			}
		}
		return nil
	})
	if _, addr := electors["m4"].Leader(); addr == "" {
		t.Fatal("m4 knows no address for its leader")
	}
}

// FuzzHeartbeatConfig feeds a follower heartbeats decoded from arbitrary
// bytes: whatever configuration they carry, the follower never adopts one
// without members or with a duplicate, never panics, and stores what it
// adopted before it acknowledges it.
func FuzzHeartbeatConfig(f *testing.F) {
	seed, _ := wire.Marshal(&wire.LeaderHeartbeat{Cluster: "c", Term: 2, Leader: "b",
		Config: &wire.GroupConfig{Epoch: 1, Members: []wire.GroupMember{{ID: "a"}, {ID: "b"}, {ID: "d"}}}})
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		var hb wire.LeaderHeartbeat
		if wire.Unmarshal(b, &hb) != nil {
			return
		}
		st := NewMemoryStorage()
		m, err := NewMachine(Config{ID: "a", Cluster: "c", Peers: []string{"a", "b", "c"}, ElectionTicks: et, HeartbeatTicks: 2, MaxLeaderLHM: 4}, st)
		if err != nil {
			t.Fatal(err)
		}
		m.Step(hb.Leader, &hb)
		if _, err := m.Ready(); err != nil {
			t.Fatal(err)
		}
		c := m.Members()
		if len(c.Members) == 0 {
			t.Fatalf("adopted an empty configuration %s", c)
		}
		seen := map[string]bool{}
		for _, mem := range c.Members {
			if mem.ID == "" || seen[mem.ID] {
				t.Fatalf("adopted %s with an empty or duplicate member", c)
			}
			seen[mem.ID] = true
		}
		if hs, _ := st.Load(); c.Epoch > 0 && (hs.Config == nil || hs.Config.Epoch != c.Epoch) {
			t.Fatalf("adopted %s but stored %+v", c, hs)
		}
	})
}

// A node added as a learner follows the leader but does not vote or count
// toward any majority until it reports synced; then the leader promotes it
// by a change of its own. While it is a learner the group's quorum is the
// old one: with one of the three voters down, the two others still lead,
// and the learner's acknowledgements never stand in for the missing voter.
func TestLearnerIsPromotedOnlyOnceSynced(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			three := []string{"n1", "n2", "n3"}
			s := newSim(t, seed, simOptions{nodes: 4, maxDelay: 2,
				peers: map[string][]string{"n1": three, "n2": three, "n3": three, "n4": {"n1", "n2", "n3", "n4"}},
				syncs: map[string]bool{"n4": true}})
			var lead string
			if !s.runUntil(30*et, func() bool { var ok bool; lead, ok = s.leaderOf(three...); return ok }) {
				t.Fatal("no leader of three")
			}
			var added *Configuration
			if !s.runUntil(30*et, func() bool {
				var err error
				added, err = s.byID[lead].m.ProposeConfig(members(three...), members("n4"))
				return err == nil
			}) {
				t.Fatal("learner never proposed")
			}
			s.flush(s.byID[lead])
			if !s.runUntil(30*et, func() bool {
				return s.byID["n4"].m.Learner() && s.byID[lead].m.Members().Epoch >= added.Epoch
			}) {
				t.Fatalf("n4 never became a learner: %s", s.byID["n4"].m.Members())
			}
			s.run(20 * et)
			if c := s.byID[lead].m.Members(); c.Has("n4") || !c.HasLearner("n4") || c.Quorum() != 2 {
				t.Fatalf("an unsynced learner was promoted, or counts: %s quorum %d", c, c.Quorum())
			}
			if st := s.status("n4"); st.State != Follower || st.Leader != lead {
				t.Fatalf("learner n4 does not follow %s: %+v", lead, st)
			}
			s.byID["n4"].m.SetSynced(true)
			if !s.runUntil(30*et, func() bool {
				l, ok := s.leaderOf("n1", "n2", "n3", "n4")
				return ok && s.byID[l].m.Members().Has("n4") && !s.byID["n4"].m.Learner()
			}) {
				t.Fatalf("synced learner never promoted: %s", s.byID[lead].m.Members())
			}
			if c := s.byID["n4"].m.Members(); c.Epoch != added.Epoch+1 || c.Quorum() != 3 {
				t.Fatalf("promotion is not one change after the addition: %s quorum %d", c, c.Quorum())
			}
		})
	}
}

// While a learner, a node neither votes nor counts for check-quorum: with
// two of three voters down, the leader steps down though the learner keeps
// answering.
func TestLearnerDoesNotCountForCheckQuorum(t *testing.T) {
	three := []string{"n1", "n2", "n3"}
	s := newSim(t, 1, simOptions{nodes: 4, maxDelay: 1,
		peers: map[string][]string{"n1": three, "n2": three, "n3": three, "n4": {"n1", "n2", "n3", "n4"}},
		syncs: map[string]bool{"n4": true}})
	var lead string
	if !s.runUntil(30*et, func() bool { var ok bool; lead, ok = s.leaderOf(three...); return ok }) {
		t.Fatal("no leader of three")
	}
	if !s.runUntil(30*et, func() bool {
		_, err := s.byID[lead].m.ProposeConfig(members(three...), members("n4"))
		return err == nil
	}) {
		t.Fatal("learner never proposed")
	}
	s.flush(s.byID[lead])
	if !s.runUntil(30*et, func() bool { return s.byID["n4"].m.Learner() && s.byID[lead].m.Members().HasLearner("n4") }) {
		t.Fatal("n4 never became a learner")
	}
	for _, id := range three {
		if id != lead {
			s.kill(id)
		}
	}
	if !s.runUntil(10*et, func() bool { return s.status(lead).State != Leader }) {
		t.Fatalf("leader %s kept leading on a learner's acknowledgements alone", lead)
	}
	if st := s.status("n4"); st.State != Follower {
		t.Fatalf("learner campaigns: %+v", st)
	}
}

// A node that was never in the group (its operator started it before
// adding it) is refused like a removed one, but is not told it was
// removed: its role waits to be added instead of stopping.
func TestNewcomerIsRefusedButNotRemoved(t *testing.T) {
	three := []string{"n1", "n2", "n3"}
	s := newSim(t, 3, simOptions{nodes: 4, maxDelay: 1,
		peers: map[string][]string{"n1": three, "n2": three, "n3": three, "n4": {"n1", "n2", "n3", "n4"}}})
	if !s.runUntil(30*et, func() bool { _, ok := s.leaderOf(three...); return ok }) {
		t.Fatal("no leader of three")
	}
	// The group moves past epoch 0 without n4 (so its refusals carry a
	// newer epoch than n4's): n3 leaves.
	s.change(t, three, []string{"n1", "n2"})
	s.run(30 * et)
	n4 := s.byID["n4"]
	if !strings.Contains(n4.notice, "not a member") {
		t.Fatalf("newcomer n4 was not told why it is refused: %q", n4.notice)
	}
	if n4.removed {
		t.Fatalf("newcomer n4 (never a member) was told it was removed: %q", n4.notice)
	}
}
