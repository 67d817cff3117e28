package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"tempest/wire"
)

// PipelineOutput is a RainStorm workflow's output as far as it is durable:
// for a count or sum last stage one key,value row per key sorted by key,
// otherwise the output records in input order. Complete says every last
// stage task's final checkpoint is durable, so the rows are final.
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
	// StageTasks is each stage's size in the epoch the source sends in
	// (source first, 1); Resizes the autoscaling decisions the manager
	// leader took, oldest first (a new leader starts a new list).
	StageTasks []int            `json:"stage_tasks,omitempty"`
	Resizes    []PipelineResize `json:"resizes,omitempty"`
	// AutoscaleHeld is why the leader's autoscaling takes no decision
	// now (empty when it samples): a resize under way, or its record
	// not stored on a majority.
	AutoscaleHeld string `json:"autoscale_held,omitempty"`
}

// PipelineResize is one autoscaling decision: at At, stage Stage went from
// From tasks to To, for the reason and inputs Decision gives.
type PipelineResize struct {
	At       time.Time `json:"at"`
	Stage    string    `json:"stage"`
	From     int       `json:"from"`
	To       int       `json:"to"`
	Decision string    `json:"decision"`
	// Epoch is the epoch the resize starts (the source's count of them).
	Epoch uint64 `json:"epoch,omitempty"`
	// InForce is the time from the decision to the new size in force:
	// the source sending in Epoch and every task of it running, as the
	// leader, which looks five times a second, sees it (0: not yet seen).
	// GroupsMoved is the key groups of the stage that changed owner.
	InForce     time.Duration `json:"in_force_ns,omitempty"`
	GroupsMoved int           `json:"groups_moved,omitempty"`
	// KeysMoved and BytesMoved are the operator state the leader served
	// to the tasks gaining groups (entries, and their encoded size as the
	// store estimates it);
	// Handover the time from the first handover request to the last
	// moving group served whole (0: not complete, or nothing asked).
	KeysMoved  int           `json:"keys_moved,omitempty"`
	BytesMoved int64         `json:"bytes_moved,omitempty"`
	Handover   time.Duration `json:"handover_ns,omitempty"`
}

// PipelineTask is one task of a pipeline: stage 0 is the source.
type PipelineTask struct {
	Stage    int                 `json:"stage"`
	Index    int                 `json:"index"`
	Name     string              `json:"name"` // the stage's name, or "source"
	Status   wire.WorkflowStatus `json:"status"`
	Worker   string              `json:"worker,omitempty"`
	Attempts int                 `json:"attempts"`
	// Records counts records the task took in, RecordsOut those it passed
	// on (as batches to the next stage, or as output rows). For the source:
	// the input records read, and the well-formed ones among them. For a
	// stage: as of its latest durable checkpoint, so each record counts
	// once whatever restarts and resends did, and a finished pipeline's
	// counts agree with its output (a stage takes in what the one before
	// passed on).
	Records    int64 `json:"records"`
	RecordsOut int64 `json:"records_out"`
	Bad        int64 `json:"bad_records,omitempty"`
	// Waiting says why a task that is not placed waits, e.g. "no free
	// core"; empty while it runs.
	Waiting string `json:"waiting,omitempty"`
}

// OutputBackend is implemented by backends that serve pipelines' output:
// managers from their store, gates by asking the datacenter's manager
// leader. Without rows, only the summary (status, tasks, counters) is
// filled in, which is what a live display polls.
type OutputBackend interface {
	PipelineOutput(ctx context.Context, jobID, workflow string, rows bool) (*PipelineOutput, error)
}

// OutputStreamer is implemented by backends that hand a pipeline's rows
// over as they read them (a manager, from its store) rather than in one
// PipelineOutput: the API writes each row as it comes, so neither side
// holds the whole output and its first bytes leave at once. The summary
// is the one PipelineOutput gives without rows; the rows are in output
// order, and the sequence may be ranged over once.
type OutputStreamer interface {
	PipelineOutputRows(ctx context.Context, jobID, workflow string) (*PipelineOutput, iter.Seq[[]string], error)
}

