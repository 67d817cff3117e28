package gate

import (
	"context"
	"errors"
	"fmt"
	"iter"
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
// The status is the gate's own view of the job. The API streams rows
// through PipelineOutputRows; this is the summary, and the rows whole for
// callers that want them so.
func (g *Gate) PipelineOutput(ctx context.Context, jobID, workflow string, rows bool) (*api.PipelineOutput, error) {
	rec, dc, err := g.pipelineDC(jobID, workflow)
	if err != nil {
		return nil, err
	}
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

// PipelineOutputRows implements api.OutputStreamer (the HTML report reads
// the rows so): PipelineOutputPages' rows one by one.
func (g *Gate) PipelineOutputRows(ctx context.Context, jobID, workflow string) (*api.PipelineOutput, iter.Seq[[]string], error) {
	out, pages, err := g.PipelineOutputPages(ctx, jobID, workflow)
	if err != nil {
		return nil, nil, err
	}
	return out, func(yield func([]string) bool) {
		for p := range pages {
			for _, row := range p {
				if !yield(row) {
					return
				}
			}
		}
	}, nil
}

// PipelineOutputPages implements api.OutputPageStreamer: the summary, from
// the output's first page, and its rows page by page as the leader sends
// them, so the gate holds a page, not the output, and its client sees the
// first rows before the last are read. Once rows are out a failure can
// only end them early (the manager's API does the same); it is logged.
func (g *Gate) PipelineOutputPages(ctx context.Context, jobID, workflow string) (*api.PipelineOutput, iter.Seq[[][]string], error) {
	rec, dc, err := g.pipelineDC(jobID, workflow)
	if err != nil {
		return nil, nil, err
	}
	r := &outputReader{g: g, dc: dc, job: jobID, workflow: workflow}
	first, err := r.page(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("output of %s from %s: %w", workflow, dc, err)
	}
	out := api.OutputFromPage(jobID, workflow, first)
	out.Rows = nil
	out.Status = g.jobStatus(&rec, false).Status
	// The pages after the first are read at the client's pace, past the
	// call's timeout (the API writes the rows outside it, as a manager's
	// does): each page is bounded by the dispatch timeout instead, and the
	// API stops ranging when the client leaves.
	pageCtx := context.WithoutCancel(ctx)
	return out, func(yield func([][]string) bool) {
		p := first
		for {
			if len(p.Rows) > 0 && !yield(p.Rows) {
				return
			}
			if r.done {
				return
			}
			if p, err = r.page(pageCtx); err != nil {
				g.log.Warn("pipeline output through the gate ended early", "job_id", jobID, "workflow", workflow,
					"datacenter", dc, "rows", r.given, "total", r.total, "err", err)
				return
			}
		}
	}, nil
}

// pipelineDC is the job's record and the datacenter that runs its
// pipeline workflow.
func (g *Gate) pipelineDC(jobID, workflow string) (wire.GateJobRecord, string, error) {
	rec, _, ok := g.record(jobID)
	if !ok {
		return rec, "", wire.Errorf(wire.CodeNotFound, "job %s not found", jobID)
	}
	if !hasPipeline(rec.Submission.Workflows, workflow) {
		return rec, "", wire.Errorf(wire.CodeNotFound, "job %s has no rainstorm workflow %q", jobID, workflow)
	}
	if len(rec.Leases) == 0 {
		return rec, "", wire.Errorf(wire.CodeUnavailable, "job %s is not placed in a datacenter yet", jobID)
	}
	return rec, rec.Leases[0].Datacenter, nil
}

// readOutput reads every page of a pipeline's output from dc's leader (the
// summary alone without rows).
func (g *Gate) readOutput(ctx context.Context, dc, jobID, workflow string, rows bool) (*api.PipelineOutput, error) {
	r := &outputReader{g: g, dc: dc, job: jobID, workflow: workflow, summary: !rows}
	p, err := r.page(ctx)
	if err != nil {
		return nil, err
	}
	out := api.OutputFromPage(jobID, workflow, p)
	out.Rows = slices.Clip(out.Rows)
	for !r.done {
		if p, err = r.page(ctx); err != nil {
			return nil, err
		}
		out.Rows = append(out.Rows, p.Rows...)
	}
	return out, nil
}

// outputReader reads a pipeline's output from a datacenter's leader page
// by page. It asks for a resume cursor and hands each page's to the next
// request, so the leader continues its merge where it stopped rather than
// reading the output through to the page's offset. A manager that gives
// no cursor (an older one) is read by offset; a cursor refused (a new
// leader holding other rows under it) is dropped and the page asked for by
// offset. By offset, every page must be cut from one output: the same
// Total, starting where the rows given end.
type outputReader struct {
	g                 *Gate
	dc, job, workflow string
	summary           bool

	started bool
	total   uint64 // rows in the output, as the first page counted them
	given   uint64 // rows in the pages read
	cursor  []byte // where the next page starts, when the leader gave one
	done    bool
}

// page reads the next page.
func (r *outputReader) page(ctx context.Context) (*wire.RainstormOutputPage, error) {
	req := &wire.RainstormOutputRequest{Job: r.job, Workflow: r.workflow, Rows: !r.summary, Resume: !r.summary,
		Offset: r.given, Cursor: r.cursor}
	reply, err := r.g.callDCReply(ctx, r.dc, req)
	if len(req.Cursor) > 0 && wire.CodeOf(err) == wire.CodeStaleFence {
		r.g.log.Info("output cursor refused; reading on by offset", "job_id", r.job, "workflow", r.workflow,
			"datacenter", r.dc, "rows", r.given, "err", err)
		req.Cursor = nil
		reply, err = r.g.callDCReply(ctx, r.dc, req)
	}
	if err != nil {
		return nil, err
	}
	p, ok := reply.(*wire.RainstormOutputPage)
	if !ok {
		return nil, fmt.Errorf("%s answered an output request with %T", r.dc, reply)
	}
	if !r.started {
		r.started, r.total = true, p.Total
	} else if p.Total != r.total || p.Offset != r.given {
		return nil, errOutputMoved
	}
	r.given += uint64(len(p.Rows))
	r.cursor = p.Cursor
	switch {
	case r.summary || r.given >= r.total && len(p.Cursor) == 0:
		r.done = true
	case len(p.Rows) == 0:
		return nil, fmt.Errorf("%s sent an empty page at row %d of %d", r.dc, r.given, r.total)
	}
	return p, nil
}
