package gate

import (
	"path/filepath"
	"testing"
	"time"

	"tempest/leadership"
	"tempest/transport"
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
