package obs_test

import (
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"tempest/internal/obs"
	"tempest/internal/obs/obstest"
	"tempest/transport"
	"tempest/wire"
	"tempest/workflow"
)

// A live job's merged HDR histogram becomes a classic histogram whose
// buckets count exactly the samples at or below each bound.
func TestJobLatencyHistogram(t *testing.T) {
	h := workflow.NewHistogram()
	for _, d := range []time.Duration{500 * time.Microsecond, 3 * time.Millisecond, 3 * time.Millisecond, 40 * time.Millisecond, 2 * time.Second, 90 * time.Second} {
		h.Record(d)
	}
	enc, err := h.Encode()
	if err != nil {
		t.Fatal(err)
	}
	// Two shards' reports of the same step merge into one histogram.
	steps := obs.StepLatencies("get", []wire.StepStats{
		{StepName: "root", CompletedCount: 6, Histogram: enc},
		{StepName: "root", CompletedCount: 6, Histogram: enc},
	})
	if len(steps) != 1 || steps[0].Latency.Count() != 12 {
		t.Fatalf("steps %+v, want one step of 12 samples", steps)
	}
	jm := obs.NewJobMetrics()
	c := obs.NewCollector(func(ch chan<- prometheus.Metric) {
		jm.Collect(ch, []obs.JobSeries{{JobID: "j1", Completed: 12, Rate: 3.5, P99Ms: 60000, Steps: steps}})
	}, jm.Descs()...)
	want := `# HELP tempest_job_step_latency_seconds Response latency of a running job's steps (send to last body byte), merged over its shards, workers and datacenters.
# TYPE tempest_job_step_latency_seconds histogram
tempest_job_step_latency_seconds_bucket{job_id="j1",step="root",workflow="get",le="0.001"} 2
tempest_job_step_latency_seconds_bucket{job_id="j1",step="root",workflow="get",le="0.0025"} 2
tempest_job_step_latency_seconds_bucket{job_id="j1",step="root",workflow="get",le="0.005"} 6
tempest_job_step_latency_seconds_bucket{job_id="j1",step="root",workflow="get",le="0.01"} 6
tempest_job_step_latency_seconds_bucket{job_id="j1",step="root",workflow="get",le="0.025"} 6
tempest_job_step_latency_seconds_bucket{job_id="j1",step="root",workflow="get",le="0.05"} 8
tempest_job_step_latency_seconds_bucket{job_id="j1",step="root",workflow="get",le="0.1"} 8
tempest_job_step_latency_seconds_bucket{job_id="j1",step="root",workflow="get",le="0.25"} 8
tempest_job_step_latency_seconds_bucket{job_id="j1",step="root",workflow="get",le="0.5"} 8
tempest_job_step_latency_seconds_bucket{job_id="j1",step="root",workflow="get",le="1"} 8
tempest_job_step_latency_seconds_bucket{job_id="j1",step="root",workflow="get",le="2.5"} 10
tempest_job_step_latency_seconds_bucket{job_id="j1",step="root",workflow="get",le="5"} 10
tempest_job_step_latency_seconds_bucket{job_id="j1",step="root",workflow="get",le="10"} 10
tempest_job_step_latency_seconds_bucket{job_id="j1",step="root",workflow="get",le="30"} 10
tempest_job_step_latency_seconds_bucket{job_id="j1",step="root",workflow="get",le="60"} 12
tempest_job_step_latency_seconds_bucket{job_id="j1",step="root",workflow="get",le="+Inf"} 12
`
	// The sum is exact to the histogram's precision, so it is left out
	// of the comparison and checked on its own.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	got := obstest.Text(t, reg)
	var lines []string
	for _, l := range strings.Split(string(got), "\n") {
		if !strings.Contains(l, "tempest_job_step_latency_seconds") || strings.Contains(l, "_sum") || strings.Contains(l, "_count") {
			continue
		}
		if l != "" {
			lines = append(lines, l)
		}
	}
	if strings.Join(lines, "\n")+"\n" != want {
		t.Errorf("histogram:\n%s\nwant:\n%s", strings.Join(lines, "\n"), want)
	}
	// 90 s is recorded as the histogram's 60 s ceiling.
	wantSum := 2 * (0.0005 + 0.003 + 0.003 + 0.040 + 2 + 60)
	if !strings.Contains(string(got), `_count{job_id="j1",step="root",workflow="get"} 12`) {
		t.Errorf("count missing:\n%s", got)
	}
	var sum float64
	for _, l := range strings.Split(string(got), "\n") {
		if strings.HasPrefix(l, "tempest_job_step_latency_seconds_sum") {
			var err error
			if sum, err = strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64); err != nil {
				t.Fatal(err)
			}
		}
	}
	if d := sum/wantSum - 1; d > 0.001 || d < -0.001 {
		t.Errorf("sum %v, want %v within 0.1%%", sum, wantSum)
	}
	if problems, err := promtest.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}

