package wire

import (
	"fmt"
	"time"
)

// Enumerations carried as strings so logs and JSON stay readable.
type (
	NodeRole       string
	JobStatus      string
	WorkflowStatus string
	WorkerState    string
)

const (
	RoleGate    NodeRole = "gate"
	RoleManager NodeRole = "manager"
	RoleWorker  NodeRole = "worker"

	JobSubmitted   JobStatus = "SUBMITTED"
	JobQueued      JobStatus = "QUEUED"
	JobDispatching JobStatus = "DISPATCHING"
	JobRunning     JobStatus = "RUNNING"
	JobCompleting  JobStatus = "COMPLETING" // workflows done, the end being stored
	JobCancelling  JobStatus = "CANCELLING" // cancelled, workers not yet confirmed stopped
	JobCompleted   JobStatus = "COMPLETED"
	JobFailed      JobStatus = "FAILED"
	JobCancelled   JobStatus = "CANCELLED"
	JobTimeout     JobStatus = "TIMEOUT"

	WorkflowPending   WorkflowStatus = "PENDING"
	WorkflowAssigned  WorkflowStatus = "ASSIGNED"
	WorkflowRunning   WorkflowStatus = "RUNNING"
	WorkflowCompleted WorkflowStatus = "COMPLETED"
	WorkflowFailed    WorkflowStatus = "FAILED"
	WorkflowCancelled WorkflowStatus = "CANCELLED"

	WorkerHealthy  WorkerState = "HEALTHY"
	WorkerDegraded WorkerState = "DEGRADED"
	WorkerDraining WorkerState = "DRAINING"
	WorkerOffline  WorkerState = "OFFLINE"
)

// Terminal reports whether a job in status s will never change again.
func (s JobStatus) Terminal() bool {
	switch s {
	case JobCompleted, JobFailed, JobCancelled, JobTimeout:
		return true
	}
	return false
}

// Terminal reports whether a workflow in status s will never change again.
func (s WorkflowStatus) Terminal() bool {
	switch s {
	case WorkflowCompleted, WorkflowFailed, WorkflowCancelled:
		return true
	}
	return false
}

// ---- Diagnostics -----------------------------------------------------------

// Ping asks a peer to echo Payload back; used by benchmarks and health checks.
type Ping struct {
	Seq     uint64 `cbor:"1,keyasint"`
	Payload []byte `cbor:"2,keyasint,omitempty"`
}

// Pong answers a Ping.
type Pong struct {
	Seq     uint64 `cbor:"1,keyasint"`
	Payload []byte `cbor:"2,keyasint,omitempty"`
}

func (*Ping) Type() MsgType { return TypePing }
func (*Pong) Type() MsgType { return TypePong }

// ---- Job lifecycle -------------------------------------------------------------

// WorkflowSpec describes one workflow of a job. Params holds the
// type-specific parameters (CBOR) that the workflow type's registry decodes.
type WorkflowSpec struct {
	Name    string        `cbor:"1,keyasint"`
	Type    string        `cbor:"2,keyasint"`
	Cores   int           `cbor:"3,keyasint"`
	Timeout time.Duration `cbor:"4,keyasint,omitempty"`
	Params  []byte        `cbor:"5,keyasint,omitempty"`
	// Thresholds are pass/fail criteria on the workflow's merged results
	// (workflow.ParseThreshold reads Expr). Common to every type, so the
	// manager evaluates them without knowing the type.
	Thresholds []Threshold `cbor:"6,keyasint,omitempty"`
	// Planned is how long the run is meant to last (a duration or the sum
	// of a ramp's stages), zero when unknown (a number of iterations). The
	// job-file parser sets it, so that a manager, which never decodes
	// params, can tell a watcher what remains. Informational only.
	Planned time.Duration `cbor:"7,keyasint,omitempty"`
	// Shard and Shards: the job file asked for this workflow's load to be
	// split over Shards workers (shards: N), and this spec is shard Shard
	// (1-based), with its part of the VUs and rate in Params. Every shard
	// carries the workflow's Name; statuses and results merge them back
	// into one workflow. Zero: not split.
	Shard  int `cbor:"8,keyasint,omitempty"`
	Shards int `cbor:"9,keyasint,omitempty"`
}

// Threshold is one pass/fail criterion of a workflow, as written in the job
// file ("p(99) < 250ms", "error_rate < 1%", "rps > 1000").
type Threshold struct {
	Expr string `cbor:"1,keyasint"`
	// Step limits the threshold to one step; empty means all steps merged.
	Step string `cbor:"2,keyasint,omitempty"`
	// AbortOnFail ends the job as soon as the threshold fails mid-run.
	AbortOnFail bool `cbor:"3,keyasint,omitempty"`
}

// ThresholdResult is one threshold's verdict on a workflow's results.
type ThresholdResult struct {
	Expr   string `cbor:"1,keyasint"`
	Step   string `cbor:"2,keyasint,omitempty"`
	Passed bool   `cbor:"3,keyasint,omitempty"`
	// Actual is the measured value in the expression's unit ("153.2ms",
	// "0.52%", "1204.1/s"), or "no data" when nothing was measured.
	Actual      string `cbor:"4,keyasint,omitempty"`
	AbortOnFail bool   `cbor:"5,keyasint,omitempty"`
}

// JobSubmission carries a job from a client or gate to a manager (or gate).
type JobSubmission struct {
	JobID           string         `cbor:"1,keyasint"`
	Name            string         `cbor:"2,keyasint,omitempty"`
	Workflows       []WorkflowSpec `cbor:"3,keyasint"`
	Timeout         time.Duration  `cbor:"4,keyasint,omitempty"`
	DatacenterCount int            `cbor:"5,keyasint,omitempty"`
	Datacenters     []string       `cbor:"6,keyasint,omitempty"`
	// FenceToken is the gate's lease token for this datacenter (0 when a
	// client submits straight to a manager).
	FenceToken uint64 `cbor:"7,keyasint,omitempty"`
	// Origin is the gate holding the lease. The manager that takes the job
	// sets it from the submission's authenticated sender, whatever the
	// body says; it travels in the manager's own records and replication.
	Origin      string `cbor:"8,keyasint,omitempty"`
	SubmittedAt int64  `cbor:"9,keyasint,omitempty"` // unix nanoseconds
	// IntakeLeader and IntakeTerm: the manager leader that accepted the job
	// and its term, set by that leader before it replicates the job. A
	// successor uses them to tell a job its intake leader never stored on a
	// majority (found on that leader alone) from one it did.
	IntakeLeader string `cbor:"24,keyasint,omitempty"`
	IntakeTerm   uint64 `cbor:"25,keyasint,omitempty"`
	// LeaseTTL, on a gate's submission, is how long the datacenter's lease
	// lasts without an acknowledged report: a manager cut off from the
	// gates that long stops the job, since the gate has failed it there.
	LeaseTTL time.Duration `cbor:"30,keyasint,omitempty"`
}

