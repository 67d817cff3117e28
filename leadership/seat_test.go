package leadership

import (
	"path/filepath"
	"testing"

	"tempest/internal/testutil"
	"tempest/transport"
)

// OpenSeat opens what a role was not given and owns only that: a given
// transport and storage are used and never closed, an empty member list is
// this node alone at its transport's address, and the election storage it
// opened is closed by Close (and on a failed open), so the role can open it
// again.
func TestOpenSeat(t *testing.T) {
	hub := transport.NewHub()
	for _, tc := range []struct {
		name      string
		members   []Member
		storage   Storage
		cluster   string // "" makes the elector refuse its config
		quorum    int
		ownsStore bool
	}{
		{"alone, everything given", nil, NewMemoryStorage(), "c", 1, false},
		{"a group of three, storage opened", []Member{{ID: "a", QUIC: "a"}, {ID: "b", QUIC: "b"}, {ID: "c", QUIC: "c"}}, nil, "c", 2, true},
		{"the elector refuses: what was opened is closed", nil, nil, "", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := hub.Node("a")
			defer tr.Close()
			dir := testutil.DataDir(t, "seat")
			s, err := OpenSeat(SeatConfig{ID: "a", Members: tc.members, Transport: tr, Storage: tc.storage, DataDir: dir,
				Elector: ElectorConfig{Cluster: tc.cluster, Profile: TestProfile()}})
			if tc.cluster == "" {
				if err == nil || s != nil {
					t.Fatalf("OpenSeat = %v, %v; want the elector's refusal", s, err)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if s.Tr != tr || s.ownTr != nil {
					t.Fatal("the given transport was not used as it is")
				}
				if (s.ownStore != nil) != tc.ownsStore {
					t.Fatalf("owns its storage: %v, want %v", s.ownStore != nil, tc.ownsStore)
				}
				if s.Group.Quorum != tc.quorum || s.Group.All["a"] == "" {
					t.Fatalf("group %+v, members %+v; want quorum %d with this node", s.Group, s.Members, tc.quorum)
				}
				if len(tc.members) == 0 && (len(s.Members) != 1 || s.Members[0] != (Member{ID: "a", QUIC: tr.Addr()})) {
					t.Fatalf("members %+v; want this node alone", s.Members)
				}
				if s.Elector == nil {
					t.Fatal("no elector")
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			// Whatever it opened is closed: the file opens again at once.
			if tc.ownsStore {
				again, err := OpenBoltStorage(filepath.Join(dir, "election.db"))
				if err != nil {
					t.Fatalf("election storage still held after the seat closed: %v", err)
				}
				again.Close()
			}
		})
	}
}
