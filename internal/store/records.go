package store

import (
	"time"

	"tempest/wire"
)

// JobRecord is one job as a manager keeps it. Times are unix nanoseconds so
// the record encodes the same way on every platform and codec setting.
type JobRecord struct {
	// Rev orders writes of this record; see the package doc.
	Rev        uint64             `cbor:"1,keyasint"`
	Submission wire.JobSubmission `cbor:"2,keyasint"`
	Status     wire.JobStatus     `cbor:"3,keyasint"`
	// Progress is the job's aggregate (totals, elapsed); the per-workflow
	// detail lives in the WorkflowRecords, so Progress.Workflows is empty.
	Progress   wire.JobProgress `cbor:"4,keyasint"`
	CreatedAt  int64            `cbor:"5,keyasint"`
	FinishedAt int64            `cbor:"6,keyasint,omitempty"`
	Error      string           `cbor:"7,keyasint,omitempty"`
	// Confirmed: this manager knows the submission is stored on a majority
	// of the datacenter's managers (it led the intake, or learnt it in a
	// state sync). Only confirmed jobs are placed; see manager/intake.go.
	Confirmed bool `cbor:"20,keyasint,omitempty"`
}

// ID is the job's id.
func (r *JobRecord) ID() string { return r.Submission.JobID }

// Created is CreatedAt as a time.
func (r *JobRecord) Created() time.Time { return time.Unix(0, r.CreatedAt) }

// Finished is FinishedAt as a time; zero while the job runs.
func (r *JobRecord) Finished() time.Time {
	if r.FinishedAt == 0 {
		return time.Time{}
	}
	return time.Unix(0, r.FinishedAt)
}

// WorkflowRecord is one workflow of a job: its spec, where it runs, under
// which fence token, and what a retry needs.
type WorkflowRecord struct {
	Rev        uint64 `cbor:"1,keyasint"`
	JobID      string `cbor:"2,keyasint"`
	WorkflowID string `cbor:"3,keyasint"`
	// Index is the workflow's position in the submission.
	Index  int                 `cbor:"4,keyasint,omitempty"`
	Spec   wire.WorkflowSpec   `cbor:"5,keyasint"`
	Status wire.WorkflowStatus `cbor:"6,keyasint"`
	// Worker is the worker of the current (latest) attempt, if any.
	Worker     string `cbor:"7,keyasint,omitempty"`
	FenceToken uint64 `cbor:"8,keyasint,omitempty"`
	// Attempts counts dispatches that reached a worker (or may have).
	Attempts int `cbor:"9,keyasint,omitempty"`
	// Excluded lists workers that failed this workflow; retries avoid them.
	Excluded []string `cbor:"10,keyasint,omitempty"`
	// DispatchBytes is the first encoded wire.WorkflowDispatch: retries
	// re-send exactly this with a new fence token and attempt number.
	DispatchBytes []byte                `cbor:"11,keyasint,omitempty"`
	LastProgress  wire.WorkflowProgress `cbor:"12,keyasint"`
	Cores         []int                 `cbor:"13,keyasint,omitempty"`
	Error         string                `cbor:"14,keyasint,omitempty"`
	UpdatedAt     int64                 `cbor:"15,keyasint,omitempty"`
	// Thresholds are the verdicts of Spec.Thresholds on LastProgress,
	// evaluated when the workflow ended (and again if its final progress
	// arrives later), so a status query never merges histograms for them.
	Thresholds []wire.ThresholdResult `cbor:"16,keyasint,omitempty"`
	// Series is the final progress's per-second series (for the HTML
	// report). LastProgress is stored without its series so the points
	// are not persisted twice, and mid-run windows are never persisted.
	Series []wire.SecondStats `cbor:"17,keyasint,omitempty"`
	// Lost are the earlier attempts of a load workflow that were lost,
	// each with its last reported counts. While there are any,
	// LastProgress is the current attempt's progress with theirs folded
	// in, and AttemptProgress the current attempt's own, from which the
	// fold is made again when a lost attempt's later word arrives.
	Lost            []wire.LostAttempt     `cbor:"18,keyasint,omitempty"`
	AttemptProgress *wire.WorkflowProgress `cbor:"19,keyasint,omitempty"`
	// Requeues counts the attempts taken back through no fault of the
	// workflow (its worker declared dead, a new leader that found it not
	// running: requeueLocked). They are attempts, not failures: retries
	// are budgeted on Attempts - Requeues.
	Requeues int `cbor:"20,keyasint,omitempty"`
}