// JobAck answers a JobSubmission.
type JobAck struct {
	JobID          string   `cbor:"1,keyasint"`
	Accepted       bool     `cbor:"2,keyasint"`
	Error          string   `cbor:"3,keyasint,omitempty"`
	QueuedPosition int      `cbor:"4,keyasint,omitempty"`
	Datacenters    []string `cbor:"5,keyasint,omitempty"`
}

// CancelJob asks for a job to stop everywhere.
type CancelJob struct {
	JobID      string `cbor:"1,keyasint"`
	Reason     string `cbor:"2,keyasint,omitempty"`
	FenceToken uint64 `cbor:"3,keyasint,omitempty"`
	// WorkflowID narrows the cancel to one workflow (manager to worker).
	WorkflowID string `cbor:"4,keyasint,omitempty"`
}

// CancelAck answers a CancelJob.
type CancelAck struct {
	JobID              string `cbor:"1,keyasint"`
	Cancelled          bool   `cbor:"2,keyasint"`
	WorkflowsCancelled int    `cbor:"3,keyasint,omitempty"`
	Error              string `cbor:"4,keyasint,omitempty"`
}

func (*JobSubmission) Type() MsgType { return TypeJobSubmission }
func (*JobAck) Type() MsgType        { return TypeJobAck }
func (*CancelJob) Type() MsgType     { return TypeCancelJob }
func (*CancelAck) Type() MsgType     { return TypeCancelAck }

// ---- Workflow dispatch -----------------------------------------------------------

// WorkflowDispatch hands one workflow to a worker. The manager keeps the
// encoded bytes so a retry re-sends exactly what was first sent.
type WorkflowDispatch struct {
	JobID      string        `cbor:"1,keyasint"`
	WorkflowID string        `cbor:"2,keyasint"`
	Workflow   WorkflowSpec  `cbor:"3,keyasint"`
	Context    []byte        `cbor:"4,keyasint,omitempty"`
	Cores      int           `cbor:"5,keyasint"`
	Timeout    time.Duration `cbor:"6,keyasint,omitempty"`
	FenceToken uint64        `cbor:"7,keyasint"`
	Attempt    int           `cbor:"8,keyasint,omitempty"`
	// Worker names the worker this dispatch is for; a worker refuses one
	// addressed to another (an insider replaying it elsewhere).
	Worker string `cbor:"18,keyasint,omitempty"`
	// Slot, when set, names the slot the workflow shares its cores in
	// (a RainStorm pipeline's tasks, docs/rainstorm.md "Placement"): the
	// first dispatch of a slot on a worker allocates Cores for it, later
	// ones join that allocation, and it is freed when the last one ends.
	Slot string `cbor:"19,keyasint,omitempty"`
	// Placement is the placing leader's proof that it placed this attempt
	// on Worker; the worker hands it back in the attempt's progress.
	Placement *PlacementProof `cbor:"20,keyasint,omitempty"`
}

// PlacementProof is a manager's word, under the manager-tier key, that it
// placed attempt (job, workflow, fence token) on one worker. A later
// leader that has no record of the attempt (its commit reached no manager
// it synced with) takes a report of it only with a proof that verifies: a
// worker key cannot make one, so it cannot claim a workflow under a token
// of an older term it invented.
type PlacementProof struct {
	KeyID uint32 `cbor:"1,keyasint"`
	MAC   []byte `cbor:"2,keyasint"`
}

// WorkflowDispatchAck answers a WorkflowDispatch.
type WorkflowDispatchAck struct {
	WorkflowID     string `cbor:"1,keyasint"`
	Accepted       bool   `cbor:"2,keyasint"`
	Error          string `cbor:"3,keyasint,omitempty"`
	CoresAssigned  []int  `cbor:"4,keyasint,omitempty"`
	AvailableCores int    `cbor:"5,keyasint"`
}

func (*WorkflowDispatch) Type() MsgType    { return TypeWorkflowDispatch }
func (*WorkflowDispatchAck) Type() MsgType { return TypeWorkflowDispatchAck }

// ---- Progress and status ------------------------------------------------------------

// StepStats counts one step of a workflow.
type StepStats struct {
	StepName       string `cbor:"1,keyasint"`
	CompletedCount int64  `cbor:"2,keyasint,omitempty"`
	FailedCount    int64  `cbor:"3,keyasint,omitempty"`
	TotalCount     int64  `cbor:"4,keyasint,omitempty"`
	// Histogram is an encoded latency histogram (delta or cumulative as the
	// sender documents); merged, never averaged.
	Histogram []byte `cbor:"5,keyasint,omitempty"`
	// CorrectedHistogram is the open model's latency measured from each
	// iteration's intended start (coordinated-omission corrected).
	CorrectedHistogram []byte `cbor:"6,keyasint,omitempty"`
	// Errors counts failures by class (status, timeout, connect, body,
	// transport, cancelled); Statuses counts responses by HTTP status
	// code, whatever their verdict. BytesReceived and BytesSent sum
	// response and request bodies. All cumulative, like the histograms.
	Errors        map[string]int64 `cbor:"7,keyasint,omitempty"`
	Statuses      map[int]int64    `cbor:"8,keyasint,omitempty"`
	BytesReceived int64            `cbor:"9,keyasint,omitempty"`
	BytesSent     int64            `cbor:"10,keyasint,omitempty"`
	// Checks counts the step's checks (non-fatal assertions on its
	// responses) by name, in the step's order; cumulative. Absent from
	// peers that predate checks, which reads as none.
	Checks []CheckStats `cbor:"11,keyasint,omitempty"`
}

