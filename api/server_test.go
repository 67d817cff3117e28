package api_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"tempest/api"

	"tempest/api/apitest"
	"tempest/internal/obs"
	"tempest/internal/obs/obstest"
	"tempest/wire"
)

func TestSubmit(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		filename string
		wantName string
	}{
		{"yaml", goodJob, "smoke.yaml", "smoke"},
		{"json", `{"name":"j","workflows":[{"name":"a","type":"sleep","duration":"1s"}]}`, "j.json", "j"},
		{"no filename", goodJob, "", "smoke"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := apitest.NewBackend()
			srv := apitest.Serve(t, b, nil)
			c := newRawClient(t)
			resp, body := c.do("POST", srv.URL()+"/v1/jobs", []byte(tt.body), map[string]string{api.FilenameHeader: tt.filename})
			if resp.StatusCode != http.StatusCreated {
				t.Fatalf("status %d, body %s", resp.StatusCode, body)
			}
			var got api.SubmitResponse
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			if got.JobID != "job-1" || len(got.Datacenters) != 1 || got.Datacenters[0] != "dc1" {
				t.Errorf("answer %+v, want job-1 in dc1", got)
			}
			if loc := resp.Header.Get("Location"); loc != "/v1/jobs/job-1" {
				t.Errorf("Location %q", loc)
			}
			subs := b.Submissions()
			if len(subs) != 1 || subs[0].Name != tt.wantName {
				t.Fatalf("backend got %+v, want one job named %q", subs, tt.wantName)
			}
		})
	}
}

func TestSubmitBadJobFile(t *testing.T) {
	b := apitest.NewBackend()
	srv := apitest.Serve(t, b, nil)
	c := newRawClient(t)
	bad := "name: smoke\nworkflows:\n  - {name: nap, type: sleep, duraton: 1s}\n  - {name: x, type: nope}\n"
	resp, body := c.do("POST", srv.URL()+"/v1/jobs", []byte(bad), map[string]string{api.FilenameHeader: "/home/me/bad.yaml"})
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, body %s", resp.StatusCode, body)
	}
	e := decodeErrorBody(t, body)
	if e.Code != api.CodeMalformed || !strings.Contains(e.Error, "bad.yaml") {
		t.Errorf("error %+v, want malformed naming bad.yaml (base name only)", e)
	}
	if strings.Contains(e.Error, "/home/me") {
		t.Errorf("error %q leaks the client's path", e.Error)
	}
	lines := map[int]bool{}
	for _, p := range e.Problems {
		lines[p.Line] = true
		if p.Message == "" || p.Path == "" {
			t.Errorf("problem %+v lacks path or message", p)
		}
	}
	if !lines[3] || !lines[4] {
		t.Errorf("problems %+v, want lines 3 and 4", e.Problems)
	}
	// The raw JSON carries the documented keys.
	if !strings.Contains(string(body), `"line":3`) || !strings.Contains(string(body), `"path":"workflows[0]"`) {
		t.Errorf("body %s lacks line/path keys", body)
	}
	if n := len(b.Submissions()); n != 0 {
		t.Errorf("backend got %d submissions of a bad file", n)
	}
}

func TestSubmitEmptyAndRejected(t *testing.T) {
	b := &rejectingBackend{apitest.NewBackend()}
	srv := apitest.Serve(t, b, nil)
	c := newRawClient(t)

	resp, body := c.do("POST", srv.URL()+"/v1/jobs", nil, nil)
	if e := decodeErrorBody(t, body); resp.StatusCode != http.StatusBadRequest || e.Code != api.CodeMalformed {
		t.Errorf("empty body: %d %+v, want 400 malformed", resp.StatusCode, e)
	}
	resp, body = c.do("POST", srv.URL()+"/v1/jobs", []byte(goodJob), nil)
	e := decodeErrorBody(t, body)
	if resp.StatusCode != http.StatusConflict || e.Code != api.CodeRejected || e.Error != "no room" {
		t.Errorf("refused ack: %d %+v, want 409 rejected 'no room'", resp.StatusCode, e)
	}
}

// rejectingBackend accepts nothing, with an ack rather than an error.
type rejectingBackend struct{ *apitest.Backend }

func (rejectingBackend) Submit(context.Context, *wire.JobSubmission) (*wire.JobAck, error) {
	return &wire.JobAck{Accepted: false, Error: "no room"}, nil
}