// A step's checks merge over the reports (two shards here) and become a
// counter per check and result.
func TestJobCheckCounters(t *testing.T) {
	steps := obs.StepLatencies("get", []wire.StepStats{
		{StepName: "root", Checks: []wire.CheckStats{{Name: "ok", Passed: 9, Failed: 1}, {Name: "fast", Passed: 10}}},
		{StepName: "root", Checks: []wire.CheckStats{{Name: "ok", Passed: 5}}},
	})
	jm := obs.NewJobMetrics()
	c := obs.NewCollector(func(ch chan<- prometheus.Metric) {
		jm.Collect(ch, []obs.JobSeries{{JobID: "j1", Steps: steps}})
	}, jm.Descs()...)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	got := string(obstest.Text(t, reg))
	for _, want := range []string{
		`tempest_job_checks_total{check="ok",job_id="j1",result="pass",step="root",workflow="get"} 14`,
		`tempest_job_checks_total{check="ok",job_id="j1",result="fail",step="root",workflow="get"} 1`,
		`tempest_job_checks_total{check="fast",job_id="j1",result="pass",step="root",workflow="get"} 10`,
		`tempest_job_checks_total{check="fast",job_id="j1",result="fail",step="root",workflow="get"} 0`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %s in:\n%s", want, got)
		}
	}
	if problems, err := promtest.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}

type fakeStats struct {
	transport.Transport
	st transport.Stats
}

func (f fakeStats) Stats() transport.Stats { return f.st }

// The transport's counters keep their names, and a transport that keeps
// none (or none yet) exposes nothing rather than zeros.
func TestTransportCollector(t *testing.T) {
	var tr transport.Transport
	c := obs.NewTransportCollector(func() transport.Transport { return tr })
	if n := promtest.CollectAndCount(c); n != 0 {
		t.Fatalf("%d series with no transport", n)
	}
	tr = fakeStats{st: transport.Stats{MessagesIn: 5, AuthFailures: 2,
		Breakers: []transport.BreakerState{{Peer: "m1", Class: "vote", State: "open"}}}}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			got[f.GetName()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	for name, want := range map[string]float64{
		"tempest_transport_messages_in_total":   5,
		"tempest_transport_auth_failures_total": 2,
		"tempest_transport_breakers_not_closed": 1,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
	if problems, err := promtest.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}

// The handler asks for the token when one is set, and the registry's
// runtime series pass promtool.
func TestHandler(t *testing.T) {
	reg := obs.NewRegistry()
	srv := httptest.NewServer(obs.Handler(reg, "tok-123", true))
	defer srv.Close()
	for _, tc := range []struct {
		auth string
		want int
	}{{"", http.StatusUnauthorized}, {"Bearer nope", http.StatusUnauthorized}, {"Bearer tok-123", http.StatusOK}} {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("Authorization %q: %d, want %d", tc.auth, resp.StatusCode, tc.want)
		}
	}
	if !obs.BearerMatches(&http.Request{Header: http.Header{"Authorization": {"Bearer x"}}}, sha256.Sum256([]byte("x"))) {
		t.Error("BearerMatches refuses its token")
	}
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("Authorization", "Bearer tok-123")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), "go_goroutines ") || !strings.Contains(string(text), "process_cpu_seconds_total ") {
		t.Errorf("no runtime or process series:\n%s", text)
	}
	obstest.Promtool(t, text)
}

