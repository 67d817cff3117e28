package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"tempest/api"
	"tempest/api/apitest"
)

const goodJob = "name: smoke\nworkflows:\n  - {name: nap, type: sleep, duration: 1s}\n  - {name: nap2, type: sleep, duration: 2s}\n"

// rawClient sends hand-made requests, to see exactly what the server answers.
type rawClient struct {
	t  testing.TB
	hc *http.Client
}

func newRawClient(t testing.TB) *rawClient {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &rawClient{t: t, hc: &http.Client{
		Transport: tr,
		// Tests look at redirects themselves.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// do sends a request with the apitest token unless header sets its own
// Authorization ("" to send none).
func (c *rawClient) do(method, url string, body []byte, header map[string]string) (*http.Response, []byte) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apitest.Token)
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp, b
}

func decodeErrorBody(t testing.TB, b []byte) api.ErrorBody {
	t.Helper()
	var e api.ErrorBody
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("error body %q: %v", b, err)
	}
	return e
}

func newClient(t testing.TB, urls ...string) *api.Client {
	t.Helper()
	c, err := api.NewClient(urls, apitest.Token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