// CheckStats counts one check of a step.
type CheckStats struct {
	Name   string `cbor:"1,keyasint"`
	Passed int64  `cbor:"2,keyasint,omitempty"`
	Failed int64  `cbor:"3,keyasint,omitempty"`
}

// WorkflowProgress reports a workflow's counters from its worker.
type WorkflowProgress struct {
	JobID          string         `cbor:"1,keyasint"`
	WorkflowID     string         `cbor:"2,keyasint"`
	WorkflowName   string         `cbor:"3,keyasint,omitempty"`
	Status         WorkflowStatus `cbor:"4,keyasint"`
	CompletedCount int64          `cbor:"5,keyasint,omitempty"`
	FailedCount    int64          `cbor:"6,keyasint,omitempty"`
	RatePerSecond  float64        `cbor:"7,keyasint,omitempty"`
	Elapsed        time.Duration  `cbor:"8,keyasint,omitempty"`
	StepStats      []StepStats    `cbor:"9,keyasint,omitempty"`
	Timestamp      int64          `cbor:"10,keyasint,omitempty"` // unix nanoseconds
	AssignedCores  []int          `cbor:"11,keyasint,omitempty"`
	WorkerID       string         `cbor:"12,keyasint,omitempty"`
	FenceToken     uint64         `cbor:"13,keyasint,omitempty"`
	Error          string         `cbor:"14,keyasint,omitempty"`
	Final          bool           `cbor:"15,keyasint,omitempty"`
	// DroppedIterations counts open-model iterations that fell due while
	// every VU was busy and so never ran.
	DroppedIterations int64 `cbor:"16,keyasint,omitempty"`
	// Series is the run's per-second points, for charts. Mid-run a worker
	// sends only the newest SeriesLiveWindow seconds (enough for a live
	// view, and the message stays small); the final progress carries the
	// whole series, at most MaxSeriesEntries. Receivers clip with
	// ClipSeries.
	Series []SecondStats `cbor:"17,keyasint,omitempty"`
	// Permanent, on a final FAILED progress, says another attempt would
	// fail the same way (an http workflow's setup step the target
	// refused): the manager fails the workflow instead of retrying it on
	// another worker. Absent from older workers: every failure retried.
	Permanent bool `cbor:"18,keyasint,omitempty"`
	// Placement is the dispatch's PlacementProof, handed back so a leader
	// that never recorded the attempt can tell it was placed.
	Placement *PlacementProof `cbor:"19,keyasint,omitempty"`
	// Iterations counts the passes over the workflow's steps that ran to
	// their end (a load workflow's; zero for others), read before the
	// counts so it never names an iteration whose requests they lack. A
	// retry runs what is left of an iterations budget from it.
	Iterations int64 `cbor:"20,keyasint,omitempty"`
	// Offered, from a paced RainStorm source, is the records its schedule
	// has made due so far, read or not: a source held back by its window
	// reads only what the pipeline takes, so its read count hides the load
	// it is offered; the leader's autoscaling counts the backlog from this.
	Offered int64 `cbor:"21,keyasint,omitempty"`
	// Attempts, set only in a leader's status replication to its peers
	// (which take it) and in its reports to gates (which show it), is the
	// leader's count of the workflow's attempts.
	Attempts int `cbor:"30,keyasint,omitempty"`
	// Waiting, set only in a manager's reports to gates, says why a PENDING
	// workflow is not placed (e.g. "no free core (needs 2)"), so a job
	// followed through a gate shows what one followed in its datacenter does.
	Waiting string `cbor:"31,keyasint,omitempty"`
	// Lost, set only by a manager (a worker's is dropped), lists the
	// earlier attempts of a load workflow that were lost (their worker
	// died, or their dispatch's outcome was unknown and they were fenced)
	// and whose last reported counts are folded into this progress's
	// counts and step statistics. In reports to gates their StepStats are
	// left out (already folded in); peers get them, so a new leader can
	// fold them into the next attempt's reports.
	Lost []LostAttempt `cbor:"32,keyasint,omitempty"`
	// Requeues, set only in a leader's status replication to its peers, is
	// how many of Attempts were taken back through no fault of the
	// workflow, so a successor budgets retries as this leader did.
	Requeues int `cbor:"33,keyasint,omitempty"`
}

// LostAttempt is what one lost attempt of a workflow reported before it
// was given up on: the requests the target received from it, which the
// workflow's results keep rather than run again.
type LostAttempt struct {
	Attempt    int    `cbor:"1,keyasint"`
	Worker     string `cbor:"2,keyasint,omitempty"`
	FenceToken uint64 `cbor:"3,keyasint,omitempty"`
	// Reason is why the manager gave up on it ("worker dc1-w2 is dead").
	Reason string `cbor:"4,keyasint,omitempty"`
	// At is when the manager gave up on it (unix nanoseconds).
	At                int64         `cbor:"5,keyasint,omitempty"`
	CompletedCount    int64         `cbor:"6,keyasint,omitempty"`
	FailedCount       int64         `cbor:"7,keyasint,omitempty"`
	DroppedIterations int64         `cbor:"8,keyasint,omitempty"`
	Iterations        int64         `cbor:"9,keyasint,omitempty"`
	Elapsed           time.Duration `cbor:"10,keyasint,omitempty"`
	// Reported is the worker's timestamp of the last report kept (unix
	// nanoseconds); zero when the attempt never reported.
	Reported int64 `cbor:"11,keyasint,omitempty"`
	// Steps is the attempt's step statistics, an encoded LostSteps: kept
	// as bytes so a progress listing lost attempts nests no deeper than
	// one without (the decoder's nesting limit).
	Steps []byte `cbor:"12,keyasint,omitempty"`
}

// LostSteps is a lost attempt's step statistics (LostAttempt.Steps).
type LostSteps struct {
	Steps []StepStats `cbor:"1,keyasint,omitempty"`
}

