package api_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"tempest/api"
	"tempest/api/apitest"
	"tempest/wire"
)

// htmlJob is a finished job whose names need escaping, with a series and
// a latency distribution as the manager's Results fills them.
func htmlJob(series int) api.JobStatus {
	ws := api.WorkflowStatus{Name: "load <b>", WorkflowID: "w1", Type: "http", Status: wire.WorkflowCompleted,
		CompletedCount: 900, FailedCount: 2,
		Thresholds: []api.ThresholdResult{{Expr: "p99 < 1ms", Passed: false, Actual: "3.2ms"}},
		Steps: []api.StepSummary{{Name: "<script>", Completed: 900, Failed: 2, P50Ms: 1, P90Ms: 2, P99Ms: 3.2, MaxMs: 9,
			Distribution: []api.PercentilePoint{{Percentile: 50, Ms: 1}, {Percentile: 99, Ms: 3.2}, {Percentile: 99.99, Ms: 8}}}}}
	for i := range series {
		ws.Series = append(ws.Series, api.SeriesPoint{Second: int64(i), Completed: 30, Failed: int64(i % 2), P50Ms: 1, P99Ms: 3})
	}
	return api.JobStatus{JobID: "j1", Name: "nightly", Status: wire.JobCompleted, TotalCompleted: 900, TotalFailed: 2,
		ElapsedSeconds: 30, ThresholdsFailed: true, Workflows: []api.WorkflowStatus{ws}}
}

func TestResultsHTML(t *testing.T) {
	tests := []struct {
		name    string
		job     api.JobStatus
		jobErr  error // what Job returns; the report must still render
		want    []string
		notWant []string
	}{
		{name: "with series", job: htmlJob(30),
			want:    []string{"<svg", "Throughput", "Latency distribution", "&lt;script&gt;", "load &lt;b&gt;", "nightly", "30s", "3.2ms"},
			notWant: []string{"<script>", "No per-second series"}},
		{name: "without series", job: htmlJob(0),
			want:    []string{"No per-second series", "&lt;script&gt;"},
			notWant: []string{"<script>", "Throughput"}},
		{name: "status unavailable", job: htmlJob(5), jobErr: errors.New("boom"),
			want: []string{"Job j1", "Throughput"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := apitest.NewBackend()
			b.AddJob(tc.job)
			b.SetError("Job", tc.jobErr)
			srv := apitest.Serve(t, b, nil)
			resp, body := newRawClient(t).do("GET", srv.URL()+"/v1/jobs/j1/results?format=html", nil, nil)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
				t.Errorf("Content-Type %q", ct)
			}
			if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
				t.Errorf("Content-Security-Policy %q", csp)
			}
			page := string(body)
			for _, w := range tc.want {
				if !strings.Contains(page, w) {
					t.Errorf("report lacks %q", w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(page, w) {
					t.Errorf("report contains %q", w)
				}
			}
		})
	}
}

// TestResultsSeriesJSON: the JSON results carry the series, and the client
// downloads the HTML report verbatim.
func TestResultsSeriesJSON(t *testing.T) {
	b := apitest.NewBackend()
	b.AddJob(htmlJob(3))
	srv := apitest.Serve(t, b, nil)
	c := newClient(t, srv.URL())
	ctx := t.Context()
	raw, err := c.Results(ctx, "j1", "json")
	if err != nil {
		t.Fatal(err)
	}
	var res api.Results
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if got := res.Workflows[0].Series; len(got) != 3 || got[2].Second != 2 || got[2].Completed != 30 {
		t.Fatalf("series %+v, want 3 points", got)
	}
	if !strings.Contains(string(raw), `"series":[{"second":0,`) {
		t.Fatalf("JSON lacks the series field: %s", raw)
	}
	page, err := c.Results(ctx, "j1", "html")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(page), "<!DOCTYPE html>") {
		t.Fatalf("html results start %q", page[:min(len(page), 40)])
	}
	if _, err := c.Results(ctx, "j1", "pdf"); err == nil {
		t.Fatal("Results accepted format pdf")
	}
}

func TestReportJob(t *testing.T) {
	st := htmlJob(2)
	res := &api.Results{JobID: "j1", Status: st.Status, Workflows: st.Workflows}
	now := time.Unix(100, 0)
	j := api.ReportJob(res, &st, now)
	if j.Name != "nightly" || j.Duration != 30*time.Second || !j.ThresholdsFailed || j.Completed != 900 || j.Failed != 2 {
		t.Fatalf("job %+v", j)
	}
	if len(j.Workflows) != 1 || len(j.Workflows[0].Series) != 2 || len(j.Workflows[0].Steps[0].Distribution) != 3 {
		t.Fatalf("workflow %+v", j.Workflows)
	}
	// Without a status the header comes from the results alone, and a
	// failed threshold still shows.
	j = api.ReportJob(res, nil, now)
	if j.Name != "" || j.Duration != 0 || !j.ThresholdsFailed || !j.Generated.Equal(now) {
		t.Fatalf("job without status %+v", j)
	}
}
