package api_test

import (
	"net/http"
	"testing"
	"time"

	"tempest/api"
	"tempest/api/apitest"
)

func TestServerRateLimit(t *testing.T) {
	now := time.Unix(1000, 0)
	srv := apitest.Serve(t, apitest.NewBackend(), func(c *api.ServerConfig) {
		c.RateLimit, c.RateBurst = 0.5, 2       // one token per 2s
		c.Now = func() time.Time { return now } // frozen: no refill during the test
	})
	c := newRawClient(t)
	for i := range 2 {
		if resp, body := c.do("GET", srv.URL()+"/v1/jobs", nil, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	// Unauthenticated and health requests are limited too: token guessing
	// must not be free.
	for _, path := range []string{"/v1/jobs", "/healthz"} {
		resp, body := c.do("GET", srv.URL()+path, nil, map[string]string{"Authorization": ""})
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("%s over the limit: %d %s", path, resp.StatusCode, body)
		}
		if e := decodeErrorBody(t, body); e.Code != api.CodeRateLimited {
			t.Errorf("code %q", e.Code)
		}
		if ra := resp.Header.Get("Retry-After"); ra != "2" {
			t.Errorf("Retry-After %q, want 2", ra)
		}
	}

	// The client surfaces it typed.
	_, err := newClient(t, srv.URL()).Jobs(t.Context())
	apiErr, ok := err.(*api.Error)
	if !ok || apiErr.Status != http.StatusTooManyRequests || apiErr.RetryAfter != 2*time.Second {
		t.Fatalf("client error %#v, want 429 with RetryAfter 2s", err)
	}
}
