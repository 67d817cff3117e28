package gate

import (
	"strings"
	"testing"

	"tempest/rainstorm"
	"tempest/wire"
)

// A job with a pipeline runs in one datacenter: asked for two (by count or
// by name) it is refused with the reason; other jobs may span several.
func TestPipelineRunsInOneDatacenter(t *testing.T) {
	pipe := []wire.WorkflowSpec{{Name: "p", Type: rainstorm.TypeName}}
	for _, sub := range []wire.JobSubmission{
		{Workflows: pipe, DatacenterCount: 2},
		{Workflows: pipe, Datacenters: []string{"east", "west"}},
	} {
		err := checkPipelineDatacenters(&sub)
		if wire.CodeOf(err) != wire.CodeRejected || !strings.Contains(err.Error(), "runs in one datacenter") {
			t.Errorf("%+v: %v", sub, err)
		}
	}
	for _, sub := range []wire.JobSubmission{
		{Workflows: pipe, DatacenterCount: 1},
		{Workflows: pipe, Datacenters: []string{"east"}},
		{Workflows: []wire.WorkflowSpec{{Name: "h", Type: "http"}}, DatacenterCount: 2},
	} {
		if err := checkPipelineDatacenters(&sub); err != nil {
			t.Errorf("%+v refused: %v", sub, err)
		}
	}
}