// MaxSeriesEntries caps WorkflowProgress.Series: an hour of seconds, about
// 100 KiB encoded. It matches workflow.MaxSeriesSeconds.
const MaxSeriesEntries = 3600

// SeriesLiveWindow is how many of the newest seconds a mid-run progress
// carries.
const SeriesLiveWindow = 60

// SecondStats is one second of a workflow's run: the point covers
// [Second, Second+1) seconds from the run's start.
type SecondStats struct {
	Second    int64         `cbor:"1,keyasint"`
	Completed int64         `cbor:"2,keyasint,omitempty"`
	Failed    int64         `cbor:"3,keyasint,omitempty"`
	Dropped   int64         `cbor:"4,keyasint,omitempty"`
	VUs       int           `cbor:"5,keyasint,omitempty"`
	P50       time.Duration `cbor:"6,keyasint,omitempty"`
	P99       time.Duration `cbor:"7,keyasint,omitempty"`
}

// ClipSeries returns at most the newest limit entries of s (limit <= 0 or
// above MaxSeriesEntries means MaxSeriesEntries). Senders clip before
// encoding; receivers clip what a misbehaving sender sent, so a record
// never grows without bound. The result shares s's backing array.
func ClipSeries(s []SecondStats, limit int) []SecondStats {
	if limit <= 0 || limit > MaxSeriesEntries {
		limit = MaxSeriesEntries
	}
	if len(s) > limit {
		return s[len(s)-limit:]
	}
	return s
}

// JobProgress aggregates a job's workflows within one datacenter.
type JobProgress struct {
	JobID          string             `cbor:"1,keyasint"`
	Datacenter     string             `cbor:"2,keyasint"`
	Status         JobStatus          `cbor:"3,keyasint"`
	Workflows      []WorkflowProgress `cbor:"4,keyasint,omitempty"`
	TotalCompleted int64              `cbor:"5,keyasint,omitempty"`
	TotalFailed    int64              `cbor:"6,keyasint,omitempty"`
	OverallRate    float64            `cbor:"7,keyasint,omitempty"`
	Elapsed        time.Duration      `cbor:"8,keyasint,omitempty"`
	Timestamp      int64              `cbor:"9,keyasint,omitempty"`
	FenceToken     uint64             `cbor:"10,keyasint,omitempty"`
	Error          string             `cbor:"11,keyasint,omitempty"`
	// LeaseHolder is the gate driving the job here (the last JobSubmission's
	// or LeaseTransfer's sender), so a manager that takes over the
	// datacenter reports to the right gate.
	LeaseHolder string `cbor:"12,keyasint,omitempty"`
}

// ThresholdAbortPrefix starts the error of a job an abort_on_fail threshold
// ended, in a datacenter's JobProgress and in a gate's status, so every role
// tells such a failure (CLI exit 1) from any other (exit 2).
const ThresholdAbortPrefix = "threshold failed: "

// ProgressAck acknowledges a progress report; Leader tells a worker that
// reported to a stale leader where to go.
type ProgressAck struct {
	WorkflowID string `cbor:"1,keyasint"`
	Leader     string `cbor:"2,keyasint,omitempty"`
	// Cancel asks the worker to stop the workflow (job cancelled or fenced out).
	Cancel bool `cbor:"3,keyasint,omitempty"`
	// FenceToken, in a gate's answer to a datacenter's report, is the lease
	// token the gate holds for the job there. A manager obeys Cancel from a
	// gate only from its lease holder under a token not older than the
	// newest it knows for the job.
	FenceToken uint64 `cbor:"17,keyasint,omitempty"`
	// LeaseTTL, in the lease holder's answer to a report, says the report
	// renewed the datacenter's lease for that long.
	LeaseTTL time.Duration `cbor:"18,keyasint,omitempty"`
	// QuorumAge, in a manager leader's answer to a worker, is how long
	// before answering the leader last heard a majority of its peers
	// confirm its leadership. The worker counts its contact with a leader
	// from that moment, not from the answer (its self-fencing lease), so a
	// leader cut off from its peers cannot keep a worker running by
	// answering it.
	QuorumAge time.Duration `cbor:"30,keyasint,omitempty"`
}

func (*WorkflowProgress) Type() MsgType { return TypeWorkflowProgress }
func (*JobProgress) Type() MsgType      { return TypeJobProgress }
func (*ProgressAck) Type() MsgType      { return TypeProgressAck }

// ---- Quorum provisioning --------------------------------------------------------------

// ProvisionRequest asks a peer manager to confirm a placement.
type ProvisionRequest struct {
	JobID         string `cbor:"1,keyasint"`
	WorkflowID    string `cbor:"2,keyasint"`
	TargetWorker  string `cbor:"3,keyasint"`
	CoresRequired int    `cbor:"4,keyasint"`
	FenceToken    uint64 `cbor:"5,keyasint"`
	Version       uint64 `cbor:"6,keyasint"`
}

// ProvisionConfirm is a peer's answer to a ProvisionRequest.
type ProvisionConfirm struct {
	JobID          string `cbor:"1,keyasint"`
	WorkflowID     string `cbor:"2,keyasint"`
	ConfirmingNode string `cbor:"3,keyasint"`
	Confirmed      bool   `cbor:"4,keyasint"`
	Version        uint64 `cbor:"5,keyasint"`
	Error          string `cbor:"6,keyasint,omitempty"`
}

// ProvisionCommit tells peers a placement reached quorum; they store it so
// any of them can take over.
type ProvisionCommit struct {
	JobID            string `cbor:"1,keyasint"`
	WorkflowID       string `cbor:"2,keyasint"`
	TargetWorker     string `cbor:"3,keyasint"`
	CoresAssigned    int    `cbor:"4,keyasint"`
	FenceToken       uint64 `cbor:"5,keyasint"`
	CommittedVersion uint64 `cbor:"6,keyasint"`
	// Attempts is the leader's count of the workflow's attempts with this
	// one; peers take it rather than counting commits, since the leader
	// takes back an attempt the worker refused and a commit cannot.
	Attempts int `cbor:"20,keyasint,omitempty"`
}

// CommitAck acknowledges a ProvisionCommit once it is durable.
type CommitAck struct {
	WorkflowID string `cbor:"1,keyasint"`
	NodeID     string `cbor:"2,keyasint"`
}

