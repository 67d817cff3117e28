package jobs

import "tempest/wire"

// The JSON shapes of a workflow's status and results. api re-exports them:
// they are what the HTTP API serves, built here because both roles merge
// them the same way.

// ThresholdResult is one threshold's verdict on a workflow's merged results.
type ThresholdResult struct {
	Expr        string `json:"expr"`
	Step        string `json:"step,omitempty"`
	Passed      bool   `json:"passed"`
	Actual      string `json:"actual"` // "153.2ms", "0.5%", "1204.1/s", or "no data"
	AbortOnFail bool   `json:"abort_on_fail,omitempty"`
}

// WorkflowStatus is one workflow within a JobStatus.
type WorkflowStatus struct {
	Name           string              `json:"name"`
	WorkflowID     string              `json:"workflow_id"`
	Type           string              `json:"type"`
	Status         wire.WorkflowStatus `json:"status"`
	CompletedCount int64               `json:"completed_count"`
	FailedCount    int64               `json:"failed_count"`
	// DroppedIterations counts open-model iterations that never ran
	// because every VU was busy when they fell due.
	DroppedIterations int64 `json:"dropped_iterations,omitempty"`
	Attempts          int   `json:"attempts"`
	// LostAttempts are earlier attempts of a load workflow that were lost
	// (their worker died, or their dispatch was fenced): what each had
	// reported is counted in this status, and the attempt that followed
	// ran only what was left.
	LostAttempts []LostAttempt `json:"lost_attempts,omitempty"`
	Worker       string        `json:"worker"`
	Cores        []int         `json:"cores,omitempty"`
	Steps        []StepSummary `json:"steps,omitempty"`
	Error        string        `json:"error,omitempty"`
	// Waiting says why some of a running workflow's parts (a pipeline's
	// tasks, shards) are not placed, e.g. "task count/2 waiting: no free
	// core"; like a QUEUED job's status, but for part of a workflow.
	Waiting string `json:"waiting,omitempty"`
	// ElapsedSeconds is the run's time on its worker, as last reported.
	ElapsedSeconds float64 `json:"elapsed_seconds,omitempty"`
	// PlannedSeconds is how long the run is meant to last (its duration
	// or stages); zero when that depends on the target (iterations).
	PlannedSeconds float64 `json:"planned_seconds,omitempty"`
	// Recent is the newest complete second of a running workflow, for live
	// displays: throughput and p50/p99 now rather than since the start.
	Recent *SeriesPoint `json:"recent,omitempty"`
	// Thresholds are evaluated when the workflow ends; empty before.
	Thresholds []ThresholdResult `json:"thresholds,omitempty"`
	// Series is the run's per-second points, for charts. Only results
	// carry it (a status stays small), and only once the workflow's final
	// progress arrived: at most wire.MaxSeriesEntries, the newest.
	Series []SeriesPoint `json:"series,omitempty"`
}

// LostAttempt is one lost attempt of a workflow and the counts of it that
// its workflow's status includes.
type LostAttempt struct {
	Attempt int `json:"attempt"`
	// Worker is the worker it ran on ("dc1/" before it through a gate).
	Worker         string  `json:"worker"`
	Reason         string  `json:"reason,omitempty"`
	CompletedCount int64   `json:"completed_count"`
	FailedCount    int64   `json:"failed_count"`
	Iterations     int64   `json:"iterations,omitempty"`
	ElapsedSeconds float64 `json:"elapsed_seconds,omitempty"`
}

// LostAttempts converts a workflow's lost attempts for its status, their
// workers prefixed with label ("dc1/").
func LostAttempts(label string, lost []wire.LostAttempt) []LostAttempt {
	out := make([]LostAttempt, 0, len(lost))
	for _, la := range lost {
		out = append(out, LostAttempt{Attempt: la.Attempt, Worker: label + la.Worker, Reason: la.Reason,
			CompletedCount: la.CompletedCount, FailedCount: la.FailedCount, Iterations: la.Iterations,
			ElapsedSeconds: la.Elapsed.Seconds()})
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// SeriesPoint is one second of a workflow's run, covering [Second,
// Second+1) from its start. Latencies are milliseconds, from 2-digit
// histograms: good for drawing, not for thresholds.
type SeriesPoint struct {
	Second    int64   `json:"second"`
	Completed int64   `json:"completed"`
	Failed    int64   `json:"failed"`
	Dropped   int64   `json:"dropped,omitempty"`
	VUs       int     `json:"vus,omitempty"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
}

// PercentilePoint is one point of a latency distribution curve.
type PercentilePoint struct {
	Percentile float64 `json:"percentile"` // 0..100, e.g. 99.9
	Ms         float64 `json:"ms"`
}

// DistributionPercentiles are the points of StepSummary.Distribution.
func DistributionPercentiles() []float64 {
	return []float64{50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99}
}

// StepSummary is one step's counts and latency percentiles (milliseconds,
// from the merged HDR histogram).
type StepSummary struct {
	Name      string  `json:"name"`
	Completed int64   `json:"completed"`
	Failed    int64   `json:"failed"`
	P50Ms     float64 `json:"p50_ms"`
	P90Ms     float64 `json:"p90_ms"`
	P95Ms     float64 `json:"p95_ms"`
	P99Ms     float64 `json:"p99_ms"`
	P999Ms    float64 `json:"p999_ms"` // 99.9th
	MaxMs     float64 `json:"max_ms"`
	// Corrected percentiles (open model): latency from each iteration's
	// intended start, so a slow target cannot hide behind the queue.
	CorrectedP50Ms float64 `json:"corrected_p50_ms,omitempty"`
	CorrectedP99Ms float64 `json:"corrected_p99_ms,omitempty"`
	// Errors counts failures by class (status, timeout, connect, body,
	// transport, cancelled); Statuses counts responses by HTTP status
	// code; BytesReceived and BytesSent sum response and request bodies.
	Errors        map[string]int64 `json:"errors,omitempty"`
	Statuses      map[string]int64 `json:"statuses,omitempty"`
	BytesReceived int64            `json:"bytes_received,omitempty"`
	BytesSent     int64            `json:"bytes_sent,omitempty"`
	// Distribution is the latency at each of DistributionPercentiles()
	// from the merged histogram; only results carry it.
	Distribution []PercentilePoint `json:"distribution,omitempty"`
	// Checks counts the step's checks (non-fatal assertions on its
	// responses), merged over shards, workers and datacenters, in the
	// step's order.
	Checks []CheckSummary `json:"checks,omitempty"`
}

// CheckSummary counts one check of a step.
type CheckSummary struct {
	Name   string `json:"name"`
	Passed int64  `json:"passed"`
	Failed int64  `json:"failed"`
}
