package gate

import (
	"context"
	"strings"
	"testing"
	"time"

	"tempest/jobs"
	"tempest/wire"
	"tempest/workflow"
)

// A gate refuses at its door what every manager would refuse, with the
// managers' own answer (code and words: a manager's intake answers
// jobs.Refusal of Validate with its registry), and places nothing; what
// only a registry can judge (the workflow types) is left to the
// datacenters.
func TestGateRefusesWhatManagersRefuse(t *testing.T) {
	_, g, _, _ := oneGate(t, time.Minute)
	params, err := wire.Marshal(&workflow.SleepParams{Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	spec := func(name string) wire.WorkflowSpec {
		return wire.WorkflowSpec{Name: name, Type: "sleep", Cores: 1, Params: params}
	}
	job := func(edit func(*wire.JobSubmission)) *wire.JobSubmission {
		s := &wire.JobSubmission{Name: "door", DatacenterCount: 2, Workflows: []wire.WorkflowSpec{spec("a")}}
		edit(s)
		return s
	}
	shard := func(n, of int) wire.WorkflowSpec {
		s := spec("s")
		s.Shard, s.Shards = n, of
		return s
	}
	reg := workflow.DefaultRegistry()
	for _, tc := range []struct {
		name   string
		sub    *wire.JobSubmission
		refuse bool
	}{
		{"an id the API could not read back", job(func(s *wire.JobSubmission) { s.JobID = "job#1" }), true},
		{"an id too long", job(func(s *wire.JobSubmission) { s.JobID = strings.Repeat("a", jobs.MaxIDLen+1) }), true},
		{"no workflows", job(func(s *wire.JobSubmission) { s.Workflows = nil }), true},
		{"a negative timeout", job(func(s *wire.JobSubmission) { s.Timeout = -time.Second }), true},
		{"duplicate names", job(func(s *wire.JobSubmission) { s.Workflows = append(s.Workflows, spec("a")) }), true},
		{"a threshold that does not parse", job(func(s *wire.JobSubmission) {
			s.Workflows[0].Thresholds = []wire.Threshold{{Expr: "p(99) <> 1ms"}}
		}), true},
		{"shards out of order", job(func(s *wire.JobSubmission) { s.Workflows = []wire.WorkflowSpec{shard(2, 2), shard(1, 2)} }), true},
		{"a type only a datacenter's registry knows", job(func(s *wire.JobSubmission) { s.Workflows[0].Type = "teleport" }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			managers := jobs.Refusal(jobs.Of(tc.sub).Validate(reg))
			if managers == nil {
				t.Fatal("a manager would accept this case")
			}
			ack, err := g.Submit(context.Background(), tc.sub)
			if !tc.refuse {
				if err != nil || !ack.Accepted {
					t.Fatalf("submit: %+v, %v; want it placed for the datacenters to judge", ack, err)
				}
				return
			}
			if wire.CodeOf(err) != wire.CodeOf(managers) || err.Error() != managers.Error() {
				t.Fatalf("submit: %+v, %v; want the managers' answer %v", ack, err, managers)
			}
		})
	}
	if all, _ := g.Jobs(context.Background()); len(all) != 1 {
		t.Fatalf("the gate keeps %d jobs; want only the one a datacenter judges", len(all))
	}
}
