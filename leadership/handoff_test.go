package leadership

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/transport"
	"tempest/wire"
)

// A handover elects the chosen follower in a round trip or two: far inside
// one election timeout, which is what the group would otherwise wait while
// its followers still hold the old leader's lease.
func TestTransferLeadershipNeedsNoElectionTimeout(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) {
			s := newSim(t, 5, simOptions{nodes: n, maxDelay: 1})
			if !s.runUntil(20*et, s.converged) {
				t.Fatal("no first leader")
			}
			s.run(2 * et) // every follower has acked: any may be picked
			old, _ := s.leader()
			to, err := s.byID[old.ID].m.TransferLeadership("")
			if err != nil {
				t.Fatalf("TransferLeadership: %v", err)
			}
			s.flush(s.byID[old.ID])
			if st := s.status(old.ID); st.State != Follower || st.FenceToken != 0 {
				t.Fatalf("old leader after handing over: %+v; want a follower at once", st)
			}
			if !s.runUntil(et/2, s.converged) {
				t.Fatalf("no leader within %d ticks of handing over to %s (election timeout is %d)", et/2, to, et)
			}
			next, _ := s.leader()
			if next.ID != to || next.Term != old.Term+1 {
				t.Fatalf("after handing term %d to %s: leader %+v; want %s in term %d", old.Term, to, next, to, old.Term+1)
			}
		})
	}
}

func TestTimeoutNowOnlyFromTheCurrentLeader(t *testing.T) {
	tests := []struct {
		name     string
		from     string
		msg      wire.TimeoutNow
		unhealth bool
		want     bool
	}{
		{"current leader", "b", wire.TimeoutNow{Cluster: "c", Term: 3, Leader: "b"}, false, true},
		{"another member", "c", wire.TimeoutNow{Cluster: "c", Term: 3, Leader: "c"}, false, false},
		{"stale term", "b", wire.TimeoutNow{Cluster: "c", Term: 2, Leader: "b"}, false, false},
		{"forged leader field", "c", wire.TimeoutNow{Cluster: "c", Term: 3, Leader: "b"}, false, false},
		{"unhealthy target", "b", wire.TimeoutNow{Cluster: "c", Term: 3, Leader: "b"}, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "a", nil, nil)
			h.heartbeat("b", 3)
			if tc.unhealth {
				h.m.SetLHM(h.cfg.MaxLeaderLHM + 1)
				h.ready()
			}
			h.m.Step(tc.from, &tc.msg)
			rd := h.ready()
			st := h.m.Status()
			campaigned := st.State == Candidate && st.Term == 4
			if campaigned != tc.want {
				t.Fatalf("after TimeoutNow: %+v, messages %+v; campaigned=%v want %v", st, rd.Messages, campaigned, tc.want)
			}
			if !tc.want {
				return
			}
			if len(rd.Messages) != 2 {
				t.Fatalf("want vote requests to b and c, got %+v", rd.Messages)
			}
			for _, o := range rd.Messages {
				if vr, ok := o.Msg.(*wire.VoteRequest); !ok || !vr.Transfer || vr.Term != 4 {
					t.Fatalf("want transfer vote requests for term 4, got %+v", o.Msg)
				}
			}
		})
	}
}

// A voter that still hears its leader refuses an ordinary candidate of a
// newer term (the lease) but grants one the leader asked for.
func TestTransferVoteBypassesTheLease(t *testing.T) {
	for _, transfer := range []bool{false, true} {
		h := newHarness(t, "a", nil, nil)
		h.heartbeat("b", 3)
		h.m.Step("c", &wire.VoteRequest{Cluster: "c", Term: 4, Candidate: "c", Transfer: transfer})
		msgs := h.ready().Messages
		granted := len(msgs) == 1 && msgs[0].Msg.(*wire.VoteResponse).Granted
		if granted != transfer {
			t.Fatalf("transfer=%v: vote answer %+v; granted=%v", transfer, msgs, granted)
		}
	}
}