func TestBodyLimit(t *testing.T) {
	b := apitest.NewBackend()
	srv := apitest.Serve(t, b, func(c *api.ServerConfig) { c.MaxBodyBytes = 1024 })
	big := "name: smoke\n# " + strings.Repeat("x", 2048) + "\nworkflows:\n  - {name: nap, type: sleep, duration: 1s}\n"

	c := newRawClient(t)
	resp, body := c.do("POST", srv.URL()+"/v1/jobs", []byte(big), nil)
	if e := decodeErrorBody(t, body); resp.StatusCode != http.StatusRequestEntityTooLarge || e.Code != api.CodeTooLarge {
		t.Errorf("with Content-Length: %d %+v, want 413 too_large", resp.StatusCode, e)
	}

	// Without a Content-Length (chunked), the limit bites while reading.
	req, err := http.NewRequest("POST", srv.URL()+"/v1/jobs", io.MultiReader(strings.NewReader(big)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apitest.Token)
	hresp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(hresp.Body)
	hresp.Body.Close()
	if e := decodeErrorBody(t, body); hresp.StatusCode != http.StatusRequestEntityTooLarge || e.Code != api.CodeTooLarge {
		t.Errorf("chunked: %d %+v, want 413 too_large", hresp.StatusCode, e)
	}
	if n := len(b.Submissions()); n != 0 {
		t.Errorf("backend got %d submissions", n)
	}
}

func TestAuth(t *testing.T) {
	b := apitest.NewBackend()
	srv := apitest.Serve(t, b, nil)
	c := newRawClient(t)
	tests := []struct {
		name, path, auth string
		want             int
	}{
		{"no token", "/v1/jobs", "", http.StatusUnauthorized},
		{"wrong token", "/v1/jobs", "Bearer nope", http.StatusUnauthorized},
		{"token prefix", "/v1/jobs", "Bearer " + apitest.Token[:5], http.StatusUnauthorized},
		{"wrong scheme", "/v1/jobs", "Basic " + apitest.Token, http.StatusUnauthorized},
		{"empty bearer", "/v1/jobs", "Bearer ", http.StatusUnauthorized},
		{"good", "/v1/jobs", "Bearer " + apitest.Token, http.StatusOK},
		{"scheme is case-insensitive", "/v1/jobs", "bearer " + apitest.Token, http.StatusOK},
		{"unknown v1 path needs a token", "/v1/nope", "", http.StatusUnauthorized},
		{"healthz without token", "/healthz", "", http.StatusOK},
		{"metrics without token", "/metrics", "", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := c.do("GET", srv.URL()+tt.path, nil, map[string]string{"Authorization": tt.auth})
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d (body %s)", resp.StatusCode, tt.want, body)
			}
			if tt.want == http.StatusUnauthorized {
				if e := decodeErrorBody(t, body); e.Code != api.CodeUnauthenticated {
					t.Errorf("code %q", e.Code)
				}
				if h := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(h, "Bearer") {
					t.Errorf("WWW-Authenticate %q", h)
				}
			}
		})
	}
}

