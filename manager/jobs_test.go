package manager

import (
	"errors"
	"math"
	"strings"
	"testing"

	"tempest/store"
	"tempest/wire"
)

func TestFenceTokens(t *testing.T) {
	for _, tc := range []struct {
		term uint64
		seq  uint32
		want uint64
	}{
		{1, 1, 1<<32 | 1},
		{7, 0, 7 << 32},
		{2, math.MaxUint32, 2<<32 | math.MaxUint32},
	} {
		tok := fenceToken(tc.term, tc.seq)
		if tok != tc.want || fenceTerm(tok) != tc.term {
			t.Errorf("fenceToken(%d, %d) = %#x (term %d), want %#x", tc.term, tc.seq, tok, fenceTerm(tok), tc.want)
		}
	}
	// Any token of a later term beats every token of an earlier one.
	if fenceToken(3, 0) <= fenceToken(2, math.MaxUint32) {
		t.Fatal("a later term's first token is not above an earlier term's last")
	}
	lt := newLeaderTerm(t.Context(), 5)
	a, _ := lt.nextFence()
	b, _ := lt.nextFence()
	if b <= a || fenceTerm(a) != 5 {
		t.Fatalf("tokens %#x then %#x", a, b)
	}
	lt.seq.Store(math.MaxUint32)
	if _, err := lt.nextFence(); !errors.Is(err, errFenceExhausted) {
		t.Fatalf("past the last sequence: %v", err)
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
