// Package api is Tempest's client API: HTTP/1.1 JSON over TCP with bearer
// tokens. The server serves any Backend (a manager or a gate), and the Go
// client is what the tempest CLI uses. What a job is and how its parts
// merge is package jobs; api is the HTTP layer over it.
package api

import (
	"context"
	"fmt"

	"tempest/jobs"
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

// Elected is what a Backend may also tell the API: whether an election has
// named a leader, though Leader knows no API address for it yet (a leader
// announces its address when its term begins and every second after). A
// follower that knows of a leader holds a request up to LeaderWait for its
// address; one that knows of none answers no_leader at once, since an
// election under a partition can take minutes.
type Elected interface {
	LeaderElected() bool
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
	// OverallRate, CompletedDatacenters and FailedDatacenters sum up
	// Datacenters when a gate answers: the job's rate now (the sum of the
	// datacenters' rates) and how many of its datacenters have completed
	// and failed (cancelled or timed out count as failed).
	OverallRate          float64          `json:"overall_rate,omitempty"`
	CompletedDatacenters int              `json:"completed_datacenters,omitempty"`
	FailedDatacenters    int              `json:"failed_datacenters,omitempty"`
	Workflows            []WorkflowStatus `json:"workflows"`
	Error                string           `json:"error,omitempty"`
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

// The workflow status shapes are the job model's (package jobs), which
// merges them; the API serves them as they are.
type (
	ThresholdResult = jobs.ThresholdResult
	WorkflowStatus  = jobs.WorkflowStatus
	SeriesPoint     = jobs.SeriesPoint
	PercentilePoint = jobs.PercentilePoint
	StepSummary     = jobs.StepSummary
	CheckSummary    = jobs.CheckSummary
	LostAttempt     = jobs.LostAttempt
)

// DistributionPercentiles are the points of StepSummary.Distribution.
func DistributionPercentiles() []float64 { return jobs.DistributionPercentiles() }

// Results is the downloadable outcome of a job.
type Results struct {
	JobID     string           `json:"job_id"`
	Status    wire.JobStatus   `json:"status"`
	Workflows []WorkflowStatus `json:"workflows"`
}

// ClusterView is the answer to GET /v1/cluster.
type ClusterView struct {
	Nodes []NodeView `json:"nodes"`
	// Unreachable names what the answering node could not describe (a
	// gate that could not ask a datacenter's leader for its workers), so a
	// partial view never passes for a whole one.
	Unreachable []string `json:"unreachable,omitempty"`
	// Groups are the election groups the answering node belongs to, with
	// their configured members (GroupView).
	Groups []GroupView `json:"groups,omitempty"`
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
	// Load (managers and gates) is the node's load level, NORMAL to CRITICAL, and
	// LoadReason what put it there (the answering node's own only).
	Load       string `json:"load,omitempty"`
	LoadReason string `json:"load_reason,omitempty"`
}

// WorkerNode is a worker as its datacenter's manager leader describes it.
func WorkerNode(dc string, n wire.DatacenterNode) NodeView {
	v := NodeView{Name: n.ID, Role: string(wire.RoleWorker), DC: dc, State: n.State, AvailableCores: n.AvailableCores,
		TotalCores: n.TotalCores, Addr: n.Addr, HeartbeatAgeMs: n.HeartbeatAgeMs}
	v.SendKey, v.AcceptKeys = KeyIDs(n.SendKeyID, n.AcceptKeyIDs)
	return v
}

// KeyIDs formats key ids as `tempest cluster` shows them, in hex. A zero
// send id means no heartbeat has said yet (or the node predates key ids),
// shown as unknown rather than as a key.
func KeyIDs(send uint32, accept []uint32) (string, []string) {
	if send == 0 {
		return "", nil
	}
	out := make([]string, 0, len(accept))
	for _, id := range accept {
		out = append(out, fmt.Sprintf("%08x", id))
	}
	return fmt.Sprintf("%08x", send), out
}