func (*ProvisionRequest) Type() MsgType { return TypeProvisionRequest }
func (*ProvisionConfirm) Type() MsgType { return TypeProvisionConfirm }
func (*ProvisionCommit) Type() MsgType  { return TypeProvisionCommit }
func (*CommitAck) Type() MsgType        { return TypeCommitAck }

// ---- State sync ----------------------------------------------------------------------

// StateSyncRequest asks a worker or peer for its state after an election.
type StateSyncRequest struct {
	RequesterID   string   `cbor:"1,keyasint"`
	RequesterRole NodeRole `cbor:"2,keyasint"`
	SinceVersion  uint64   `cbor:"3,keyasint,omitempty"`
	Term          uint64   `cbor:"4,keyasint,omitempty"`
	// SinceJobID, with SinceVersion, resumes a gate's paged answer inside
	// one version: records are ordered by (version, job id), and the next
	// page starts after this pair.
	SinceJobID string `cbor:"14,keyasint,omitempty"`
	// JobsAfter asks a manager for the page of its snapshot after this job
	// id (ManagerStateSnapshot.NextAfter of the previous page); "" is the
	// first page.
	JobsAfter string `cbor:"18,keyasint,omitempty"`
}

// StateSyncResponse carries exactly one of the snapshots.
type StateSyncResponse struct {
	ResponderID    string                `cbor:"1,keyasint"`
	CurrentVersion uint64                `cbor:"2,keyasint"`
	WorkerState    *WorkerStateSnapshot  `cbor:"3,keyasint,omitempty"`
	ManagerState   *ManagerStateSnapshot `cbor:"4,keyasint,omitempty"`
	// GateJobs is a gate's answer: every job it knows, leases included.
	GateJobs []GateJobRecord `cbor:"5,keyasint,omitempty"`
	// More says a gate's answer has further pages.
	More bool `cbor:"15,keyasint,omitempty"`
}

// WorkerStateSnapshot is a worker's truth about the work it runs.
type WorkerStateSnapshot struct {
	NodeID          string                      `cbor:"1,keyasint"`
	State           WorkerState                 `cbor:"2,keyasint"`
	TotalCores      int                         `cbor:"3,keyasint"`
	AvailableCores  int                         `cbor:"4,keyasint"`
	Version         uint64                      `cbor:"5,keyasint"`
	ActiveWorkflows map[string]WorkflowProgress `cbor:"6,keyasint,omitempty"`
	Addr            string                      `cbor:"7,keyasint,omitempty"`
}

// ManagerStateSnapshot is a manager's view: registered workers and jobs.
type ManagerStateSnapshot struct {
	NodeID     string                 `cbor:"1,keyasint"`
	Datacenter string                 `cbor:"2,keyasint"`
	IsLeader   bool                   `cbor:"3,keyasint"`
	Term       uint64                 `cbor:"4,keyasint"`
	Version    uint64                 `cbor:"5,keyasint"`
	Workers    []WorkerStateSnapshot  `cbor:"6,keyasint,omitempty"`
	Jobs       map[string]JobProgress `cbor:"7,keyasint,omitempty"`
	// Jobs' original submissions and retry counts, so a new leader can retry.
	Submissions []JobSubmission   `cbor:"8,keyasint,omitempty"`
	Retries     map[string]int    `cbor:"9,keyasint,omitempty"`
	Commits     []ProvisionCommit `cbor:"10,keyasint,omitempty"`
	// Confirmed lists the jobs in Submissions this manager knows are
	// stored on a majority of managers.
	Confirmed []string `cbor:"24,keyasint,omitempty"`
	// NextAfter, when set, says the snapshot continues: ask again with
	// StateSyncRequest.JobsAfter = NextAfter. Pages are cut by size so each
	// fits far below the message cap, with at least one job per page.
	NextAfter string `cbor:"25,keyasint,omitempty"`
	// Ended holds the submissions of the most recently ended jobs (their
	// final views are in Jobs), so a successor that never stored one
	// records it ended rather than not knowing it.
	Ended []JobSubmission `cbor:"30,keyasint,omitempty"`
}

func (*StateSyncRequest) Type() MsgType  { return TypeStateSyncRequest }
func (*StateSyncResponse) Type() MsgType { return TypeStateSyncResponse }

// ---- Leases (gates) ------------------------------------------------------------------

// DatacenterLease grants a gate the right to drive a job in one datacenter.
// It travels inside GateJobRecord only: a manager learns of a lease from a
// JobSubmission or LeaseTransfer carrying its token.
type DatacenterLease struct {
	JobID       string `cbor:"1,keyasint"`
	Datacenter  string `cbor:"2,keyasint"`
	LeaseHolder string `cbor:"3,keyasint"`
	FenceToken  uint64 `cbor:"4,keyasint"`
	ExpiresAt   int64  `cbor:"5,keyasint"` // unix nanoseconds
	Version     uint64 `cbor:"6,keyasint"`
}

// LeaseTransfer moves a lease to a new gate leader with a newer token. The
// new lease holder is the transfer's sender, as the transport authenticated
// it; the message names no gate (keys 3 and 4, once the gates' names, are
// retired), so no gate can hand a lease to another.
type LeaseTransfer struct {
	JobID         string `cbor:"1,keyasint"`
	Datacenter    string `cbor:"2,keyasint"`
	NewFenceToken uint64 `cbor:"5,keyasint"`
	Version       uint64 `cbor:"6,keyasint"`
	// LeaseTTL: as JobSubmission.LeaseTTL; the transfer renews the lease.
	LeaseTTL time.Duration `cbor:"10,keyasint,omitempty"`
}

// LeaseAck answers a lease or lease transfer.
type LeaseAck struct {
	JobID      string `cbor:"1,keyasint"`
	Datacenter string `cbor:"2,keyasint"`
	Accepted   bool   `cbor:"3,keyasint"`
	Error      string `cbor:"4,keyasint,omitempty"`
}

