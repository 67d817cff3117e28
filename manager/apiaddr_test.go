package manager

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"tempest/api"
	"tempest/internal/testutil"
	"tempest/swim"
	"tempest/wire"
)

// headerSink is an HTTP server that records the Authorization headers it
// receives and answers every request with an empty job list.
type headerSink struct {
	*httptest.Server
	mu   sync.Mutex
	auth []string
}

func newHeaderSink(t *testing.T) *headerSink {
	s := &headerSink{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"jobs":[]}`)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *headerSink) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

// A follower forwards a client's request, Authorization header and all,
// to the API URL the leader sent it over the sealed transport, never to
// one SWIM metadata names: any worker-key holder can gossip metadata.
func TestFollowerForwardsOnlyToTheURLTheLeaderSent(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.leader()
	real, forged := newHeaderSink(t), newHeaderSink(t)
	if err := l.SetAPIAddr(real.URL); err != nil {
		t.Fatal(err)
	}
	// The attacker's gossip names its own server as the leader's API.
	c.members.mu.Lock()
	c.members.meta[l.ID()] = swim.NodeMeta{Role: wire.RoleManager, Datacenter: "dc1", QUICAddr: l.ID(),
		Tags: map[string]string{"api": forged.URL}}
	c.members.mu.Unlock()

	var follower *Manager
	for _, m := range c.running() {
		if m != l {
			follower = m
			break
		}
	}
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if isLeader, url := follower.Leader(); isLeader || url != real.URL {
			return fmt.Errorf("follower's leader API: %v %q, want %q", isLeader, url, real.URL)
		}
		return nil
	})
	// Nor can a node that is not a configured manager announce a URL, even
	// under the leader's name in the message: the sender is what counts.
	evil := c.hub.Node("evil-not-a-manager")
	if err := evil.Send(context.Background(), follower.cfg.ID, &wire.LeaderAPI{Term: 1 << 40, URL: forged.URL}); err != nil {
		t.Fatal(err)
	}
	_, err := evil.Call(context.Background(), follower.cfg.ID, &wire.LeaderAPI{Term: 1 << 40, URL: forged.URL})
	if wire.CodeOf(err) != wire.CodeRejected {
		t.Fatalf("a stranger's LeaderAPI: %v, want rejected", err)
	}
	if _, url := follower.Leader(); url != real.URL {
		t.Fatalf("after a stranger's announcement the follower forwards to %q", url)
	}
	srv := httptest.NewServer(api.NewServer(api.ServerConfig{Token: "client-secret", LeaderWait: 5 * time.Second, RateLimit: 100, RateBurst: 100, RequestTimeout: 10 * time.Second}, follower).Handler())
	defer srv.Close()
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/jobs", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer client-secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := real.seen(); len(got) != 1 || got[0] != "Bearer client-secret" {
		t.Fatalf("the leader's own API got %q (status %d), want the forwarded request", got, resp.StatusCode)
	}
	if got := forged.seen(); len(got) != 0 {
		t.Fatalf("the gossiped URL received %q", got)
	}
}