func TestEndpoints(t *testing.T) {
	b := apitest.NewBackend()
	b.AddJob(api.JobStatus{JobID: "j1", Name: "one", Status: wire.JobCompleted, TotalCompleted: 10, TotalFailed: 1,
		Workflows: []api.WorkflowStatus{{Name: "get", WorkflowID: "w1", Type: "http", Status: wire.WorkflowCompleted,
			CompletedCount: 10, FailedCount: 1, Attempts: 1, Worker: "worker-1",
			Steps: []api.StepSummary{{Name: "root", Completed: 10, Failed: 1, P50Ms: 1.5, P90Ms: 2, P99Ms: 3.25, MaxMs: 4}}}}})
	b.AddJob(api.JobStatus{JobID: "j2", Name: "two", Status: wire.JobRunning,
		Workflows: []api.WorkflowStatus{{Name: "nap", WorkflowID: "w2", Type: "sleep", Status: wire.WorkflowRunning}}})
	b.SetCluster(api.ClusterView{Nodes: []api.NodeView{{Name: "m1", Role: "manager", DC: "dc1", State: "alive", IsLeader: true}}})
	srv := apitest.Serve(t, b, func(c *api.ServerConfig) { c.Role = "gate" })
	c := newRawClient(t)
	base := srv.URL()

	type check func(t *testing.T, resp *http.Response, body []byte)
	jsonInto := func(v any, f func() error) check {
		return func(t *testing.T, resp *http.Response, body []byte) {
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if err := json.Unmarshal(body, v); err != nil {
				t.Fatalf("decode %s: %v", body, err)
			}
			if err := f(); err != nil {
				t.Error(err)
			}
		}
	}
	errCode := func(code string) check {
		return func(t *testing.T, _ *http.Response, body []byte) {
			if e := decodeErrorBody(t, body); e.Code != code {
				t.Errorf("code %q, want %q", e.Code, code)
			}
		}
	}
	var list api.JobList
	var job api.JobStatus
	var cancel api.CancelResponse
	var res api.Results
	var view api.ClusterView
	var health api.Health
	tests := []struct {
		name, method, path, body string
		want                     int
		check                    check
	}{
		{"list", "GET", "/v1/jobs", "", 200, jsonInto(&list, func() error {
			if len(list.Jobs) != 2 || list.Jobs[0].JobID != "j2" {
				return fmt.Errorf("jobs %+v, want j2 then j1", list.Jobs)
			}
			return nil
		})},
		{"get", "GET", "/v1/jobs/j1", "", 200, jsonInto(&job, func() error {
			if job.JobID != "j1" || job.TotalCompleted != 10 || len(job.Workflows) != 1 || job.Workflows[0].Steps[0].P99Ms != 3.25 {
				return fmt.Errorf("job %+v", job)
			}
			return nil
		})},
		{"get unknown", "GET", "/v1/jobs/nope", "", 404, errCode(api.CodeNotFound)},
		{"get bad id", "GET", "/v1/jobs/a%20b", "", 400, errCode(api.CodeMalformed)},
		{"cancel with reason", "POST", "/v1/jobs/j2/cancel", `{"reason":"enough"}`, 200, jsonInto(&cancel, func() error {
			if cancel != (api.CancelResponse{JobID: "j2", Cancelled: true, WorkflowsCancelled: 1}) {
				return fmt.Errorf("cancel %+v", cancel)
			}
			return nil
		})},
		{"cancel finished", "POST", "/v1/jobs/j1/cancel", "", 200, jsonInto(&cancel, func() error {
			if cancel.Cancelled {
				return fmt.Errorf("cancel of a finished job %+v", cancel)
			}
			return nil
		})},
		{"cancel bad body", "POST", "/v1/jobs/j1/cancel", `{"reason":1}`, 400, errCode(api.CodeMalformed)},
		{"cancel unknown field", "POST", "/v1/jobs/j1/cancel", `{"why":"x"}`, 400, errCode(api.CodeMalformed)},
		{"cancel unknown", "POST", "/v1/jobs/nope/cancel", "", 404, errCode(api.CodeNotFound)},
		{"results", "GET", "/v1/jobs/j1/results", "", 200, jsonInto(&res, func() error {
			if res.JobID != "j1" || res.Status != wire.JobCompleted || len(res.Workflows) != 1 {
				return fmt.Errorf("results %+v", res)
			}
			return nil
		})},
		{"results csv", "GET", "/v1/jobs/j1/results?format=csv", "", 200, func(t *testing.T, resp *http.Response, body []byte) {
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/csv") {
				t.Errorf("Content-Type %q", ct)
			}
			rows, err := csv.NewReader(strings.NewReader(string(body))).ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			want := [][]string{
				{"workflow", "step", "completed", "failed", "p50_ms", "p90_ms", "p99_ms", "max_ms", "checks_passed", "checks_failed", "checks",
					"rps", "p95_ms", "p999_ms", "statuses", "errors"},
				{"get", "root", "10", "1", "1.500", "2.000", "3.250", "4.000", "0", "0", "", "", "0.000", "0.000", "", ""},
			}
			if fmt.Sprint(rows) != fmt.Sprint(want) {
				t.Errorf("csv %q, want %q", rows, want)
			}
		}},
		{"results bad format", "GET", "/v1/jobs/j1/results?format=xml", "", 400, errCode(api.CodeMalformed)},
		{"results unknown", "GET", "/v1/jobs/nope/results", "", 404, errCode(api.CodeNotFound)},
		{"cluster", "GET", "/v1/cluster", "", 200, jsonInto(&view, func() error {
			if len(view.Nodes) != 1 || view.Nodes[0].Name != "m1" || !view.Nodes[0].IsLeader {
				return fmt.Errorf("cluster %+v", view)
			}
			return nil
		})},
		{"healthz", "GET", "/healthz", "", 200, jsonInto(&health, func() error {
			if health != (api.Health{Status: "ok", Role: "gate", Leader: true}) {
				return fmt.Errorf("health %+v", health)
			}
			return nil
		})},
		{"unknown v1", "GET", "/v1/nope", "", 404, errCode(api.CodeNotFound)},
		{"unknown", "GET", "/nope", "", 404, errCode(api.CodeNotFound)},
		{"wrong method", "DELETE", "/v1/jobs/j1", "", 405, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body []byte
			if tt.body != "" {
				body = []byte(tt.body)
			}
			resp, got := c.do(tt.method, base+tt.path, body, nil)
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d (body %s)", resp.StatusCode, tt.want, got)
			}
			if tt.check != nil {
				tt.check(t, resp, got)
			}
		})
	}
	if got := b.Cancels(); len(got) != 2 {
		t.Errorf("backend cancels %v, want j2 and j1", got)
	}
	st, err := b.Job(context.Background(), "j2")
	if err != nil || st.Error != "enough" {
		t.Errorf("cancelled job %+v (%v): want the reason recorded", st, err)
	}
}

