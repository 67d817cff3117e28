package jobs_test

import (
	"strings"
	"testing"
	"time"

	"tempest/jobs"
	"tempest/wire"
	"tempest/workflow"
)

func nap(t *testing.T, name string) wire.WorkflowSpec {
	t.Helper()
	params, err := wire.Marshal(&workflow.SleepParams{Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return wire.WorkflowSpec{Name: name, Type: "sleep", Params: params, Cores: 1}
}

func TestValidate(t *testing.T) {
	reg := workflow.DefaultRegistry()
	many := make([]wire.WorkflowSpec, jobs.MaxWorkflows+1)
	for i := range many {
		many[i] = nap(t, "w"+strings.Repeat("x", i%7)+string(rune('a'+i%26)))
	}
	shard := func(n, of int) wire.WorkflowSpec {
		s := nap(t, "s")
		s.Shard, s.Shards = n, of
		return s
	}
	bad := nap(t, "b")
	bad.Thresholds = []wire.Threshold{{Expr: "p(99) <> 1ms"}}
	for _, tc := range []struct {
		name string
		sub  wire.JobSubmission
		want string // substring of the error; "" = valid
	}{
		{"valid", wire.JobSubmission{JobID: "job-1", Workflows: []wire.WorkflowSpec{nap(t, "a"), nap(t, "b")}}, ""},
		{"valid split", wire.JobSubmission{Workflows: []wire.WorkflowSpec{shard(1, 2), shard(2, 2)}}, ""},
		{"no workflows", wire.JobSubmission{}, "no workflows"},
		{"too many", wire.JobSubmission{Workflows: many}, "more than 1024"},
		{"negative timeout", wire.JobSubmission{Timeout: -time.Second, Workflows: []wire.WorkflowSpec{nap(t, "a")}}, "negative timeout"},
		{"id with a space", wire.JobSubmission{JobID: "a b", Workflows: []wire.WorkflowSpec{nap(t, "a")}}, "space"},
		{"id too long", wire.JobSubmission{JobID: strings.Repeat("a", jobs.MaxIDLen+1), Workflows: []wire.WorkflowSpec{nap(t, "a")}}, "more than 128"},
		{"duplicate name", wire.JobSubmission{Workflows: []wire.WorkflowSpec{nap(t, "a"), nap(t, "a")}}, `duplicate name "a"`},
		{"shard missing", wire.JobSubmission{Workflows: []wire.WorkflowSpec{shard(1, 3), shard(2, 3)}}, "but not the next"},
		{"shards out of order", wire.JobSubmission{Workflows: []wire.WorkflowSpec{shard(2, 2), shard(1, 2)}}, "does not follow"},
		{"unknown type", wire.JobSubmission{Workflows: []wire.WorkflowSpec{{Name: "x", Type: "nope"}}}, "workflows[0]"},
		{"bad threshold", wire.JobSubmission{Workflows: []wire.WorkflowSpec{bad}}, "thresholds[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := jobs.Of(&tc.sub).Validate(reg)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want it to say %q", err, tc.want)
			}
		})
	}
}

// CheckID is the one job-id rule: what a submission may carry is what the
// API's path reads back. The cases from the API's own check (moved here)
// and the ids the product makes pass; what a URL path cannot carry as it
// is, or that is empty or too long, does not.
func TestCheckID(t *testing.T) {
	for id, ok := range map[string]bool{
		"job-1": true, "01HX:abc_def.2": true, "": false, "a b": false, "a/b": false,
		strings.Repeat("a", jobs.MaxIDLen): true, strings.Repeat("a", jobs.MaxIDLen+1): false,
		jobs.NewID(0): true, jobs.NewID(^uint64(0)): true, // the snowflake's ids
		"j-" + strings.Repeat("K", 64): true, // an idempotency key's
		"run:2026.11_a":                true,
		"job#1":                        false, "job?x=1": false, "job%41": false, "jöb": false,
		"tab\there": false, "new\nline": false, "j\x00": false,
	} {
		if err := jobs.CheckID(id); (err == nil) != ok {
			t.Errorf("CheckID(%q) = %v, want ok=%v", id, err, ok)
		}
	}
}

// ValidateShape is Validate without the registry: it refuses every
// registry-free problem Validate refuses, with the same words, and leaves
// the types and params to the datacenters.
func TestValidateShape(t *testing.T) {
	reg := workflow.DefaultRegistry()
	bad := nap(t, "b")
	bad.Thresholds = []wire.Threshold{{Expr: "p(99) <> 1ms"}}
	for _, tc := range []struct {
		name  string
		sub   wire.JobSubmission
		shape bool // ValidateShape refuses it too
	}{
		{"no workflows", wire.JobSubmission{}, true},
		{"odd id", wire.JobSubmission{JobID: "job#1", Workflows: []wire.WorkflowSpec{nap(t, "a")}}, true},
		{"negative timeout", wire.JobSubmission{Timeout: -time.Second, Workflows: []wire.WorkflowSpec{nap(t, "a")}}, true},
		{"duplicate name", wire.JobSubmission{Workflows: []wire.WorkflowSpec{nap(t, "a"), nap(t, "a")}}, true},
		{"bad threshold", wire.JobSubmission{Workflows: []wire.WorkflowSpec{bad}}, true},
		{"unknown type", wire.JobSubmission{Workflows: []wire.WorkflowSpec{{Name: "x", Type: "nope"}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			full := jobs.Of(&tc.sub).Validate(reg)
			shape := jobs.Of(&tc.sub).ValidateShape()
			if full == nil {
				t.Fatal("Validate accepted it")
			}
			switch {
			case tc.shape && (shape == nil || shape.Error() != full.Error()):
				t.Fatalf("ValidateShape: %v; want Validate's %v", shape, full)
			case !tc.shape && shape != nil:
				t.Fatalf("ValidateShape: %v; want the type left to the registry", shape)
			}
			if r := jobs.Refusal(shape); tc.shape && (wire.CodeOf(r) != wire.CodeRejected || r.Error() == "") {
				t.Fatalf("Refusal: %v; want a rejection", r)
			}
		})
	}
	if jobs.Refusal(nil) != nil {
		t.Fatal("Refusal(nil) is not nil")
	}
}
