package jobs_test

import (
	"strings"
	"testing"

	"tempest/jobs"
	"tempest/wire"
)

// Moved from manager/jobs_test.go (TestDeriveJobStatus).
func TestJobStatusOf(t *testing.T) {
	const (
		P = wire.WorkflowPending
		A = wire.WorkflowAssigned
		R = wire.WorkflowRunning
		C = wire.WorkflowCompleted
		F = wire.WorkflowFailed
		X = wire.WorkflowCancelled
	)
	for _, tc := range []struct {
		name string
		in   jobs.StatusInput
		want wire.JobStatus
	}{
		{"fresh", jobs.StatusInput{Current: wire.JobSubmitted, Workflows: []wire.WorkflowStatus{P, P}}, wire.JobSubmitted},
		{"placing", jobs.StatusInput{Current: wire.JobSubmitted, Attempted: true, Placing: 1, Workflows: []wire.WorkflowStatus{P, P}}, wire.JobDispatching},
		{"no capacity", jobs.StatusInput{Current: wire.JobDispatching, Attempted: true, Workflows: []wire.WorkflowStatus{P, P}}, wire.JobQueued},
		{"partly running", jobs.StatusInput{Current: wire.JobDispatching, Attempted: true, Workflows: []wire.WorkflowStatus{R, P}}, wire.JobRunning},
		{"assigned counts as running", jobs.StatusInput{Current: wire.JobDispatching, Attempted: true, Workflows: []wire.WorkflowStatus{A, R}}, wire.JobRunning},
		{"some done", jobs.StatusInput{Current: wire.JobRunning, Workflows: []wire.WorkflowStatus{C, R}}, wire.JobRunning},
		{"all done", jobs.StatusInput{Current: wire.JobRunning, Workflows: []wire.WorkflowStatus{C, C}}, wire.JobCompleted},
		{"one failed, rest still running", jobs.StatusInput{Current: wire.JobRunning, Workflows: []wire.WorkflowStatus{F, R}}, wire.JobRunning},
		{"one failed", jobs.StatusInput{Current: wire.JobRunning, Workflows: []wire.WorkflowStatus{F, C}}, wire.JobFailed},
		{"failed beats cancelled", jobs.StatusInput{Current: wire.JobRunning, Workflows: []wire.WorkflowStatus{F, X}}, wire.JobFailed},
		{"cancelled", jobs.StatusInput{Current: wire.JobRunning, Workflows: []wire.WorkflowStatus{X, C}}, wire.JobCancelled},
		{"terminal sticks", jobs.StatusInput{Current: wire.JobTimeout, Workflows: []wire.WorkflowStatus{C, C}}, wire.JobTimeout},
		{"cancelled sticks", jobs.StatusInput{Current: wire.JobCancelled, Workflows: []wire.WorkflowStatus{R}}, wire.JobCancelled},
		{"no workflows", jobs.StatusInput{Current: wire.JobSubmitted}, wire.JobSubmitted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := jobs.JobStatusOf(tc.in); got != tc.want {
				t.Fatalf("JobStatusOf(%+v) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}

func dc(name string, st wire.JobStatus, errMsg string) wire.JobProgress {
	return wire.JobProgress{Datacenter: name, Status: st, Error: errMsg}
}

// Moved from gate/status_test.go (TestDeriveStatus).
func TestGlobalStatusOf(t *testing.T) {
	tests := []struct {
		name      string
		dcs       []wire.JobProgress
		cancelled string
		aborted   string
		want      wire.JobStatus
		wantErr   string // substring; "" means no error
	}{
		{"none yet", nil, "", "", wire.JobSubmitted, ""},
		{"most advanced shows", []wire.JobProgress{dc("a", wire.JobQueued, ""), dc("b", wire.JobRunning, "")}, "", "", wire.JobRunning, ""},
		{"one done one running", []wire.JobProgress{dc("a", wire.JobCompleted, ""), dc("b", wire.JobDispatching, "")}, "", "", wire.JobDispatching, ""},
		{"all completed", []wire.JobProgress{dc("a", wire.JobCompleted, ""), dc("b", wire.JobCompleted, "")}, "", "", wire.JobCompleted, ""},
		{"partial failure names the datacenter", []wire.JobProgress{dc("a", wire.JobCompleted, ""), dc("b", wire.JobFailed, "lease expired")}, "", "", wire.JobFailed, "partial failure: 1 of 2 datacenters did not complete: b FAILED: lease expired"},
		{"all failed", []wire.JobProgress{dc("a", wire.JobFailed, "x"), dc("b", wire.JobCancelled, "")}, "", "", wire.JobFailed, "a FAILED: x; b CANCELLED: CANCELLED"},
		{"all timed out", []wire.JobProgress{dc("a", wire.JobTimeout, "t"), dc("b", wire.JobTimeout, "t")}, "", "", wire.JobTimeout, "a TIMEOUT"},
		{"cancelled by a client", []wire.JobProgress{dc("a", wire.JobCancelled, "by me"), dc("b", wire.JobCompleted, "")}, "by me", "", wire.JobCancelled, "by me"},
		{"abort on merged thresholds", []wire.JobProgress{dc("a", wire.JobCancelled, "x"), dc("b", wire.JobCancelled, "x")}, "", "threshold failed: rps > 10", wire.JobFailed, "threshold failed: rps > 10"},
		{"cancel waits for every datacenter", []wire.JobProgress{dc("a", wire.JobCancelled, "by me"), dc("b", wire.JobRunning, "")}, "by me", "", wire.JobCancelling, "by me"},
		{"a datacenter finishing", []wire.JobProgress{dc("a", wire.JobCompleted, ""), dc("b", wire.JobCompleting, "")}, "", "", wire.JobCompleting, ""},
		{"a datacenter's workers stopping", []wire.JobProgress{dc("a", wire.JobCancelling, "x"), dc("b", wire.JobRunning, "")}, "", "", wire.JobCancelling, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, msg := jobs.GlobalStatusOf(tt.dcs, tt.cancelled, tt.aborted)
			if got != tt.want {
				t.Errorf("status %s, want %s", got, tt.want)
			}
			if tt.wantErr == "" && msg != "" || tt.wantErr != "" && !strings.Contains(msg, tt.wantErr) {
				t.Errorf("error %q, want it to hold %q", msg, tt.wantErr)
			}
		})
	}
}
