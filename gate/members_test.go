package gate

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tempest/api"
	"tempest/internal/testutil"
	"tempest/leadership"
	"tempest/transport"
	"tempest/wire"
)

// A gate follows the group configuration stored in its data dir, not its
// config file's peers: a gate whose group shrank to itself counts a quorum
// of one and no longer takes the gates it lost for peers.
func TestGateFollowsTheStoredConfiguration(t *testing.T) {
	hg := &hubGates{t: t, hub: transport.NewHub(), ids: []string{"g1", "g2", "g3"}, gates: map[string]*Gate{},
		stop: map[string]func(){}, dirs: map[string]string{"g1": t.TempDir()}}
	st, err := leadership.OpenBoltStorage(filepath.Join(hg.dirs["g1"], "election.db"))
	if err != nil {
		t.Fatal(err)
	}
	alone := &leadership.Configuration{Epoch: 2, Members: []leadership.Member{{ID: "g1", QUIC: "g1"}}}
	if err := st.Save(leadership.HardState{Term: 3, Config: alone}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	hg.start("g1", time.Minute)
	g := hg.leader(10*time.Second, "g1")
	p := g.group.Load()
	if p.Epoch != 2 || p.Quorum != 1 || g.isPeer("g2") || g.isPeer("g3") || len(g.peerAddrs()) != 0 {
		t.Fatalf("gate group %+v; want epoch 2, quorum 1, no peers", p)
	}
	if _, q := g.blobPeers(); q != 1 {
		t.Fatalf("blob quorum %d, want 1", q)
	}
}

// A gate added at runtime is SYNCING until it has copied the leader's
// records, then promoted; a gate removed stops by itself, and restarted
// from its data dir, stops again at once.
func TestGateGroupGrowsAndShrinks(t *testing.T) {
	hub := transport.NewHub()
	hg := startHubGates(t, hub, []string{"g1", "g2", "g3"}, time.Minute)
	l := hg.leader(10*time.Second, "g1", "g2", "g3")
	rec := &wire.GateJobRecord{Submission: wire.JobSubmission{JobID: "j-before", Name: "before"}, Status: wire.JobCompleted, Version: 1}
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		return l.save(context.Background(), l.adopt(rec))
	})

	// g4's config names the group and itself; it starts after it is added.
	// It may read only the leader: its start-up majority read never ends,
	// so what it holds comes from its copy as a learner.
	hub.SetHook(func(from, to string, msg wire.Message) bool {
		return !(from == "g4" && to != l.ID() && msg.Type() == wire.TypeStateSyncRequest)
	})
	defer hub.SetHook(nil)
	hg.ids = append(hg.ids, "g4")
	if _, err := l.AddMember(context.Background(), api.MemberChange{ID: "g4", Addr: "g4"}); err != nil {
		t.Fatal(err)
	}
	hg.start("g4", time.Minute)
	g4 := hg.gates["g4"]
	testutil.Eventually(t, 15*time.Second, 20*time.Millisecond, func() error {
		v := l.groupView()
		for _, m := range v.Members {
			if m.ID == "g4" && m.Voter {
				return nil
			}
		}
		return fmt.Errorf("g4 not promoted: %+v", v)
	})
	g4.mu.Lock()
	_, copied := g4.jobs["j-before"]
	g4.mu.Unlock()
	if !copied {
		t.Fatal("g4 promoted without the record stored before it joined")
	}

	// Remove a gate that does not lead.
	var gone string
	for _, id := range []string{"g1", "g2", "g3"} {
		if id != l.ID() {
			gone = id
			break
		}
	}
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		_, err := hg.leader(10*time.Second, "g1", "g2", "g3", "g4").RemoveMember(context.Background(), gone)
		if err != nil && wire.CodeOf(err) != wire.CodeUnavailable {
			t.Fatal(err)
		}
		return err
	})
	waitGateRemoved(t, hg.gates[gone], "removed from the gate group")
	hg.stop[gone]()
	hg.start(gone, time.Minute)
	waitGateRemoved(t, hg.gates[gone], "does not name it")
}

func waitGateRemoved(t *testing.T, g *Gate, why string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if err := g.ms.ExitError(); err == nil || !strings.Contains(err.Error(), why) {
			return fmt.Errorf("%s has not stopped saying %q (exit error %v)", g.ID(), why, err)
		}
		return nil
	})
}
