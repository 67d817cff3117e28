package gate

import (
	"context"
	"fmt"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/transport"
	"tempest/wire"
)

// A follower gate learns the leader's API URL from the leader itself, over
// the transport, and from no node that is not a configured gate: it is where
// the follower forwards clients' requests with their bearer tokens.
func TestFollowerGateLearnsTheLeaderAPIFromTheLeader(t *testing.T) {
	hub := transport.NewHub()
	ids := []string{"g1", "g2", "g3"}
	hg := startHubGates(t, hub, ids, time.Minute)
	leader := hg.leader(10*time.Second, ids...)
	if err := leader.SetAPIAddr("http://leader-api:8080"); err != nil {
		t.Fatal(err)
	}
	var follower *Gate
	for _, id := range ids {
		if hg.gates[id] != leader {
			follower = hg.gates[id]
			break
		}
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if is, url := follower.Leader(); is || url != "http://leader-api:8080" {
			return fmt.Errorf("follower's leader API: %v %q", is, url)
		}
		return nil
	})
	_, err := hub.Node("evil").Call(context.Background(), follower.ID(), &wire.LeaderAPI{Term: 1 << 40, URL: "http://evil:8080"})
	if wire.CodeOf(err) != wire.CodeRejected {
		t.Fatalf("a stranger's LeaderAPI: %v, want rejected", err)
	}
	if _, url := follower.Leader(); url != "http://leader-api:8080" {
		t.Fatalf("after a stranger's announcement the follower forwards to %q", url)
	}
}