// GateJobRecord is everything a gate knows about one job: the submission,
// a lease per datacenter and each datacenter's last progress. The gate
// leader replicates it to the other gates on every change that matters (a
// new job, a lease, a datacenter's status) and a gate's state sync answer
// carries one per job, so a new leader can take every lease over.
type GateJobRecord struct {
	Submission  JobSubmission     `cbor:"1,keyasint"`
	Status      JobStatus         `cbor:"2,keyasint"`
	Error       string            `cbor:"3,keyasint,omitempty"`
	Leases      []DatacenterLease `cbor:"4,keyasint,omitempty"`
	Datacenters []JobProgress     `cbor:"5,keyasint,omitempty"`
	CreatedAt   int64             `cbor:"6,keyasint,omitempty"` // unix nanoseconds
	FinishedAt  int64             `cbor:"7,keyasint,omitempty"`
	// Version grows with every change the leader makes; of two copies the
	// higher version wins.
	Version uint64 `cbor:"8,keyasint"`
	// Withdrawn marks a job that was never stored on a majority of gates
	// and was withdrawn before any datacenter got it: it never runs, and a
	// re-submission under the same id places it afresh.
	Withdrawn bool `cbor:"18,keyasint,omitempty"`
}

func (*GateJobRecord) Type() MsgType { return TypeGateJobRecord }
func (*LeaseTransfer) Type() MsgType { return TypeLeaseTransfer }
func (*LeaseAck) Type() MsgType      { return TypeLeaseAck }

// GateRecordRequest asks another gate for one job's record: the gate leader
// sends it when a datacenter reports a job it does not hold. The answer is
// the GateJobRecord, or a CodeNotFound error.
type GateRecordRequest struct {
	JobID string `cbor:"1,keyasint"`
}

// ManagerStatusRequest asks a manager for its ManagerHeartbeat now, rather
// than when SWIM next carries it: a new gate leader seeds its datacenter
// table with the answers.
type ManagerStatusRequest struct {
	RequesterID string `cbor:"1,keyasint"`
}

// LeaderAPI is a leader telling a configured peer of its role (manager to
// managers, gate to gates) the URL of its client API, one way, over the
// sealed transport. A follower forwards clients' requests, bearer token
// and all, only to a URL the leader's own node sent it this way: SWIM
// metadata can be gossiped by any holder of a worker's key.
type LeaderAPI struct {
	Term uint64 `cbor:"1,keyasint"`
	URL  string `cbor:"2,keyasint"`
}

func (*GateRecordRequest) Type() MsgType    { return TypeGateRecordRequest }
func (*ManagerStatusRequest) Type() MsgType { return TypeManagerStatusRequest }
func (*LeaderAPI) Type() MsgType            { return TypeLeaderAPI }

// ---- Registration and heartbeats ---------------------------------------------------------

// WorkerRegistration announces a worker to a manager.
type WorkerRegistration struct {
	NodeID     string `cbor:"1,keyasint"`
	Addr       string `cbor:"2,keyasint"` // QUIC address
	SwimAddr   string `cbor:"3,keyasint,omitempty"`
	Datacenter string `cbor:"4,keyasint"`
	TotalCores int    `cbor:"5,keyasint"`
	Version    uint64 `cbor:"6,keyasint,omitempty"`
	// ActiveWorkflows lets a worker re-home its running work after failover.
	ActiveWorkflows []WorkflowProgress `cbor:"7,keyasint,omitempty"`
	// Confinement is what the worker's config lets a job make it do
	// beyond the built-in operators; nil allows nothing (exec off, no
	// path: source), as on a worker that predates it.
	Confinement *Confinement `cbor:"8,keyasint,omitempty"`
}

// Confinement is what a worker lets jobs make it do beyond built-in work
// (docs/security.md, "Job confinement"): managers refuse at submit, and
// place work only where it is allowed; the worker checks again itself.
type Confinement struct {
	// Exec: RainStorm exec stages may run here, but only the programs below.
	Exec bool `cbor:"1,keyasint,omitempty"`
	// ExecPrograms are absolute paths of programs on the worker; a bare
	// name in a job matches the one of these it resolves to.
	ExecPrograms []string `cbor:"2,keyasint,omitempty"`
	// ExecSums are hex SHA-256 sums of programs uploaded with a job.
	ExecSums []string `cbor:"3,keyasint,omitempty"`
	// SourceDirs are the directories a `path:` source may read under.
	SourceDirs []string `cbor:"4,keyasint,omitempty"`
}

// RegistrationAck answers a WorkerRegistration.
type RegistrationAck struct {
	Accepted   bool     `cbor:"1,keyasint"`
	Leader     string   `cbor:"2,keyasint,omitempty"`
	LeaderAddr string   `cbor:"3,keyasint,omitempty"`
	Managers   []string `cbor:"4,keyasint,omitempty"` // QUIC addresses of known managers
	Error      string   `cbor:"5,keyasint,omitempty"`
	Term       uint64   `cbor:"6,keyasint,omitempty"`
}

// WorkerHeartbeat is a worker's state, embedded in SWIM acks.
type WorkerHeartbeat struct {
	NodeID          string            `cbor:"1,keyasint"`
	State           WorkerState       `cbor:"2,keyasint"`
	TotalCores      int               `cbor:"3,keyasint"`
	AvailableCores  int               `cbor:"4,keyasint"`
	QueueDepth      int               `cbor:"5,keyasint,omitempty"`
	CPUPercent      float64           `cbor:"6,keyasint,omitempty"`
	MemoryPercent   float64           `cbor:"7,keyasint,omitempty"`
	Version         uint64            `cbor:"8,keyasint"`
	ActiveWorkflows map[string]string `cbor:"9,keyasint,omitempty"` // workflow id -> status
	Datacenter      string            `cbor:"10,keyasint,omitempty"`
	Addr            string            `cbor:"11,keyasint,omitempty"`
	// SendKeyID and AcceptKeyIDs are the ids (security.KeyID) of the secret
	// the node seals with and of every secret it opens, so `tempest cluster`
	// shows how far a rotation pass has got on every node. Ids, never
	// secrets: a few bytes each, well inside the ack payload budget.
	SendKeyID    uint32   `cbor:"12,keyasint,omitempty"`
	AcceptKeyIDs []uint32 `cbor:"13,keyasint,omitempty"`
}

