package report

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// sampleJob is a finished job with one workflow; seconds long series and
// step names chosen to need escaping.
func sampleJob(seconds int, stepNames ...string) *Job {
	wf := Workflow{Name: "checkout <b>", Type: "http", Status: "COMPLETED", Completed: 1000, Failed: 3,
		Thresholds: []Threshold{{Expr: `p99 < 200ms & "x"`, Passed: true, Actual: "153.2ms"},
			{Expr: "error_rate < 1%", Passed: false, Actual: "2.0%"}}}
	for i := range seconds {
		wf.Series = append(wf.Series, Second{At: int64(i), Completed: int64(100 + i%7), Failed: int64(i % 3),
			VUs: 10, P50Ms: 12 + float64(i%5), P99Ms: 80 + float64(i%11)})
	}
	for i, n := range stepNames {
		st := Step{Name: n, Completed: 500, Failed: 1, P50Ms: 10, P90Ms: 20, P99Ms: 40 + float64(i), MaxMs: 90}
		for j, p := range []float64{50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99} {
			st.Distribution = append(st.Distribution, Percentile{P: p, Ms: float64(10 + 10*j + i)})
		}
		wf.Steps = append(wf.Steps, st)
	}
	return &Job{ID: "j-1", Name: "shop </title><script>alert(1)</script>", Status: "COMPLETED",
		Duration: 95 * time.Second, Completed: 1000, Failed: 3, ThresholdsFailed: true,
		Workflows: []Workflow{wf}, Generated: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func render(t *testing.T, j *Job) string {
	t.Helper()
	var buf bytes.Buffer
	if err := Render(&buf, j); err != nil {
		t.Fatalf("Render: %v", err)
	}
	return buf.String()
}

func TestRender(t *testing.T) {
	tests := []struct {
		name    string
		job     *Job
		want    []string
		notWant []string
	}{
		{
			name: "with series",
			job:  sampleJob(95, "<script>", "get /cart"),
			want: []string{"<!DOCTYPE html>", "<svg", "Throughput", "Latency over time", "Latency distribution",
				"&lt;script&gt;", "get /cart", "checkout &lt;b&gt;", "1m35s", "153.2ms", "FAIL",
				"shop &lt;/title&gt;&lt;script&gt;alert(1)&lt;/script&gt;", "2026-01-02T03:04:05Z", "p99.99"},
			notWant: []string{"<script>", "checkout <b>", "No per-second series"},
		},
		{
			name:    "without series",
			job:     func() *Job { j := sampleJob(0, "<script>"); return j }(),
			want:    []string{"No per-second series", "Latency distribution", "&lt;script&gt;", "<svg"},
			notWant: []string{"<script>", "Throughput", "Latency over time"},
		},
		{
			name:    "no steps no series",
			job:     &Job{ID: "j-2", Status: "FAILED", Error: "worker lost", Workflows: []Workflow{{Name: "w"}}},
			want:    []string{"Job j-2", "No per-second series", "worker lost"},
			notWant: []string{"<svg", "<h3>Steps"},
		},
		{
			name: "no thresholds",
			job: func() *Job {
				j := sampleJob(5, "a")
				j.Workflows[0].Thresholds, j.ThresholdsFailed = nil, false
				return j
			}(),
			want:    []string{"Throughput"},
			notWant: []string{"thresholds<b", "<h3>Thresholds"},
		},
		{
			name: "pipeline",
			job: &Job{ID: "j-3", Status: "COMPLETED", Workflows: []Workflow{{Name: "signs", Type: "rainstorm",
				Stages: []Stage{{Name: "source", Tasks: 1, Records: 15564, RecordsOut: 15564},
					{Name: "count <by>", Tasks: 3, Records: 15564, RecordsOut: 412, Bad: 2, Restarts: 1}},
				Output: &Output{Header: []string{"key", "value"}, Total: 412, Complete: true,
					Rows: [][]string{{"Punched Telespar", "2040"}, {"<i>x</i>", "1"}}}}}},
			want: []string{"<h3>Stages", "<td>count &lt;by&gt;</td><td>3</td><td>15564</td><td>412</td><td>2</td><td>1</td>",
				"<h3>Output", "412 rows, the first 2 shown", "<th>key</th><th>value</th>", "<td>Punched Telespar</td><td>2040</td>",
				"&lt;i&gt;x&lt;/i&gt;"},
			notWant: []string{"not final", "No per-second series", "thresholds<b", "<i>x</i>"},
		},
		{
			name: "single second",
			job:  sampleJob(1, "a"),
			want: []string{"Throughput", "<polyline"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := render(t, tc.job)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("report lacks %q", w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(out, w) {
					t.Errorf("report contains %q", w)
				}
			}
			if strings.Contains(out, "NaN") || strings.Contains(out, "Inf") {
				t.Error("report has a NaN or Inf coordinate")
			}
			for _, ext := range []string{"src=", "href=", "@import", "url("} {
				if strings.Contains(out, ext) {
					t.Errorf("report refers to an external asset (%q)", ext)
				}
			}
		})
	}
}

// TestRenderSizeBounded: an hour of seconds and many steps stay well under
// a megabyte, because lines are bucketed to maxPoints.
func TestRenderSizeBounded(t *testing.T) {
	names := make([]string, 20)
	for i := range names {
		names[i] = fmt.Sprintf("step-%02d", i)
	}
	small := len(render(t, sampleJob(maxPoints, names...)))
	big := len(render(t, sampleJob(3600, names...)))
	if big > 512<<10 {
		t.Fatalf("report of an hour is %d bytes, want < 512 KiB", big)
	}
	if big > small*11/10 {
		t.Fatalf("report of an hour is %d bytes, of %d s %d: bucketing is not bounding it", big, maxPoints, small)
	}
}

// TestPartialLastSecondLeftOut: a run of 9.2 s has a tenth second with a
// fifth of a second's requests; drawn, it would plunge the throughput line.
func TestPartialLastSecondLeftOut(t *testing.T) {
	j := sampleJob(10, "a")
	j.Workflows[0].Series[9].Completed = 20
	for _, tc := range []struct {
		elapsed float64
		points  int
	}{{9.2, 9}, {10, 10}, {0, 10}, {10.4, 10}} {
		j.Workflows[0].ElapsedSeconds = tc.elapsed
		out := render(t, j)
		i := strings.Index(out, `<polyline`)
		if i < 0 {
			t.Fatal("no line drawn")
		}
		pts := out[i:]
		pts = pts[strings.Index(pts, `points="`)+len(`points="`):]
		pts = pts[:strings.IndexByte(pts, '"')]
		if got := len(strings.Fields(pts)); got != tc.points {
			t.Errorf("elapsed %.1f s: throughput has %d points, want %d", tc.elapsed, got, tc.points)
		}
	}
}

func TestBucket(t *testing.T) {
	series := make([]Second, 1000)
	for i := range series {
		series[i] = Second{At: int64(i), Completed: 10, P50Ms: 5, P99Ms: float64(i)}
	}
	got := bucket(series)
	if len(got) > maxPoints {
		t.Fatalf("bucket gave %d points, want <= %d", len(got), maxPoints)
	}
	for _, b := range got {
		if b.Completed != 10 || b.P50Ms != 5 {
			t.Fatalf("bucket %+v: want per-second average 10 completed, p50 5", b)
		}
	}
	if last := got[len(got)-1]; last.P99Ms != 999 {
		t.Fatalf("last bucket p99 = %v, want the max 999", last.P99Ms)
	}
	if short := bucket(series[:10]); len(short) != 10 {
		t.Fatalf("short series bucketed to %d points, want 10 untouched", len(short))
	}
}

func TestNiceMax(t *testing.T) {
	tests := []struct{ in, want float64 }{
		{0, 1}, {-3, 1}, {0.7, 1}, {1, 1}, {1.2, 2}, {2.2, 2.5}, {3, 5}, {7, 10}, {130, 200}, {99.99, 100},
	}
	for _, tc := range tests {
		if got := niceMax(tc.in); got != tc.want {
			t.Errorf("niceMax(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
