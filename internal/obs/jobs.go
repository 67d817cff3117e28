package obs

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tempest/wire"
	"tempest/workflow"
)

// LatencyBuckets are the upper bounds (seconds) of the classic latency
// histograms: 1 ms to 60 s, about three per decade, fine enough for
// histogram_quantile to place a p99 within a bucket's width. The merged HDR
// histograms behind them keep the exact percentiles (tempest_job_p99_seconds).
func LatencyBuckets() []float64 {
	return []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
}

// JobSeries are a running job's live numbers, as /metrics shows them.
type JobSeries struct {
	JobID             string
	Completed, Failed int64
	Rate              float64
	P99Ms             float64
	// Steps are the job's steps with their merged latency, one per
	// (workflow, step).
	Steps []StepLatency
}

// StepLatency is one step's merged latency histogram, and its checks'
// counts.
type StepLatency struct {
	Workflow, Step string
	Latency        *workflow.Histogram
	Checks         []wire.CheckStats
}

// StepLatencies merges a workflow's step statistics (from every shard,
// datacenter or worker report given) by step name and decodes their
// histograms. Steps whose statistics do not merge are left out: a scrape
// shows what it can rather than failing.
func StepLatencies(workflowName string, stats []wire.StepStats) []StepLatency {
	merged, err := workflow.MergeStepStats(nil, stats)
	if err != nil {
		return nil
	}
	out := make([]StepLatency, 0, len(merged))
	for _, s := range merged {
		h, err := workflow.DecodeHistogram(s.Histogram)
		if err != nil {
			continue
		}
		out = append(out, StepLatency{Workflow: workflowName, Step: s.StepName, Latency: h, Checks: s.Checks})
	}
	return out
}

// MaxP99Ms is the highest p99 of steps, in milliseconds: a job's p99 gauge.
func MaxP99Ms(steps []StepLatency) float64 {
	var p99 float64
	for _, s := range steps {
		p99 = max(p99, float64(s.Latency.Percentile(99))/float64(time.Millisecond))
	}
	return p99
}

// JobMetrics declares the live job series. A role's collector sends them
// with Collect for the jobs it leads (a follower's numbers would be stale).
type JobMetrics struct {
	completed, failed, rate, p99, latency, checks *prometheus.Desc
	bounds                                        []float64
}

// NewJobMetrics declares the series.
func NewJobMetrics() *JobMetrics {
	job := []string{"job_id"}
	return &JobMetrics{
		completed: prometheus.NewDesc("tempest_job_completed_total", "Iterations completed by a running job.", job, nil),
		failed:    prometheus.NewDesc("tempest_job_failed_total", "Iterations failed by a running job.", job, nil),
		rate:      prometheus.NewDesc("tempest_job_rate", "Current iterations per second of a running job.", job, nil),
		// Seconds, as Prometheus names units: it was tempest_job_p99_ms,
		// which promtool refuses (abbreviated unit).
		p99: prometheus.NewDesc("tempest_job_p99_seconds", "Highest p99 latency of a running job's steps, exact from the merged HDR histograms.", job, nil),
		latency: prometheus.NewDesc("tempest_job_step_latency_seconds",
			"Response latency of a running job's steps (send to last body byte), merged over its shards, workers and datacenters.",
			[]string{"job_id", "workflow", "step"}, nil),
		checks: prometheus.NewDesc("tempest_job_checks_total",
			"Checks of a running job's steps by outcome (result=\"pass\" or \"fail\"), merged over its shards, workers and datacenters.",
			[]string{"job_id", "workflow", "step", "check", "result"}, nil),
		bounds: LatencyBuckets(),
	}
}

// Descs lists the declared series, for a Collector.
func (m *JobMetrics) Descs() []*prometheus.Desc {
	return []*prometheus.Desc{m.completed, m.failed, m.rate, m.p99, m.latency, m.checks}
}

// Collect sends jobs' series.
func (m *JobMetrics) Collect(ch chan<- prometheus.Metric, jobs []JobSeries) {
	for _, j := range jobs {
		Counter(ch, m.completed, float64(j.Completed), j.JobID)
		Counter(ch, m.failed, float64(j.Failed), j.JobID)
		Gauge(ch, m.rate, j.Rate, j.JobID)
		Gauge(ch, m.p99, j.P99Ms/1000, j.JobID)
		for _, s := range j.Steps {
			ch <- Histogram(m.latency, m.bounds, s.Latency, j.JobID, s.Workflow, s.Step)
			for _, c := range s.Checks {
				Counter(ch, m.checks, float64(c.Passed), j.JobID, s.Workflow, s.Step, c.Name, "pass")
				Counter(ch, m.checks, float64(c.Failed), j.JobID, s.Workflow, s.Step, c.Name, "fail")
			}
		}
	}
}

// Histogram is a classic Prometheus histogram of h with upper bounds
// bounds (seconds).
func Histogram(d *prometheus.Desc, bounds []float64, h *workflow.Histogram, labels ...string) prometheus.Metric {
	counts, sum := h.Cumulative(bounds)
	buckets := make(map[float64]uint64, len(bounds))
	for i, b := range bounds {
		buckets[b] = counts[i]
	}
	return prometheus.MustNewConstHistogram(d, uint64(h.Count()), sum, buckets, labels...)
}
