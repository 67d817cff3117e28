package leadership

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/transport"
	"tempest/wire"
)

// fakeWall is a wall clock the test moves by hand.
type fakeWall struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeWall) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeWall) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t = f.t.Add(d)
}

// The leader lease is measured on the wall clock, not in ticks: a leader cut
// off from a majority sees its quorum age grow with real time even while
// its ticks lag so far behind that check-quorum has not yet made it step
// down; a leader that still reaches a majority sees the age fall back to
// nothing at every heartbeat round. Every node runs on a manual ticker and
// the fake wall clock, so the ages are exact.
func TestElectorQuorumAge(t *testing.T) {
	p := TestProfile()
	tests := []struct {
		name  string
		nodes int
		cut   int // peers of the leader cut off from it
		grows bool
	}{
		{"three nodes, none cut", 3, 0, false},
		{"three nodes, one cut: still a majority", 3, 1, false},
		{"three nodes, both cut", 3, 2, true},
		{"five nodes, two cut: still a majority", 5, 2, false},
		{"five nodes, three cut", 5, 3, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hub := transport.NewHub()
			wall := &fakeWall{t: time.Unix(1_000_000, 0)}
			peers := make(map[string]string, tc.nodes)
			var ids []string
			for i := range tc.nodes {
				id := fmt.Sprintf("n%d", i+1)
				peers[id], ids = id, append(ids, id)
			}
			clocks := make(map[string]manualClock, tc.nodes)
			electors := make(map[string]*Elector, tc.nodes)
			var wg sync.WaitGroup
			ctx, cancel := context.WithCancel(context.Background())
			for _, id := range ids {
				tr := hub.Node(id)
				clocks[id] = manualClock{c: make(chan time.Time)}
				e, err := New(ElectorConfig{
					Cluster: "managers/lease", Transport: tr, Peers: peers, Profile: p,
					Storage: NewMemoryStorage(), Clock: clocks[id], Now: wall.Now,
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
				for _, id := range ids {
					hub.Node(id).Close()
				}
			})
			// Only n1 is ever ticked, so only n1 campaigns and leads.
			lead := electors["n1"]
			tick := func(n int) {
				for range n {
					clocks["n1"].c <- time.Time{}
				}
			}
			if _, ok := lead.QuorumAge(); ok {
				t.Fatal("QuorumAge ok before leading")
			}
			tick(2 * p.ElectionTicks)
			testutil.Eventually(t, waitFor, pollGap, func() error {
				if !lead.IsLeader() {
					return fmt.Errorf("n1 not leader: %+v", lead.Status())
				}
				return nil
			})
			// The votes that elected it confirm it at the moment it asked.
			waitAge := func(want time.Duration) {
				t.Helper()
				testutil.Eventually(t, waitFor, pollGap, func() error {
					if age, ok := lead.QuorumAge(); !ok || age != want {
						return fmt.Errorf("QuorumAge = %v, %v; want %v, true", age, ok, want)
					}
					return nil
				})
			}
			waitAge(0)
			// Connected: the age is the time since the last heartbeat round,
			// and each round brings it back to zero.
			for range 2 {
				wall.advance(time.Second)
				waitAge(time.Second)
				tick(p.HeartbeatTicks)
				waitAge(0)
			}
			cut := ids[1 : 1+tc.cut]
			hub.SetHook(func(from, to string, _ wire.Message) bool {
				return !(from == "n1" && slices.Contains(cut, to) || to == "n1" && slices.Contains(cut, from))
			})
			// Thirty seconds of wall time pass while n1's loop manages only
			// one heartbeat round: far fewer ticks than check-quorum needs.
			wall.advance(30 * time.Second)
			tick(p.HeartbeatTicks)
			if tc.grows {
				// No majority answers the round: the age keeps counting
				// from the last confirmed one, while n1 still leads.
				wall.advance(time.Second)
				waitAge(31 * time.Second)
				if !lead.IsLeader() {
					t.Fatal("n1 stepped down early; the test needs it to lag")
				}
			} else {
				waitAge(0)
			}
			// Once the ticks catch up, check-quorum has its say too: it
			// deposes the cut-off leader, and keeps the other (given time
			// for the acks of each round to arrive).
			if tc.grows {
				tick(2 * p.ElectionTicks)
				testutil.Eventually(t, waitFor, pollGap, func() error {
					if age, ok := lead.QuorumAge(); ok {
						return fmt.Errorf("cut-off n1 still leads, QuorumAge %v", age)
					}
					return nil
				})
				return
			}
			for range 2 * p.ElectionTicks / p.HeartbeatTicks {
				wall.advance(time.Millisecond)
				tick(p.HeartbeatTicks)
				waitAge(0)
			}
		})
	}
}
