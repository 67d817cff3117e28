package manager

import (
	"strings"
	"testing"

	"tempest/internal/store"
	"tempest/wire"
)

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
