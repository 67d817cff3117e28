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
