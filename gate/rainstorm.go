package gate

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"tempest/api"
	"tempest/rainstorm"
	"tempest/wire"
)

// RainStorm pipelines through a gate. A pipeline's output is one pass over
// its input, so a job with a pipeline runs in one datacenter; its output
// lives in that datacenter's managers' checkpoint store, and the gate reads
// it from their leader page by page (wire.RainstormOutputRequest).

// outputRestarts bounds how often a read starts over because the output
// grew between its pages (a running pipeline publishing rows).
const outputRestarts = 5

// errOutputMoved: the output grew while it was read page by page.
var errOutputMoved = errors.New("the output grew while it was read")

// hasPipeline reports whether specs hold a rainstorm workflow (named name,
// when name is not empty).
func hasPipeline(specs []wire.WorkflowSpec, name string) bool {
	return slices.ContainsFunc(specs, func(s wire.WorkflowSpec) bool {
		return s.Type == rainstorm.TypeName && (name == "" || s.Name == name)
	})
}

// checkPipelineDatacenters refuses a job with a pipeline that asks for more
// than one datacenter: each would run the whole pipeline, and its output
// would be counted once per datacenter.
func checkPipelineDatacenters(sub *wire.JobSubmission) error {
	if !hasPipeline(sub.Workflows, "") || (len(sub.Datacenters) <= 1 && sub.DatacenterCount <= 1) {
		return nil
	}
	n := max(len(sub.Datacenters), sub.DatacenterCount)
	return wire.Errorf(wire.CodeRejected,
		"invalid job: a job with a rainstorm workflow runs in one datacenter (its output is one pass over its input), not %d: set datacenters: 1 or name one", n)
}

// PipelineOutput implements api.OutputBackend: the output of a pipeline as
// the leader of the datacenter that runs it holds it, read page by page.
// The status is the gate's own view of the job.
func (g *Gate) PipelineOutput(ctx context.Context, jobID, workflow string, rows bool) (*api.PipelineOutput, error) {
	rec, _, ok := g.record(jobID)
	if !ok {
		return nil, wire.Errorf(wire.CodeNotFound, "job %s not found", jobID)
	}
	if !hasPipeline(rec.Submission.Workflows, workflow) {
		return nil, wire.Errorf(wire.CodeNotFound, "job %s has no rainstorm workflow %q", jobID, workflow)
	}
	if len(rec.Leases) == 0 {
		return nil, wire.Errorf(wire.CodeUnavailable, "job %s is not placed in a datacenter yet", jobID)
	}
	dc := rec.Leases[0].Datacenter
	var err error
	for range outputRestarts {
		var out *api.PipelineOutput
		out, err = g.readOutput(ctx, dc, jobID, workflow, rows)
		if errors.Is(err, errOutputMoved) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("output of %s from %s: %w", workflow, dc, err)
		}
		out.Status = g.jobStatus(&rec, false).Status
		return out, nil
	}
	return nil, wire.Errorf(wire.CodeUnavailable, "output of %s from %s: %v %d times in a row; ask again", workflow, dc, err, outputRestarts)
}

// readOutput reads every page of a pipeline's output from dc's leader; all
// pages must be cut from one output (the same Total).
func (g *Gate) readOutput(ctx context.Context, dc, jobID, workflow string, rows bool) (*api.PipelineOutput, error) {
	var out *api.PipelineOutput
	var total uint64
	for {
		req := &wire.RainstormOutputRequest{Job: jobID, Workflow: workflow, Rows: rows}
		if out != nil {
			req.Offset = uint64(len(out.Rows))
		}
		reply, err := g.callDCReply(ctx, dc, req)
		if err != nil {
			return nil, err
		}
		p, ok := reply.(*wire.RainstormOutputPage)
		if !ok {
			return nil, fmt.Errorf("%s answered an output request with %T", dc, reply)
		}
		if out == nil {
			out, total = api.OutputFromPage(jobID, workflow, p), p.Total
			out.Rows = slices.Clip(out.Rows)
		} else {
			if p.Total != total || p.Offset != req.Offset {
				return nil, errOutputMoved
			}
			out.Rows = append(out.Rows, p.Rows...)
		}
		switch {
		case !rows || uint64(len(out.Rows)) >= total:
			return out, nil
		case len(p.Rows) == 0:
			return nil, fmt.Errorf("%s sent an empty page at row %d of %d", dc, len(out.Rows), total)
		}
	}
}
