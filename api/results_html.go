package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"tempest/internal/report"
	"tempest/wire"
)

// jobResultsHTML answers GET /v1/jobs/{id}/results?format=html: the report
// package's self-contained page. The job's status (name, duration,
// threshold verdict) completes the header when the backend has it; a
// failure there only thins the header, it does not fail the download.
func (s *Server) jobResultsHTML(ctx context.Context, w http.ResponseWriter, r *http.Request, res *Results) {
	var st *JobStatus
	if got, err := s.backend.Job(ctx, res.JobID); err == nil {
		st = got
	} else if !errors.Is(err, context.Canceled) {
		s.log.Debug("job status for the HTML report", "job_id", res.JobID, "err", err)
	}
	j := ReportJob(res, st, s.cfg.Now())
	s.addPipelines(ctx, j, res)
	var buf bytes.Buffer
	if err := report.Render(&buf, j); err != nil {
		s.fail(w, r, fmt.Errorf("results of job %s as HTML: %w", res.JobID, err))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s-report.html"`, res.JobID))
	h.Set("X-Content-Type-Options", "nosniff")
	// The page has no script and loads nothing; say so, so a browser
	// refuses anything an escaping bug might let through.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
}

// reportRows is how many of a pipeline's output rows the report shows: a
// glance at the output, not the output (`tempest results --workflow` is).
const reportRows = 50

// addPipelines fills in each RainStorm workflow's stages and the head of
// its output, where this node serves pipelines' output. A failure leaves
// that workflow without them (the rest of the report stands) and is logged.
func (s *Server) addPipelines(ctx context.Context, j *report.Job, res *Results) {
	ob, ok := s.backend.(OutputBackend)
	if !ok {
		return
	}
	for i, ws := range res.Workflows {
		if ws.Type != "rainstorm" {
			continue
		}
		out, err := reportOutput(ctx, ob, res.JobID, ws.Name)
		if err != nil {
			s.log.Debug("pipeline output for the HTML report", "job_id", res.JobID, "workflow", ws.Name, "err", err)
			continue
		}
		j.Workflows[i].Stages, j.Workflows[i].Output = reportPipeline(out, reportRows)
	}
}

// reportOutput is a pipeline's output for the report: from a backend that
// streams its rows, the first reportRows of them and the count of the rest
// (the report shows no more), else the whole output.
func reportOutput(ctx context.Context, ob OutputBackend, jobID, workflow string) (*reportedOutput, error) {
	st, ok := ob.(OutputStreamer)
	if !ok {
		out, err := ob.PipelineOutput(ctx, jobID, workflow, true)
		if err != nil {
			return nil, err
		}
		return &reportedOutput{PipelineOutput: out, total: len(out.Rows)}, nil
	}
	out, rows, err := st.PipelineOutputRows(ctx, jobID, workflow)
	if err != nil {
		return nil, err
	}
	r := &reportedOutput{PipelineOutput: out}
	out.Rows = nil
	for row := range rows {
		if r.total < reportRows {
			out.Rows = append(out.Rows, row)
		}
		r.total++
	}
	return r, nil
}

// reportedOutput is a pipeline's output as the report reads it: its rows
// may be only the first of total.
type reportedOutput struct {
	*PipelineOutput
	total int
}

// reportPipeline sums a pipeline's tasks by stage and keeps the first rows
// of its output.
func reportPipeline(out *reportedOutput, rows int) ([]report.Stage, *report.Output) {
	var stages []report.Stage
	for _, t := range out.Tasks {
		for len(stages) <= t.Stage {
			stages = append(stages, report.Stage{})
		}
		st := &stages[t.Stage]
		st.Name = t.Name
		st.Tasks++
		st.Records += t.Records
		st.RecordsOut += t.RecordsOut
		st.Bad += t.Bad
		st.Restarts += max(t.Attempts-1, 0)
	}
	return stages, &report.Output{Header: out.Header, Rows: out.Rows[:min(rows, len(out.Rows))],
		Total: out.total, Complete: out.Complete}
}

// ReportJob converts results (and the job's status, if known; st may be
// nil) into the report's view of the job. now stamps the report.
func ReportJob(res *Results, st *JobStatus, now time.Time) *report.Job {
	j := &report.Job{ID: res.JobID, Status: string(res.Status), Generated: now}
	if st != nil {
		j.Name = st.Name
		j.Error = st.Error
		j.Duration = time.Duration(st.ElapsedSeconds * float64(time.Second))
		j.ThresholdsFailed = st.ThresholdsFailed
	}
	for _, ws := range res.Workflows {
		j.Completed += ws.CompletedCount
		j.Failed += ws.FailedCount
		j.Workflows = append(j.Workflows, reportWorkflow(&ws))
		for _, t := range ws.Thresholds {
			j.ThresholdsFailed = j.ThresholdsFailed || !t.Passed
		}
	}
	return j
}

func reportWorkflow(ws *WorkflowStatus) report.Workflow {
	wf := report.Workflow{Name: ws.Name, Type: ws.Type, Status: string(ws.Status),
		Completed: ws.CompletedCount, Failed: ws.FailedCount, Dropped: ws.DroppedIterations, Error: ws.Error,
		ElapsedSeconds: ws.ElapsedSeconds}
	for _, t := range ws.Thresholds {
		wf.Thresholds = append(wf.Thresholds, report.Threshold{Expr: t.Expr, Step: t.Step, Passed: t.Passed, Actual: t.Actual})
	}
	series := ws.Series
	if len(series) > wire.MaxSeriesEntries { // a forwarded or foreign answer; keep the newest
		series = series[len(series)-wire.MaxSeriesEntries:]
	}
	for _, p := range series {
		wf.Series = append(wf.Series, report.Second{At: p.Second, Completed: p.Completed, Failed: p.Failed,
			Dropped: p.Dropped, VUs: p.VUs, P50Ms: p.P50Ms, P99Ms: p.P99Ms})
	}
	for _, s := range ws.Steps {
		st := report.Step{Name: s.Name, Completed: s.Completed, Failed: s.Failed, P50Ms: s.P50Ms, P90Ms: s.P90Ms,
			P99Ms: s.P99Ms, MaxMs: s.MaxMs, CorrectedP50Ms: s.CorrectedP50Ms, CorrectedP99Ms: s.CorrectedP99Ms}
		for _, d := range s.Distribution {
			st.Distribution = append(st.Distribution, report.Percentile{P: d.Percentile, Ms: d.Ms})
		}
		wf.Steps = append(wf.Steps, st)
	}
	return wf
}