// OutputPageStreamer is implemented by backends that get a pipeline's rows
// a page at a time from elsewhere (a gate, from the datacenter's manager
// leader): the API writes each page as it arrives and flushes it to the
// client before the next is waited for, so the client sees rows while
// later pages are still being read. The pages, in order, are the rows
// PipelineOutput gives; the sequence may be ranged over once.
type OutputPageStreamer interface {
	PipelineOutputPages(ctx context.Context, jobID, workflow string) (*PipelineOutput, iter.Seq[[][]string], error)
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
	summary := r.URL.Query().Get("summary") == "true"
	if ps, ok := s.backend.(OutputPageStreamer); ok && !summary {
		out, pages, err := ps.PipelineOutputPages(ctx, id, workflow)
		if err != nil {
			s.fail(w, r, fmt.Errorf("output of %s in job %s: %w", workflow, id, err))
			return
		}
		s.streamOutput(w, r, out, func(yield func(iter.Seq[[]string]) bool) {
			for p := range pages {
				if !yield(slices.Values(p)) {
					return
				}
			}
		}, format)
		return
	}
	if st, ok := s.backend.(OutputStreamer); ok && !summary {
		out, rows, err := st.PipelineOutputRows(ctx, id, workflow)
		if err != nil {
			s.fail(w, r, fmt.Errorf("output of %s in job %s: %w", workflow, id, err))
			return
		}
		// The rows are written at the client's pace, not within the
		// call's timeout: they are read from memory, and a million of
		// them took longer than the timeout to write.
		s.streamOutput(w, r, out, func(yield func(iter.Seq[[]string]) bool) { yield(rows) }, format)
		return
	}
	out, err := ob.PipelineOutput(ctx, id, workflow, !summary)
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
	if err := writeOutputCSV(&buf, out, slices.Values(out.Rows)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeOutputCSV writes what OutputCSV renders, the rows as they come.
func writeOutputCSV(w io.Writer, out *PipelineOutput, rows iter.Seq[[]string]) error {
	cw := csv.NewWriter(w)
	if len(out.Header) > 0 {
		if err := cw.Write(out.Header); err != nil {
			return fmt.Errorf("output as CSV: %w", err)
		}
		cw.Flush() // the header leaves with the summary, before the rows are read
	}
	for row := range rows {
		if err := cw.Write(row); err != nil {
			return fmt.Errorf("output as CSV: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("output as CSV: %w", err)
	}
	return nil
}

// rowsKey is where writeOutputJSON cuts a summary's JSON to put the rows
// in. Inside a JSON string every quote is escaped, so `,"` never occurs
// in one: the first match is the field itself.
var rowsKey = []byte(`,"rows":[]`)

// writeOutputJSON writes the JSON the API's encoder writes for out with
// rows as its Rows, byte for byte, the rows as they come: the summary is
// encoded with no rows and cut where they go.
func writeOutputJSON(w io.Writer, out *PipelineOutput, rows iter.Seq[[]string]) error {
	o := *out
	o.Rows = [][]string{}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(&o); err != nil {
		return fmt.Errorf("output as JSON: %w", err)
	}
	b := buf.Bytes()
	cut := bytes.Index(b, rowsKey)
	if cut < 0 {
		return fmt.Errorf("output as JSON: no rows field in %.80s", b)
	}
	cut += len(rowsKey) - 1 // after the '['
	if _, err := w.Write(b[:cut]); err != nil {
		return err
	}
	first := true
	for row := range rows {
		rb, err := json.Marshal(row)
		if err != nil {
			return fmt.Errorf("output as JSON: %w", err)
		}
		if !first {
			rb = append([]byte{','}, rb...)
		}
		first = false
		if _, err := w.Write(rb); err != nil {
			return err
		}
	}
	_, err := w.Write(b[cut:])
	return err
}

// streamOutput writes out and its rows, given in pages, as
// pipelineOutput's format asks, row by row through a buffer, flushing what
// is written at once (the summary) and after each page, so the client sees
// the answer start before the rows are all read, and each page's rows
// before the next page is waited for.
func (s *Server) streamOutput(w http.ResponseWriter, r *http.Request, out *PipelineOutput, pages iter.Seq[iter.Seq[[]string]], format string) {
	h := w.Header()
	if format == "csv" {
		h.Set("Content-Type", "text/csv; charset=utf-8")
	} else {
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
	}
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	bw := bufio.NewWriterSize(w, 64<<10)
	gone := r.Context()
	sent := func(yield func([]string) bool) {
		// The head is out before the first row is read.
		if bw.Flush() != nil || rc.Flush() != nil {
			return
		}
		for rows := range pages {
			for row := range rows {
				if gone.Err() != nil || !yield(row) {
					return // the client left: stop reading the store
				}
			}
			if bw.Flush() != nil || rc.Flush() != nil {
				return
			}
		}
	}
	var err error
	if format == "csv" {
		err = writeOutputCSV(bw, out, sent)
	} else {
		err = writeOutputJSON(bw, out, sent)
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		// The status is out: the client sees a body cut short.
		s.log.Debug("pipeline output written in part", "job_id", out.JobID, "workflow", out.Workflow, "err", err)
	}
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

// OutputSummary fetches a pipeline workflow's status, tasks and counters
// without its rows (GET …/results?workflow=NAME&summary=true).
func (c *Client) OutputSummary(ctx context.Context, id, workflow string) (*PipelineOutput, error) {
	a, err := c.exchange(ctx, request{method: http.MethodGet, path: jobPath(id, "/results"),
		query: url.Values{"format": {"json"}, "workflow": {workflow}, "summary": {"true"}}, idempotent: true})
	if err != nil {
		return nil, err
	}
	var out PipelineOutput
	if err := json.Unmarshal(a.body, &out); err != nil {
		return nil, fmt.Errorf("decode output summary of %s: %w", workflow, err)
	}
	return &out, nil
}

// OutputPageBudget bounds the row bytes of one output page between a gate
// and a manager (as OutputRowSize counts them): a tenth of the largest
// message, leaving room for the summary and the encoding's overhead.
const OutputPageBudget = wire.MaxMessageSize / 10

// OutputRowSize is what a row counts against OutputPageBudget.
func OutputRowSize(row []string) int {
	n := 8
	for _, f := range row {
		n += len(f) + 8
	}
	return n
}

// OutputPage cuts the page of out that starts at row offset: the summary
// and as many rows as fit the page budget (at least one, so a huge row
// still moves).
func OutputPage(out *PipelineOutput, offset uint64) *wire.RainstormOutputPage {
	return OutputPageOf(out, slices.Values(out.Rows), offset)
}

// OutputPageOf is OutputPage with out's rows given as they are read: the
// rows before offset and after the page are counted and dropped, so the
// page's memory is the page's.
func OutputPageOf(out *PipelineOutput, rows iter.Seq[[]string], offset uint64) *wire.RainstormOutputPage {
	p := OutputPageHead(out)
	size, full := 0, false
	for row := range rows {
		p.Total++
		if p.Total <= offset || full {
			continue
		}
		n := OutputRowSize(row)
		if len(p.Rows) > 0 && size+n > OutputPageBudget {
			full = true
			continue
		}
		size += n
		p.Rows = append(p.Rows, row)
	}
	p.Offset = min(offset, p.Total)
	return p
}

// OutputPageHead is a page of out with its summary and no rows.
func OutputPageHead(out *PipelineOutput) *wire.RainstormOutputPage {
	p := &wire.RainstormOutputPage{Status: out.Status, Complete: out.Complete, Header: out.Header,
		BadRecords: out.BadRecords, BadFirst: out.BadFirst, Restarts: out.Restarts, StageTasks: out.StageTasks}
	for _, r := range out.Resizes {
		p.Resizes = append(p.Resizes, wire.RainstormResize{At: r.At.UnixNano(), Stage: r.Stage, From: r.From, To: r.To, Decision: r.Decision,
			Epoch: r.Epoch, InForce: int64(r.InForce), GroupsMoved: r.GroupsMoved, KeysMoved: r.KeysMoved, BytesMoved: r.BytesMoved,
			Handover: int64(r.Handover)})
	}
	for _, t := range out.Tasks {
		p.Tasks = append(p.Tasks, wire.RainstormOutputTask{Stage: t.Stage, Index: t.Index, Name: t.Name, Status: t.Status,
			Worker: t.Worker, Attempts: t.Attempts, Records: t.Records, RecordsOut: t.RecordsOut, Bad: t.Bad, Waiting: t.Waiting})
	}
	return p
}

// OutputFromPage is the summary of a page as a PipelineOutput, with the
// page's rows.
func OutputFromPage(jobID, workflow string, p *wire.RainstormOutputPage) *PipelineOutput {
	out := &PipelineOutput{JobID: jobID, Workflow: workflow, Status: p.Status, Complete: p.Complete, Header: p.Header,
		BadRecords: p.BadRecords, BadFirst: p.BadFirst, Restarts: p.Restarts, Rows: p.Rows, StageTasks: p.StageTasks}
	for _, r := range p.Resizes {
		out.Resizes = append(out.Resizes, PipelineResize{At: time.Unix(0, r.At).UTC(), Stage: r.Stage, From: r.From, To: r.To, Decision: r.Decision,
			Epoch: r.Epoch, InForce: time.Duration(r.InForce), GroupsMoved: r.GroupsMoved, KeysMoved: r.KeysMoved, BytesMoved: r.BytesMoved,
			Handover: time.Duration(r.Handover)})
	}
	for _, t := range p.Tasks {
		out.Tasks = append(out.Tasks, PipelineTask{Stage: t.Stage, Index: t.Index, Name: t.Name, Status: t.Status,
			Worker: t.Worker, Attempts: t.Attempts, Records: t.Records, RecordsOut: t.RecordsOut, Bad: t.Bad, Waiting: t.Waiting})
	}
	return out
}

// workflowQuery is the results request's workflow, if any.
func workflowQuery(r *http.Request) string { return strings.TrimSpace(r.URL.Query().Get("workflow")) }