// ManagerHeartbeat is a manager's state, embedded in SWIM acks.
type ManagerHeartbeat struct {
	NodeID          string `cbor:"1,keyasint"`
	Datacenter      string `cbor:"2,keyasint"`
	IsLeader        bool   `cbor:"3,keyasint"`
	Term            uint64 `cbor:"4,keyasint"`
	Version         uint64 `cbor:"5,keyasint"`
	ActiveJobs      int    `cbor:"6,keyasint,omitempty"`
	ActiveWorkflows int    `cbor:"7,keyasint,omitempty"`
	WorkerCount     int    `cbor:"8,keyasint,omitempty"`
	AvailableCores  int    `cbor:"9,keyasint,omitempty"`
	Addr            string `cbor:"10,keyasint,omitempty"`
	LeaderID        string `cbor:"11,keyasint,omitempty"`
	// SendKeyID and AcceptKeyIDs: as in WorkerHeartbeat.
	SendKeyID    uint32   `cbor:"12,keyasint,omitempty"`
	AcceptKeyIDs []uint32 `cbor:"13,keyasint,omitempty"`
	// TotalCores: the cores of the live workers this manager knows, of
	// which AvailableCores are free.
	TotalCores int `cbor:"14,keyasint,omitempty"`
	// Load is the manager's load level (internal/overload: 0 NORMAL to 3
	// CRITICAL): a HIGH leader hands over only to a peer reporting less.
	Load int `cbor:"15,keyasint,omitempty"`
}

func (*WorkerRegistration) Type() MsgType { return TypeWorkerRegistration }
func (*RegistrationAck) Type() MsgType    { return TypeRegistrationAck }
func (*WorkerHeartbeat) Type() MsgType    { return TypeWorkerHeartbeat }
func (*ManagerHeartbeat) Type() MsgType   { return TypeManagerHeartbeat }

// ---- Leader election -------------------------------------------------------------------------

// PreVoteRequest asks whether the sender could win an election for Term
// without anyone bumping their term.
type PreVoteRequest struct {
	Cluster   string  `cbor:"1,keyasint"`
	Term      uint64  `cbor:"2,keyasint"` // the term the candidate would use
	Candidate string  `cbor:"3,keyasint"`
	LHM       int     `cbor:"4,keyasint,omitempty"`
	Health    float64 `cbor:"5,keyasint,omitempty"`
	// Priority is the candidate's configured election priority: between
	// candidates of equal health, voters prefer the higher one.
	Priority int `cbor:"6,keyasint,omitempty"`
	// ConfigEpoch is the candidate's group configuration epoch; a voter
	// that knows a newer one refuses (GroupConfig).
	ConfigEpoch uint64 `cbor:"7,keyasint,omitempty"`
}

// PreVoteResponse answers a PreVoteRequest.
type PreVoteResponse struct {
	Cluster string `cbor:"1,keyasint"`
	// Term is the proposed term when granted (so a candidate can ignore
	// grants from an earlier round), the voter's own term when refused.
	Term    uint64 `cbor:"2,keyasint"`
	Voter   string `cbor:"3,keyasint"`
	Granted bool   `cbor:"4,keyasint"`
	Reason  string `cbor:"5,keyasint,omitempty"`
	// ConfigEpoch is the voter's configuration epoch, so a candidate left
	// behind (a removed member restarted with stale config) learns why.
	ConfigEpoch uint64 `cbor:"6,keyasint,omitempty"`
	// NotMember: the voter's configuration (ConfigEpoch) does not name the
	// candidate at all, as a voter or a learner.
	NotMember bool `cbor:"7,keyasint,omitempty"`
}

// VoteRequest asks for a vote in Term.
type VoteRequest struct {
	Cluster   string `cbor:"1,keyasint"`
	Term      uint64 `cbor:"2,keyasint"`
	Candidate string `cbor:"3,keyasint"`
	LHM       int    `cbor:"4,keyasint,omitempty"`
	// Transfer marks an election the previous leader asked for (TimeoutNow):
	// voters grant it even while they still hear that leader.
	Transfer    bool   `cbor:"5,keyasint,omitempty"`
	ConfigEpoch uint64 `cbor:"6,keyasint,omitempty"`
}

// VoteResponse answers a VoteRequest.
type VoteResponse struct {
	Cluster     string `cbor:"1,keyasint"`
	Term        uint64 `cbor:"2,keyasint"`
	Voter       string `cbor:"3,keyasint"`
	Granted     bool   `cbor:"4,keyasint"`
	Reason      string `cbor:"5,keyasint,omitempty"`
	ConfigEpoch uint64 `cbor:"6,keyasint,omitempty"`
	NotMember   bool   `cbor:"7,keyasint,omitempty"` // as PreVoteResponse.NotMember
}

// LeaderHeartbeat asserts leadership for Term.
type LeaderHeartbeat struct {
	Cluster    string `cbor:"1,keyasint"`
	Term       uint64 `cbor:"2,keyasint"`
	Leader     string `cbor:"3,keyasint"`
	LeaderAddr string `cbor:"4,keyasint,omitempty"`
	Seq        uint64 `cbor:"5,keyasint,omitempty"`
	// ConfigEpoch is the newest group configuration the leader knows; Config
	// carries it whole to a follower that has not acknowledged it yet.
	ConfigEpoch uint64       `cbor:"6,keyasint,omitempty"`
	Config      *GroupConfig `cbor:"7,keyasint,omitempty"`
}

// GroupConfig is an election group's member set at an epoch: the epoch
// grows by one per change, and a change adds or removes one member.
type GroupConfig struct {
	Epoch   uint64        `cbor:"1,keyasint"`
	Members []GroupMember `cbor:"2,keyasint"`
	// Learners receive the leader's heartbeats and the roles' replication
	// but neither vote nor count toward any majority, until the leader
	// promotes them (a manager that is still syncing).
	Learners []GroupMember `cbor:"3,keyasint,omitempty"`
}

// GroupMember is one member of a GroupConfig.
type GroupMember struct {
	ID   string `cbor:"1,keyasint"`
	Addr string `cbor:"2,keyasint"`
}