func TestTransferTargetPrefersPriorityThenHealth(t *testing.T) {
	h := newHarness(t, "a", nil, nil)
	if _, err := h.m.TransferLeadership(""); err != ErrNotLeader {
		t.Fatalf("follower TransferLeadership = %v, want ErrNotLeader", err)
	}
	h.makeLeader()
	if _, err := h.m.TransferLeadership(""); err != ErrNoTransferTarget {
		t.Fatalf("TransferLeadership before any ack = %v, want ErrNoTransferTarget", err)
	}
	term := h.m.Status().Term
	ack := func(from string, prio, lhm int) {
		h.m.Step(from, &wire.LeaderHeartbeatAck{Cluster: "c", Term: term, Follower: from, Success: true, Seq: 1, Priority: prio, LHM: lhm})
		h.ready()
	}
	ack("b", 1, 0)
	ack("c", 5, 0)
	if to, _ := h.m.TransferTarget(); to != "c" {
		t.Fatalf("target %q, want c (priority 5 over 1)", to)
	}
	ack("c", 5, h.cfg.MaxLeaderLHM+1)
	if to, _ := h.m.TransferTarget(); to != "b" {
		t.Fatalf("target %q, want b (c is too unhealthy to lead)", to)
	}
	to, err := h.m.TransferLeadership("")
	if err != nil || to != "b" {
		t.Fatalf("TransferLeadership = %q, %v; want b", to, err)
	}
	msgs := h.ready().Messages
	if len(msgs) != 1 || msgs[0].To != "b" || msgs[0].Msg.(*wire.TimeoutNow).Term != term {
		t.Fatalf("want one TimeoutNow{term %d} to b, got %+v", term, msgs)
	}
	if st := h.m.Status(); st.State != Follower || st.Leader != "" {
		t.Fatalf("after handing over: %+v", st)
	}
}

// A healthy voter refuses a pre-vote to a candidate it outranks (less
// healthy, or as healthy and of lower priority) and stands itself; once
// its own campaign failed it no longer does, so it cannot keep the group
// leaderless.
func TestPreVotePrefersHealthThenPriority(t *testing.T) {
	tests := []struct {
		name      string
		ownPrio   int
		candLHM   int
		candPrio  int
		wantGrant bool
	}{
		{"equal", 0, 0, 0, true},
		{"candidate less healthy", 9, 1, 0, false},
		{"candidate of lower priority", 5, 0, 1, false},
		{"candidate of higher priority", 1, 0, 5, true},
		{"healthier candidate beats priority", 9, 0, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "a", nil, func(c *Config) { c.Priority = tc.ownPrio })
			if tc.name == "healthier candidate beats priority" {
				h.m.SetLHM(1)
			}
			h.m.Step("b", &wire.PreVoteRequest{Cluster: "c", Term: 1, Candidate: "b", LHM: tc.candLHM, Priority: tc.candPrio})
			msgs := h.ready().Messages
			var granted, stood bool
			for _, o := range msgs {
				switch msg := o.Msg.(type) {
				case *wire.PreVoteResponse:
					granted = msg.Granted
				case *wire.PreVoteRequest:
					stood = true
				}
			}
			if granted != tc.wantGrant || stood == tc.wantGrant {
				t.Fatalf("granted=%v stood=%v, want granted=%v and standing only when refusing; messages %+v", granted, stood, tc.wantGrant, msgs)
			}
		})
	}
	// After its own round fails, the better node grants.
	h := newHarness(t, "a", nil, func(c *Config) { c.Priority = 5 })
	h.m.Step("b", &wire.PreVoteRequest{Cluster: "c", Term: 1, Candidate: "b"})
	h.ready()
	h.m.Step("b", &wire.PreVoteResponse{Cluster: "c", Term: 0, Voter: "b", Reason: "no"})
	h.m.Step("c", &wire.PreVoteResponse{Cluster: "c", Term: 0, Voter: "c", Reason: "no"})
	h.ready()
	h.m.Step("b", &wire.PreVoteRequest{Cluster: "c", Term: 1, Candidate: "b"})
	msgs := h.ready().Messages
	if len(msgs) != 1 || !msgs[0].Msg.(*wire.PreVoteResponse).Granted {
		t.Fatalf("after its own campaign failed, a grant expected: %+v", msgs)
	}
}

