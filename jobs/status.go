package jobs

import (
	"fmt"
	"slices"
	"strings"

	"tempest/wire"
)

// The three state machines of a job. Each turns the states of parts into
// the state of their whole: a workflow's parts (shards, datacenters) into
// the workflow's (MergedWorkflowStatus), a datacenter's workflows into its
// job's (JobStatusOf, the manager's), and a job's datacenters into the job's
// (GlobalStatusOf, the gate's).

// MergedWorkflowStatus: ended only when all expected parts ended; COMPLETED
// only if all completed, else FAILED if any failed, else CANCELLED. While
// parts run, RUNNING if any runs, else the first part's state.
func MergedWorkflowStatus(statuses []wire.WorkflowStatus, expected int) wire.WorkflowStatus {
	if len(statuses) == 0 {
		return wire.WorkflowPending
	}
	var running, failed, cancelled bool
	for _, s := range statuses {
		switch {
		case !s.Terminal():
			running = true
		case s == wire.WorkflowFailed:
			failed = true
		case s == wire.WorkflowCancelled:
			cancelled = true
		}
	}
	switch {
	case running || len(statuses) < expected:
		if slices.Contains(statuses, wire.WorkflowRunning) {
			return wire.WorkflowRunning
		}
		for _, s := range statuses {
			if !s.Terminal() {
				return s
			}
		}
		// Some parts ended and the rest have not reported: in progress.
		return wire.WorkflowRunning
	case failed:
		return wire.WorkflowFailed
	case cancelled:
		return wire.WorkflowCancelled
	}
	return wire.WorkflowCompleted
}

// StatusInput is what a datacenter's job status is derived from.
type StatusInput struct {
	// Current is the job's status now: a terminal one sticks.
	Current wire.JobStatus
	// Attempted: placement was tried at least once, so pending work is
	// QUEUED (waiting for capacity) rather than just SUBMITTED.
	Attempted bool
	// Placing counts workflows whose placement found a worker and is being
	// confirmed or dispatched.
	Placing   int
	Workflows []wire.WorkflowStatus
}

// JobStatusOf is a datacenter's job state machine (docs/datacenter.md):
// terminal states stick; a job whose workflows have all ended is
// COMPLETED, or FAILED if any failed, or CANCELLED if any was cancelled;
// while placements run it is DISPATCHING; with nothing running and work
// waiting for cores it is QUEUED (SUBMITTED before the first attempt);
// otherwise RUNNING. CANCELLED and TIMEOUT are set explicitly by cancel and
// timeout, never derived from a lucky mix.
func JobStatusOf(in StatusInput) wire.JobStatus {
	if in.Current.Terminal() || len(in.Workflows) == 0 {
		return in.Current
	}
	var ended, failed, cancelled, pending, active int
	for _, s := range in.Workflows {
		switch s {
		case wire.WorkflowCompleted:
			ended++
		case wire.WorkflowFailed:
			ended++
			failed++
		case wire.WorkflowCancelled:
			ended++
			cancelled++
		case wire.WorkflowPending:
			pending++
		default:
			active++
		}
	}
	switch {
	case ended == len(in.Workflows) && failed > 0:
		return wire.JobFailed
	case ended == len(in.Workflows) && cancelled > 0:
		return wire.JobCancelled
	case ended == len(in.Workflows):
		return wire.JobCompleted
	case in.Placing > 0:
		return wire.JobDispatching
	case pending > 0 && active == 0 && !in.Attempted:
		return wire.JobSubmitted
	case pending > 0 && active == 0:
		return wire.JobQueued
	}
	return wire.JobRunning
}

// GlobalStatusOf is the job state machine over datacenters (the gate's): a
// job is done when every datacenter is; COMPLETED only if every datacenter
// completed, otherwise FAILED naming each datacenter that did not (a
// partial failure is a failure the client must see, never a silent retry
// elsewhere), or CANCELLED when a client cancelled it (cancelled is the
// reason), or FAILED with aborted when an abort_on_fail threshold ended it.
// While running, the most advanced datacenter's state shows; once a client
// cancelled, CANCELLING until every datacenter's part has ended.
func GlobalStatusOf(dcs []wire.JobProgress, cancelled, aborted string) (wire.JobStatus, string) {
	if len(dcs) == 0 {
		return wire.JobSubmitted, ""
	}
	allDone, allCompleted, allTimeout := true, true, true
	var failed []string
	rank := map[wire.JobStatus]int{wire.JobSubmitted: 0, wire.JobQueued: 1, wire.JobDispatching: 2, wire.JobRunning: 3,
		wire.JobCompleting: 4, wire.JobCancelling: 5}
	best := wire.JobSubmitted
	for _, p := range dcs {
		if !p.Status.Terminal() {
			allDone = false
			if rank[p.Status] > rank[best] {
				best = p.Status
			}
			continue
		}
		if p.Status != wire.JobCompleted {
			allCompleted = false
			reason := p.Error
			if reason == "" {
				reason = string(p.Status)
			}
			failed = append(failed, fmt.Sprintf("%s %s: %s", p.Datacenter, p.Status, reason))
		}
		allTimeout = allTimeout && p.Status == wire.JobTimeout
	}
	switch {
	case !allDone && cancelled != "":
		return wire.JobCancelling, cancelled
	case !allDone:
		return best, ""
	case aborted != "":
		return wire.JobFailed, aborted
	case cancelled != "":
		return wire.JobCancelled, cancelled
	case allCompleted:
		return wire.JobCompleted, ""
	case allTimeout:
		return wire.JobTimeout, strings.Join(failed, "; ")
	case len(failed) < len(dcs):
		return wire.JobFailed, fmt.Sprintf("partial failure: %d of %d datacenters did not complete: %s", len(failed), len(dcs), strings.Join(failed, "; "))
	default:
		return wire.JobFailed, strings.Join(failed, "; ")
	}
}