// LeaderHeartbeatAck lets a leader count who still follows it (check-quorum).
type LeaderHeartbeatAck struct {
	Cluster  string `cbor:"1,keyasint"`
	Term     uint64 `cbor:"2,keyasint"`
	Follower string `cbor:"3,keyasint"`
	Success  bool   `cbor:"4,keyasint"`
	Seq      uint64 `cbor:"5,keyasint,omitempty"`
	// Priority is the follower's configured election priority, so a leader
	// handing over picks the follower operators prefer.
	Priority int `cbor:"6,keyasint,omitempty"`
	// LHM is the follower's Lifeguard health score: a leader hands over only
	// to a follower healthy enough to lead.
	LHM int `cbor:"7,keyasint,omitempty"`
	// ConfigEpoch is the configuration the follower has stored durably.
	ConfigEpoch uint64 `cbor:"8,keyasint,omitempty"`
	// Synced is the follower's role reporting it holds the group's state: a
	// learner is promoted to a voter only once it says so.
	Synced bool `cbor:"9,keyasint,omitempty"`
}

// TimeoutNow is a leader handing over (a planned stop): it tells the chosen
// follower to stand for election at once, as Raft's leadership transfer
// does, instead of letting the group wait out an election timeout.
type TimeoutNow struct {
	Cluster string `cbor:"1,keyasint"`
	Term    uint64 `cbor:"2,keyasint"` // the leader's term; the target campaigns for Term+1
	Leader  string `cbor:"3,keyasint"`
}

func (*PreVoteRequest) Type() MsgType     { return TypePreVoteRequest }
func (*PreVoteResponse) Type() MsgType    { return TypePreVoteResponse }
func (*VoteRequest) Type() MsgType        { return TypeVoteRequest }
func (*VoteResponse) Type() MsgType       { return TypeVoteResponse }
func (*LeaderHeartbeat) Type() MsgType    { return TypeLeaderHeartbeat }
func (*LeaderHeartbeatAck) Type() MsgType { return TypeLeaderHeartbeatAck }
func (*TimeoutNow) Type() MsgType         { return TypeTimeoutNow }

// ---- Connection hello ------------------------------------------------------------

// MaxHelloSize caps an encoded Hello or HelloAck. A receiver reads at most
// this many bytes from a connection that has not proven the secret yet.
const MaxHelloSize = 1024

// Hello is the first frame a dialer sends on a new connection: its node id
// and, for each key tier it holds (worker, manager, cluster: see
// security.Tier), a proof of that key bound to this TLS session (see
// security.Keyring.Prove). The listener verifies the highest tier it can;
// that is the link's tier. Nothing else is read from a connection until its
// Hello verifies.
type Hello struct {
	NodeID string       `cbor:"1,keyasint"`
	Proofs []HelloProof `cbor:"2,keyasint"`
}

// HelloProof is one tier's proof in a Hello or HelloAck.
type HelloProof struct {
	Tier  uint8  `cbor:"1,keyasint"`
	KeyID uint32 `cbor:"2,keyasint"`
	Proof []byte `cbor:"3,keyasint"`
}

// MaxHelloTiers bounds the proofs in a Hello: one per key tier.
const MaxHelloTiers = 3

// HelloAck answers a Hello that verified: the listener's own node id and
// its proof at the link's tier. A refused Hello gets no ack: the listener
// closes the connection with a reason instead.
type HelloAck struct {
	NodeID string     `cbor:"1,keyasint"`
	Proof  HelloProof `cbor:"2,keyasint"`
}

func (*Hello) Type() MsgType    { return TypeHello }
func (*HelloAck) Type() MsgType { return TypeHelloAck }

// DecodeHello decodes and checks an untrusted Hello.
func DecodeHello(b []byte) (*Hello, error) {
	if len(b) > MaxHelloSize {
		return nil, &Error{Code: CodeTooLarge, Message: fmt.Sprintf("hello of %d bytes exceeds %d", len(b), MaxHelloSize)}
	}
	var h Hello
	if err := Unmarshal(b, &h); err != nil {
		return nil, &Error{Code: CodeMalformed, Message: "hello: " + err.Error()}
	}
	if err := checkHelloNode(h.NodeID); err != nil {
		return nil, err
	}
	if len(h.Proofs) == 0 || len(h.Proofs) > MaxHelloTiers {
		return nil, &Error{Code: CodeMalformed, Message: fmt.Sprintf("hello: %d proofs, want 1..%d", len(h.Proofs), MaxHelloTiers)}
	}
	var seen [MaxHelloTiers + 1]bool
	for _, p := range h.Proofs {
		if err := checkHelloProof(p); err != nil {
			return nil, err
		}
		if seen[p.Tier] {
			return nil, &Error{Code: CodeMalformed, Message: fmt.Sprintf("hello: two proofs of tier %d", p.Tier)}
		}
		seen[p.Tier] = true
	}
	return &h, nil
}

func checkHelloProof(p HelloProof) error {
	if p.Tier < 1 || p.Tier > MaxHelloTiers || len(p.Proof) != 32 {
		return &Error{Code: CodeMalformed, Message: fmt.Sprintf("hello: proof of tier %d with %d bytes", p.Tier, len(p.Proof))}
	}
	return nil
}

// DecodeHelloAck decodes and checks an untrusted HelloAck.
func DecodeHelloAck(b []byte) (*HelloAck, error) {
	if len(b) > MaxHelloSize {
		return nil, &Error{Code: CodeTooLarge, Message: fmt.Sprintf("hello ack of %d bytes exceeds %d", len(b), MaxHelloSize)}
	}
	var h HelloAck
	if err := Unmarshal(b, &h); err != nil {
		return nil, &Error{Code: CodeMalformed, Message: "hello ack: " + err.Error()}
	}
	if err := checkHelloNode(h.NodeID); err != nil {
		return nil, err
	}
	if err := checkHelloProof(h.Proof); err != nil {
		return nil, err
	}
	return &h, nil
}

func checkHelloNode(id string) error {
	if id == "" || len(id) > MaxSenderLen {
		return &Error{Code: CodeMalformed, Message: fmt.Sprintf("hello: node id length %d outside 1..%d", len(id), MaxSenderLen)}
	}
	return nil
}
