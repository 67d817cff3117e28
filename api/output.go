package api

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"tempest/wire"
)

// PipelineOutput is a RainStorm workflow's output as far as it is durable:
// for a count or sum last stage one key,value row per key sorted by key,
// otherwise the output records in input order. Complete says every last
// stage task has finished, so the rows are final.
type PipelineOutput struct {
	JobID      string         `json:"job_id"`
	Workflow   string         `json:"workflow"`
	Status     wire.JobStatus `json:"status"`
	Complete   bool           `json:"complete"`
	Header     []string       `json:"header,omitempty"`
	Rows       [][]string     `json:"rows"`
	BadRecords uint64         `json:"bad_records"`
	// BadFirst are the first malformed input records' numbers (1-based).
	BadFirst []uint64       `json:"bad_first,omitempty"`
	Restarts int            `json:"restarts"`
	Tasks    []PipelineTask `json:"tasks"`
}

// PipelineTask is one task of a pipeline: stage 0 is the source.
type PipelineTask struct {
	Stage    int                 `json:"stage"`
	Index    int                 `json:"index"`
	Name     string              `json:"name"` // the stage's name, or "source"
	Status   wire.WorkflowStatus `json:"status"`
	Worker   string              `json:"worker,omitempty"`
	Attempts int                 `json:"attempts"`
	// Records counts records the task took in (read, for the source).
	Records int64 `json:"records"`
	Bad     int64 `json:"bad_records,omitempty"`
}

// OutputBackend is implemented by backends that run pipelines (managers).
type OutputBackend interface {
	PipelineOutput(ctx context.Context, jobID, workflow string) (*PipelineOutput, error)
}

// pipelineOutput serves GET /v1/jobs/{id}/results?workflow=NAME.
func (s *Server) pipelineOutput(w http.ResponseWriter, r *http.Request, id, workflow, format string) {
	ob, ok := s.backend.(OutputBackend)
	if !ok {
		writeErrorBody(w, http.StatusNotFound, ErrorBody{Code: CodeNotFound, Error: "this node does not run pipelines; ask a manager"})
		return
	}
	ctx, cancel := s.callContext(r)
	defer cancel()
	out, err := ob.PipelineOutput(ctx, id, workflow)
	if err != nil {
		s.fail(w, r, fmt.Errorf("output of %s in job %s: %w", workflow, id, err))
		return
	}
	if out.Rows == nil {
		out.Rows = [][]string{}
	}
	if format != "csv" {
		writeJSON(w, http.StatusOK, out)
		return
	}
	b, err := OutputCSV(out)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// OutputCSV renders a pipeline's output: its header (when the columns have
// names) and one line per row.
func OutputCSV(out *PipelineOutput) ([]byte, error) {
	var buf bytes.Buffer
	cw := csv.NewWriter(&buf)
	if len(out.Header) > 0 {
		if err := cw.Write(out.Header); err != nil {
			return nil, err
		}
	}
	if err := cw.WriteAll(out.Rows); err != nil {
		return nil, fmt.Errorf("output as CSV: %w", err)
	}
	return buf.Bytes(), nil
}

// Output downloads a pipeline workflow's output as "json" or "csv".
func (c *Client) Output(ctx context.Context, id, workflow, format string) ([]byte, error) {
	if format == "" {
		format = "json"
	}
	if format != "json" && format != "csv" {
		return nil, fmt.Errorf("output format %q: want json or csv", format)
	}
	a, err := c.exchange(ctx, request{method: http.MethodGet, path: jobPath(id, "/results"),
		query: url.Values{"format": {format}, "workflow": {workflow}}, idempotent: true})
	if err != nil {
		return nil, err
	}
	return a.body, nil
}

// workflowQuery is the results request's workflow, if any.
func workflowQuery(r *http.Request) string { return strings.TrimSpace(r.URL.Query().Get("workflow")) }
