package api_test

import (
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"tempest/api"
	"tempest/api/apitest"
	"tempest/internal/testutil"
	"tempest/security"
)

const (
	clusterSecret = "api-test-secret-Hq7vT2xK9mW4pZ1cR8nF5sL3yJ6dG0aB"
	otherSecret   = "api-test-other-9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b"
)

// rawClientFrom is newRawClient with connections from a chosen local IP.
func rawClientFrom(t testing.TB, ip string) *rawClient {
	c := newRawClient(t)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c.hc.Transport.(*http.Transport).DialContext = d.DialContext
	return c
}

// The leader rate-limits each client behind a follower on its own, because
// the follower vouches for the client's address with a header only holders
// of the secret can make; a forged or foreign header is ignored and
// counted.
func TestLeaderLimitsEachClientBehindAFollower(t *testing.T) {
	keys, err := security.NewKeyring(clusterSecret, "")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	leader := apitest.Serve(t, apitest.NewBackend(), func(c *api.ServerConfig) {
		c.RateLimit, c.RateBurst = 0.001, 2
		c.Now = func() time.Time { return now } // no refill during the test
		c.Keyring = keys
	})
	followerB := apitest.NewBackend()
	followerB.SetLeader(false, leader.URL())
	follower := apitest.Serve(t, followerB, func(c *api.ServerConfig) { c.Keyring = keys })

	a, b := rawClientFrom(t, "127.0.0.1"), rawClientFrom(t, "127.0.0.2")
	for i := range 2 {
		if resp, body := a.do("GET", follower.URL()+"/v1/jobs", nil, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("client a, request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if resp, _ := a.do("GET", follower.URL()+"/v1/jobs", nil, nil); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("client a over its limit at the leader: %d, want 429", resp.StatusCode)
	}
	// Before, every client of the follower shared the follower's bucket.
	if resp, body := b.do("GET", follower.URL()+"/v1/jobs", nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("client b behind the same follower: %d %s, want its own bucket", resp.StatusCode, body)
	}

	// A client forging the header, unsigned or signed with another secret,
	// is limited by its own address and counted.
	other, err := security.NewKeyring(otherSecret, "")
	if err != nil {
		t.Fatal(err)
	}
	id, proof, err := other.Prove(security.TierManager, []byte("anything"))
	if err != nil {
		t.Fatal(err)
	}
	c := rawClientFrom(t, "127.0.0.3")
	foreign := fmt.Sprintf("127.0.0.98 %d %08x %s", now.UnixMilli(), id, base64.RawURLEncoding.EncodeToString(proof))
	for _, h := range []string{"127.0.0.99 0 00000000 AAAA", foreign} {
		c.do("GET", leader.URL()+"/v1/jobs", nil, map[string]string{"X-Tempest-Client": h})
	}
	if resp, _ := c.do("GET", leader.URL()+"/v1/jobs", nil, map[string]string{"X-Tempest-Client": "127.0.0.97 0 0 A"}); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("forged headers gave client c fresh buckets: %d, want 429 on its third request", resp.StatusCode)
	}
	_, metrics := rawClientFrom(t, "127.0.0.4").do("GET", leader.URL()+"/metrics", nil, nil)
	if !strings.Contains(string(metrics), "tempest_api_untrusted_client_headers_total 3\n") {
		t.Errorf("leader metrics do not count 3 untrusted client headers:\n%s", metrics)
	}
}

// /metrics lists running job ids, so an operator can require a token for
// it; without one configured it stays open for scrapers.
func TestMetricsToken(t *testing.T) {
	srv := apitest.Serve(t, apitest.NewBackend(), func(c *api.ServerConfig) { c.MetricsToken = "metrics-token-0123" })
	c := newRawClient(t)
	if resp, _ := c.do("GET", srv.URL()+"/metrics", nil, map[string]string{"Authorization": ""}); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/metrics without a token: %d, want 401", resp.StatusCode)
	}
	// The API token is not the metrics token.
	if resp, _ := c.do("GET", srv.URL()+"/metrics", nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/metrics with the API token: %d, want 401", resp.StatusCode)
	}
	resp, body := c.do("GET", srv.URL()+"/metrics", nil, map[string]string{"Authorization": "Bearer metrics-token-0123"})
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "tempest_api_requests_total") {
		t.Fatalf("/metrics with the metrics token: %d %s", resp.StatusCode, body)
	}
	open := apitest.Serve(t, apitest.NewBackend(), nil)
	if resp, _ := c.do("GET", open.URL()+"/metrics", nil, map[string]string{"Authorization": ""}); resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics with no metrics token configured: %d, want 200", resp.StatusCode)
	}
}

// A connection closed before it carried a whole request (a slowloris
// client cut by the header timeout, or one that connected and left) is
// counted; one that was served is not.
func TestConnectionsClosedWithoutRequestAreCounted(t *testing.T) {
	srv := apitest.Serve(t, apitest.NewBackend(), nil)
	addr := strings.TrimPrefix(srv.URL(), "http://")
	for range 2 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET /v1/jobs HTTP/1.1\r\nHost: x\r\n") // never finished
		conn.Close()
	}
	c := newRawClient(t)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		_, body := c.do("GET", srv.URL()+"/metrics", nil, nil)
		if !strings.Contains(string(body), "tempest_api_conns_closed_without_request_total 2\n") {
			return fmt.Errorf("metrics do not count 2 connections closed without a request:\n%s", body)
		}
		return nil
	})
}
