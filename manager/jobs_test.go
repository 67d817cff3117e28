package manager

import (
	"strings"
	"testing"

	"tempest/store"
	"tempest/wire"
)

func TestDeriveJobStatus(t *testing.T) {
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
		in   statusInput
		want wire.JobStatus
	}{
		{"fresh", statusInput{current: wire.JobSubmitted, workflows: []wire.WorkflowStatus{P, P}}, wire.JobSubmitted},
		{"placing", statusInput{current: wire.JobSubmitted, attempted: true, placing: 1, workflows: []wire.WorkflowStatus{P, P}}, wire.JobDispatching},
		{"no capacity", statusInput{current: wire.JobDispatching, attempted: true, workflows: []wire.WorkflowStatus{P, P}}, wire.JobQueued},
		{"partly running", statusInput{current: wire.JobDispatching, attempted: true, workflows: []wire.WorkflowStatus{R, P}}, wire.JobRunning},
		{"assigned counts as running", statusInput{current: wire.JobDispatching, attempted: true, workflows: []wire.WorkflowStatus{A, R}}, wire.JobRunning},
		{"some done", statusInput{current: wire.JobRunning, workflows: []wire.WorkflowStatus{C, R}}, wire.JobRunning},
		{"all done", statusInput{current: wire.JobRunning, workflows: []wire.WorkflowStatus{C, C}}, wire.JobCompleted},
		{"one failed, rest still running", statusInput{current: wire.JobRunning, workflows: []wire.WorkflowStatus{F, R}}, wire.JobRunning},
		{"one failed", statusInput{current: wire.JobRunning, workflows: []wire.WorkflowStatus{F, C}}, wire.JobFailed},
		{"failed beats cancelled", statusInput{current: wire.JobRunning, workflows: []wire.WorkflowStatus{F, X}}, wire.JobFailed},
		{"cancelled", statusInput{current: wire.JobRunning, workflows: []wire.WorkflowStatus{X, C}}, wire.JobCancelled},
		{"terminal sticks", statusInput{current: wire.JobTimeout, workflows: []wire.WorkflowStatus{C, C}}, wire.JobTimeout},
		{"cancelled sticks", statusInput{current: wire.JobCancelled, workflows: []wire.WorkflowStatus{R}}, wire.JobCancelled},
		{"no workflows", statusInput{current: wire.JobSubmitted}, wire.JobSubmitted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := deriveJobStatus(tc.in); got != tc.want {
				t.Fatalf("deriveJobStatus(%+v) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}

// TestRetryReusesOriginalDispatchBytes: a retry decodes the bytes kept from
// the first dispatch and changes only the token and the attempt number.
func TestRetryReusesOriginalDispatchBytes(t *testing.T) {
	m := &Manager{}
	rec := &store.WorkflowRecord{
		JobID: "j", WorkflowID: "j-0",
		Spec: wire.WorkflowSpec{Name: "a", Type: "sleep", Cores: 2, Params: []byte{0xa1, 0x01, 0x18, 0x2a}},
	}
	first, original, err := m.buildDispatch(rec, 1<<32|1)
	if err != nil {
		t.Fatal(err)
	}
	if first.Attempt != 1 || first.Cores != 2 || len(original) == 0 {
		t.Fatalf("first dispatch %+v", first)
	}
	rec.DispatchBytes = original
	rec.Attempts = 1
	// The spec in the record changing must not change what a retry runs.
	rec.Spec.Params = []byte{0xa0}
	retry, again, err := m.buildDispatch(rec, 2<<32|1)
	if err != nil {
		t.Fatal(err)
	}
	if again != nil {
		t.Fatal("a retry re-encoded the original")
	}
	if retry.FenceToken != 2<<32|1 || retry.Attempt != 2 || string(retry.Workflow.Params) != string(first.Workflow.Params) {
		t.Fatalf("retry %+v, first %+v", retry, first)
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ID = "m1"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("default config with an id: %v", err)
	}
	cfg.ID = ""
	cfg.Datacenter = ""
	cfg.QUICListen = "nope"
	cfg.ElectionProfile = "warp"
	cfg.Peers = []Peer{{ID: "a", QUIC: "a:1"}, {ID: "a", QUIC: ""}}
	cfg.QuorumTimeout = 0
	cfg.MaxWorkflowRetries = -1
	cfg.APIAdvertise = "ftp://x"
	err := cfg.Validate()
	if err == nil {
		t.Fatal("Validate accepted a broken config")
	}
	for _, field := range []string{"ID:", "Datacenter:", "QUICListen:", "ElectionProfile:", "Peers[1]:", "QuorumTimeout:", "MaxWorkflowRetries:", "APIAdvertise:", "Peers: must include"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("Validate error lacks %q:\n%v", field, err)
		}
	}
}