// leadingManager is a registry with a leading manager's series (term 2)
// whose live job series, one job jobID with 3 completed, count in built
// each time they are built.
func leadingManager(t *testing.T, jobID string) (*obs.Registry, *atomic.Int32) {
	t.Helper()
	reg := obs.NewRegistry()
	built := new(atomic.Int32)
	role := obs.Role{Name: "manager", Leads: "its datacenter",
		Transport: func() transport.Transport { return nil },
		Scrape:    func(chan<- prometheus.Metric) obs.RoleState { return obs.RoleState{Leading: true, Term: 2} },
		Live: func() []obs.JobSeries {
			built.Add(1)
			return []obs.JobSeries{{JobID: jobID, Completed: 3}}
		}}
	if err := role.Register(reg); err != nil {
		t.Fatal(err)
	}
	return reg, built
}

// A scrape that names only node families (name[]) does not build the live
// job series at all; one that names a job family, or none, does.
func TestScrapeBuildsJobSeriesOnlyWhenAsked(t *testing.T) {
	reg, built := leadingManager(t, "j1")
	h := obs.Handler(reg, "", true)
	for _, tc := range []struct {
		query     string
		built     bool
		want, not []string
	}{
		{"", true, []string{"tempest_manager_term 2", `tempest_job_completed_total{job_id="j1"} 3`, "go_goroutines "}, nil},
		{"?name[]=tempest_manager_term&name[]=go_goroutines", false,
			[]string{"tempest_manager_term 2", "go_goroutines "}, []string{"tempest_job_", "process_"}},
		{"?name[]=tempest_job_completed_total", true,
			[]string{`tempest_job_completed_total{job_id="j1"} 3`}, []string{"tempest_manager_term", "tempest_job_rate"}},
	} {
		built.Store(0)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics"+tc.query, nil))
		text := rec.Body.String()
		if rec.Code != http.StatusOK {
			t.Fatalf("%q: %d %s", tc.query, rec.Code, text)
		}
		if got := built.Load() > 0; got != tc.built {
			t.Errorf("%q: job series built %v, want %v", tc.query, got, tc.built)
		}
		for _, w := range tc.want {
			if !strings.Contains(text, w) {
				t.Errorf("%q: no %q in\n%s", tc.query, w, text)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(text, n) {
				t.Errorf("%q: %q in\n%s", tc.query, n, text)
			}
		}
	}
}

// Without jobs, a scrape sees no series labelled with a job id or workflow
// name: neither the live job part nor a node series that carries one (a
// worker's per-workflow counters), and the live job series are not built.
func TestHandlerWithoutJobsShowsNoJobOrWorkflowName(t *testing.T) {
	reg, built := leadingManager(t, "secret-job-id")
	perWorkflow := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tempest_worker_iterations_total", Help: "h"}, []string{"job_id", "workflow", "result"})
	perWorkflow.WithLabelValues("secret-job-id", "secret-workflow", "ok").Add(4)
	cores := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tempest_worker_cores", Help: "h"}, []string{"state"})
	cores.WithLabelValues("free").Set(2)
	reg.MustRegister(perWorkflow, cores)
	for _, tc := range []struct {
		jobs     bool
		contains bool
	}{{false, false}, {true, true}} {
		built.Store(0)
		rec := httptest.NewRecorder()
		obs.Handler(reg, "", tc.jobs).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		text := rec.Body.String()
		if got := strings.Contains(text, "secret-job-id") || strings.Contains(text, "secret-workflow"); got != tc.contains {
			t.Errorf("jobs %v: a job id or workflow name shown: %v, want %v\n%s", tc.jobs, got, tc.contains, text)
		}
		if !strings.Contains(text, `tempest_worker_cores{state="free"} 2`) || !strings.Contains(text, "tempest_manager_term 2") {
			t.Errorf("jobs %v: the node's own series are missing:\n%s", tc.jobs, text)
		}
		if (built.Load() > 0) != tc.jobs {
			t.Errorf("jobs %v: live job series built %v", tc.jobs, built.Load() > 0)
		}
	}
	if !obs.ServeJobSeries("tok", false) || obs.ServeJobSeries("", false) || !obs.ServeJobSeries("", true) {
		t.Error("ServeJobSeries: job series go to token holders, or to anyone only when the operator opts in")
	}
}