// Whoever wins the first race, a group settles on its highest-priority
// member, with no more than one leader at any time (the sim checks that).
func TestHighestPriorityEndsUpLeading(t *testing.T) {
	for seed := range uint64(20) {
		s := newSim(t, seed, simOptions{nodes: 5, maxDelay: 1, priority: map[string]int{"n2": 3, "n4": 7}})
		ok := s.runUntil(30*et, func() bool { l, ok := s.leader(); return ok && l.ID == "n4" })
		if !ok {
			l, _ := s.leader()
			t.Fatalf("seed %d: leader %+v after %d ticks, want n4 (priority 7)", seed, l, 30*et)
		}
		lead, _ := s.leader()
		s.run(20 * et)
		if now, _ := s.leader(); now != lead {
			t.Fatalf("seed %d: settled leader changed %+v -> %+v", seed, lead, now)
		}
		// n4 gone: the next priority takes over, and n4 back takes it again.
		s.kill("n4")
		if !s.runUntil(30*et, func() bool { l, ok := s.leader(); return ok && l.ID == "n2" }) {
			t.Fatalf("seed %d: without n4, n2 (priority 3) should lead", seed)
		}
		s.restart("n4")
		if !s.runUntil(30*et, func() bool { l, ok := s.leader(); return ok && l.ID == "n4" }) {
			t.Fatalf("seed %d: n4 back should lead again", seed)
		}
	}
}

// Elector.Handoff moves leadership with no tick anywhere after it starts:
// no election timeout is waited out.
func TestElectorHandoffWithoutTicks(t *testing.T) {
	hub := transport.NewHub()
	p := TestProfile()
	peers := map[string]string{"n1": "n1", "n2": "n2", "n3": "n3"}
	clocks := map[string]manualClock{}
	electors := map[string]*Elector{}
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	for id := range peers {
		clocks[id] = manualClock{c: make(chan time.Time)}
		e, err := New(ElectorConfig{
			Cluster: "managers/handoff", Transport: hub.Node(id), Peers: peers, Profile: p,
			Storage: NewMemoryStorage(), Clock: clocks[id], Priority: map[string]int{"n1": 2, "n3": 1}[id],
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
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
		for id := range peers {
			hub.Node(id).Close()
		}
	})
	lead := electors["n1"]
	// Only n1 is ticked (and it outranks both, so neither stands against
	// it): it campaigns, leads, and collects acks (n3's
	// priority among them) from its heartbeats.
	for range 2 * p.ElectionTicks {
		clocks["n1"].c <- time.Time{}
	}
	testutil.Eventually(t, waitFor, pollGap, func() error {
		for id, e := range electors {
			if st := e.Status(); st.Leader != "n1" {
				return fmt.Errorf("%s follows %q", id, st.Leader)
			}
		}
		return nil
	})
	term := lead.Status().Term
	// The handover picks by what the followers' heartbeat answers said
	// (their priorities); a tick only sends the heartbeats, so wait until
	// the leader has taken an answer from each, sent after this point.
	sent := time.Now()
	for range 2 * p.HeartbeatTicks {
		clocks["n1"].c <- time.Time{}
	}
	testutil.Eventually(t, waitFor, pollGap, func() error {
		lead.mu.Lock()
		defer lead.mu.Unlock()
		for _, id := range []string{"n2", "n3"} {
			if at, ok := lead.lease.at[id]; !ok || at.Before(sent) {
				return fmt.Errorf("no answer from %s to a heartbeat sent after %v", id, sent)
			}
		}
		return nil
	})
	hctx, hcancel := context.WithTimeout(ctx, waitFor)
	defer hcancel()
	to, err := lead.Handoff(hctx)
	if err != nil {
		t.Fatalf("Handoff: %v", err)
	}
	if to != "n3" {
		t.Fatalf("handed over to %s, want n3 (the follower of highest priority)", to)
	}
	testutil.Eventually(t, waitFor, pollGap, func() error {
		for id, e := range electors {
			if st := e.Status(); st.Leader != "n3" || st.Term != term+1 {
				return fmt.Errorf("%s: %+v; want n3 leading term %d", id, st, term+1)
			}
		}
		return nil
	})
	if _, err := electors["n2"].Handoff(hctx); err == nil {
		t.Fatal("Handoff by a follower succeeded")
	}
}