func TestTypedErrors(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		want       int
		wantCode   string
		wantMsg    string
		retryAfter string
	}{
		{"not found", wire.Errorf(wire.CodeNotFound, "job x not found"), 404, api.CodeNotFound, "job x not found", ""},
		{"no quorum", wire.Errorf(wire.CodeNoQuorum, "no quorum: 1 of 3 managers confirmed"), 503, api.CodeNoQuorum, "no quorum: 1 of 3 managers confirmed", ""},
		{"rejected", wire.Errorf(wire.CodeRejected, "already finished"), 409, api.CodeRejected, "already finished", ""},
		{"stale fence", wire.Errorf(wire.CodeStaleFence, "old"), 409, api.CodeStaleFence, "old", ""},
		{"rate limited", &wire.Error{Code: wire.CodeRateLimited, Message: "slow down", RetryAfter: 1500 * time.Millisecond}, 429, api.CodeRateLimited, "slow down", "2"},
		{"unavailable", &wire.Error{Code: wire.CodeUnavailable, Message: "draining", RetryAfter: 3 * time.Second}, 503, api.CodeUnavailable, "draining", "3"},
		{"malformed", wire.Errorf(wire.CodeMalformed, "bad"), 400, api.CodeMalformed, "bad", ""},
		{"too large", wire.Errorf(wire.CodeTooLarge, "big"), 413, api.CodeTooLarge, "big", ""},
		{"wrapped", fmt.Errorf("lookup: %w", wire.Errorf(wire.CodeNotFound, "gone")), 404, api.CodeNotFound, "gone", ""},
		{"not leader, none known", &wire.Error{Code: wire.CodeNotLeader}, 503, api.CodeNoLeader, "not_leader", ""},
		{"node-to-node code", wire.Errorf(wire.CodeNoHandler, "x"), 500, api.CodeInternal, "x", ""},
		{"timeout", context.DeadlineExceeded, 503, api.CodeUnavailable, "the request timed out", ""},
		{"untyped stays private", errors.New("disk /var/lib/secret failed"), 500, api.CodeInternal, "internal error", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := apitest.NewBackend()
			b.SetError("Job", tt.err)
			srv := apitest.Serve(t, b, nil)
			resp, body := newRawClient(t).do("GET", srv.URL()+"/v1/jobs/x", nil, nil)
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d (body %s)", resp.StatusCode, tt.want, body)
			}
			e := decodeErrorBody(t, body)
			if e.Code != tt.wantCode || e.Error != tt.wantMsg {
				t.Errorf("body %+v, want code %q error %q", e, tt.wantCode, tt.wantMsg)
			}
			if got := resp.Header.Get("Retry-After"); got != tt.retryAfter {
				t.Errorf("Retry-After %q, want %q", got, tt.retryAfter)
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	b := apitest.NewBackend()
	b.AddJob(api.JobStatus{JobID: "j1", Status: wire.JobRunning})
	// The node's registry: the role's series registered there appear
	// beside the API's own and the runtime's.
	reg := obs.NewRegistry()
	role := prometheus.NewGauge(prometheus.GaugeOpts{Name: "tempest_manager_term", Help: "Election term."})
	role.Set(7)
	reg.MustRegister(role)
	srv := apitest.Serve(t, b, func(c *api.ServerConfig) { c.Metrics = reg })
	c := newRawClient(t)
	c.do("GET", srv.URL()+"/v1/jobs/j1", nil, nil)
	c.do("GET", srv.URL()+"/v1/jobs/j1", nil, nil)
	c.do("GET", srv.URL()+"/v1/jobs/nope", nil, nil)
	c.do("GET", srv.URL()+"/v1/jobs", nil, map[string]string{"Authorization": ""})
	c.do("BREW", srv.URL()+"/v1/jobs", nil, nil)

	resp, body := c.do("GET", srv.URL()+"/metrics", nil, map[string]string{"Authorization": ""})
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	text := string(body)
	for _, want := range []string{
		"# TYPE tempest_api_requests_total counter\n",
		`tempest_api_requests_total{code="200",method="GET",route="/v1/jobs/{id}"} 2` + "\n",
		`tempest_api_requests_total{code="404",method="GET",route="/v1/jobs/{id}"} 1` + "\n",
		`tempest_api_requests_total{code="401",method="GET",route="/v1/jobs"} 1` + "\n",
		`tempest_api_requests_total{code="405",method="other",route="/v1/jobs"} 1` + "\n",
		"# TYPE tempest_api_request_duration_seconds histogram\n",
		`tempest_api_request_duration_seconds_count{method="GET",route="/v1/jobs/{id}"} 3` + "\n",
		"tempest_api_event_streams 0\n",
		"tempest_manager_term 7\n",
		"# TYPE go_goroutines gauge\n",
		"# TYPE process_cpu_seconds_total counter\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q:\n%s", want, text)
		}
	}
	// Every sample line is name{labels} value, or name value.
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		if f := strings.Fields(line); len(f) != 2 {
			t.Errorf("malformed sample line %q", line)
		}
	}
}

