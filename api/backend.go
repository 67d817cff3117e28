// Package api is Tempest's client API: HTTP/1.1 JSON over TCP with bearer
// tokens. The server serves any Backend — the manager today, the
// gate later — and the Go client is what the tempest CLI uses.
package api

import (
	"context"

	"tempest/wire"
)

// Backend is what a role must provide for the API to serve it. Methods
// return *wire.Error for failures a client should see typed (not leader, no
// quorum, not found, rejected); anything else is a 500.
type Backend interface {
	// Submit places a parsed job. The backend assigns the job id.
	Submit(ctx context.Context, job *wire.JobSubmission) (*wire.JobAck, error)
	// Jobs lists every job the backend knows, newest first.
	Jobs(ctx context.Context) ([]JobStatus, error)
	// Job returns one job's status, or a CodeNotFound error.
	Job(ctx context.Context, id string) (*JobStatus, error)
	// Watch streams a job's status: the current one at once, then one per
	// change, closing the channel after the terminal status or when ctx ends.
	Watch(ctx context.Context, id string) (<-chan JobStatus, error)
	// Cancel stops a job everywhere.
	Cancel(ctx context.Context, id, reason string) (*wire.CancelAck, error)
	// Results returns a finished (or running) job's per-step results.
	Results(ctx context.Context, id string) (*Results, error)
	// Cluster describes every node this backend knows.
	Cluster(ctx context.Context) (*ClusterView, error)
	// Leader tells the API whether to serve locally or forward: when this
	// node is not the leader, leaderAPI is the leader's API base URL
	// ("http://host:port"), or "" if no leader is known.
	Leader() (isLeader bool, leaderAPI string)
}

// JobStatus is the JSON shape of a job, shared by `tempest status --json`,
// `submit --wait --json` and the event stream.
type JobStatus struct {
	JobID          string         `json:"job_id"`
	Name           string         `json:"name"`
	Status         wire.JobStatus `json:"status"`
	TotalCompleted int64          `json:"total_completed"`
	TotalFailed    int64          `json:"total_failed"`
	ElapsedSeconds float64        `json:"elapsed_seconds"`
	SubmittedAt    string         `json:"submitted_at,omitempty"` // RFC 3339
	Datacenter     string         `json:"datacenter,omitempty"`
	// Datacenters has a line per datacenter when a gate answers: each
	// one's status, counts and lease. Workflows are then merged across
	// datacenters (counts summed, histograms merged).
	Datacenters []DatacenterStatus `json:"datacenters,omitempty"`
	Workflows   []WorkflowStatus   `json:"workflows"`
	Error       string             `json:"error,omitempty"`
	// ThresholdsFailed: some workflow's threshold failed, or an
	// abort_on_fail threshold ended the job (ThresholdAbort). The CLI
	// exits 1 for it.
	ThresholdsFailed bool `json:"thresholds_failed"`
	// ThresholdAbort: the job is FAILED because an abort_on_fail threshold
	// failed mid-run (Error names it), not for any other reason.
	ThresholdAbort bool `json:"threshold_abort,omitempty"`
}

// DatacenterStatus is one datacenter's part of a job driven by a gate.
type DatacenterStatus struct {
	Name           string         `json:"name"`
	Status         wire.JobStatus `json:"status"`
	TotalCompleted int64          `json:"total_completed"`
	TotalFailed    int64          `json:"total_failed"`
	Rate           float64        `json:"rate"`
	Error          string         `json:"error,omitempty"`
	// LeaseHolder and FenceToken: the gate driving the job there and the
	// token its commands carry; LeaseExpiresIn is seconds until the lease
	// runs out without a report (negative once it has).
	LeaseHolder    string  `json:"lease_holder,omitempty"`
	FenceToken     uint64  `json:"fence_token,omitempty"`
	LeaseExpiresIn float64 `json:"lease_expires_in,omitempty"`
	// ReportedFenceToken is the token the datacenter's last report was
	// made under: once it equals FenceToken the datacenter holds the
	// current lease, and refuses commands under older tokens.
	ReportedFenceToken uint64 `json:"reported_fence_token,omitempty"`
}

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
	DroppedIterations int64         `json:"dropped_iterations,omitempty"`
	Attempts          int           `json:"attempts"`
	Worker            string        `json:"worker"`
	Cores             []int         `json:"cores,omitempty"`
	Steps             []StepSummary `json:"steps,omitempty"`
	Error             string        `json:"error,omitempty"`
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
}

// Results is the downloadable outcome of a job.
type Results struct {
	JobID     string           `json:"job_id"`
	Status    wire.JobStatus   `json:"status"`
	Workflows []WorkflowStatus `json:"workflows"`
}

// ClusterView is the answer to GET /v1/cluster.
type ClusterView struct {
	Nodes []NodeView `json:"nodes"`
}

// NodeView is one node as a role sees it.
type NodeView struct {
	Name           string `json:"name"`
	Role           string `json:"role"`
	DC             string `json:"dc"`
	State          string `json:"state"` // alive/dead for SWIM; HEALTHY/DEGRADED/DRAINING for workers
	IsLeader       bool   `json:"is_leader"`
	AvailableCores int    `json:"available_cores"`
	TotalCores     int    `json:"total_cores"`
	Addr           string `json:"addr,omitempty"` // QUIC
	API            string `json:"api,omitempty"`
	Term           uint64 `json:"term,omitempty"`
	// Key ids this node sends with and accepts (hex), for watching rotations.
	SendKey      string   `json:"send_key,omitempty"`
	AcceptKeys   []string `json:"accept_keys,omitempty"`
	OpenBreakers []string `json:"open_breakers,omitempty"`
	// HeartbeatAgeMs (workers, on a manager) is how long ago the manager
	// last had the worker's heartbeat, new or repeated: the age of its view.
	HeartbeatAgeMs int64 `json:"heartbeat_age_ms,omitempty"`
}