func TestStartValidates(t *testing.T) {
	srv := api.NewServer(api.ServerConfig{Listen: "127.0.0.1:0"}, apitest.NewBackend())
	err := srv.Start(context.Background())
	if err == nil {
		srv.Shutdown(context.Background())
		t.Fatal("Start with no token and no registry succeeded")
	}
	for _, field := range []string{"Token", "Registry", "MaxBodyBytes", "RateLimit"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error %q does not name %s", err, field)
		}
	}
	if srv.Addr() != "" {
		t.Errorf("Addr %q after a failed start", srv.Addr())
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown of a server never started: %v", err)
	}
}

// Every series the API exposes passes Prometheus's own linter.
func TestMetricsPassPromtool(t *testing.T) {
	b := apitest.NewBackend()
	b.AddJob(api.JobStatus{JobID: "j1", Status: wire.JobRunning})
	srv := apitest.Serve(t, b, nil)
	c := newRawClient(t)
	c.do("GET", srv.URL()+"/v1/jobs/j1", nil, nil)
	c.do("GET", srv.URL()+"/v1/jobs", nil, map[string]string{"Authorization": ""})
	_, body := c.do("GET", srv.URL()+"/metrics", nil, map[string]string{"Authorization": ""})
	obstest.Promtool(t, body)
}

// A backend that refuses a submission for one of its fields (a manager
// that finds a pipeline can never fit its datacenter) is answered like a
// bad job file: 409 with the problem at the field's line, which the CLI
// prints as file:line. Without the field, the line is lost.
func TestSubmitRefusedForAFieldGivesItsLine(t *testing.T) {
	b := apitest.NewBackend()
	srv := apitest.Serve(t, b, nil)
	c := newRawClient(t)
	b.SetError("Submit", &wire.Error{Code: wire.CodeRejected, Field: "workflows[1].duration",
		Message: `workflow "long" can never run in datacenter dc1: it needs 40 cores`})
	file := "name: big\nworkflows:\n  - {name: nap, type: sleep, duration: 1s}\n  - name: long\n    type: sleep\n\n    duration: 2s\n"
	resp, body := c.do("POST", srv.URL()+"/v1/jobs", []byte(file), map[string]string{api.FilenameHeader: "big.yaml"})
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("status %d, body %s", resp.StatusCode, body)
	}
	e := decodeErrorBody(t, body)
	if e.Code != api.CodeRejected || len(e.Problems) != 1 {
		t.Fatalf("error %+v, want one rejected problem", e)
	}
	if p := e.Problems[0]; p.Line != 7 || p.Path != "workflows[1].duration" || !strings.Contains(p.Message, "needs 40 cores") {
		t.Fatalf("problem %+v, want line 7 and the reason", p)
	}
}
