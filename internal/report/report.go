package report

import (
	"bytes"
	"fmt"
	"io"
	"time"
)

// Job is what the report shows. Latencies are milliseconds.
type Job struct {
	ID     string
	Name   string
	Status string
	// Duration is the job's wall time so far (zero if unknown).
	Duration  time.Duration
	Completed int64
	Failed    int64
	Error     string
	// ThresholdsFailed: some threshold failed (the CLI exits 1 for it).
	ThresholdsFailed bool
	Workflows        []Workflow
	// Generated is when the report was made, shown in its footer.
	Generated time.Time
}

// Workflow is one workflow of the job.
type Workflow struct {
	Name       string
	Type       string
	Status     string
	Completed  int64
	Failed     int64
	Dropped    int64
	Error      string
	Thresholds []Threshold
	// Series is the run's per-second points, oldest first; may be empty
	// (the run has not ended, or its worker predates series).
	Series []Second
	Steps  []Step
	// ElapsedSeconds is the run's time on its worker (zero if unknown); a
	// last second of Series that it does not cover whole is partial.
	ElapsedSeconds float64
	// Stages and Output are a RainStorm pipeline's: its stages' counters
	// and the first rows of its output (nil when not a pipeline).
	Stages []Stage
	Output *Output
}

// Stage is one stage of a pipeline, its tasks' counters summed; stage 0
// is the source.
type Stage struct {
	Name       string
	Tasks      int
	Records    int64 // taken in
	RecordsOut int64 // passed on, or output
	Bad        int64
	Restarts   int
}

// Output is the head of a pipeline's output.
type Output struct {
	Header   []string
	Rows     [][]string // the first rows only
	Total    int        // rows in the whole output
	Complete bool       // every last-stage task finished: the rows are final
}

// Threshold is one threshold's verdict.
type Threshold struct {
	Expr   string
	Step   string
	Passed bool
	Actual string
}

// Second is one second of a run: [At, At+1) seconds from its start.
type Second struct {
	At        int64
	Completed int64
	Failed    int64
	Dropped   int64
	VUs       int
	P50Ms     float64
	P99Ms     float64
}

// Step is one step's summary and latency distribution.
type Step struct {
	Name                string
	Completed           int64
	Failed              int64
	P50Ms, P90Ms, P99Ms float64
	MaxMs               float64
	CorrectedP50Ms      float64
	CorrectedP99Ms      float64
	Distribution        []Percentile
}

// Percentile is the latency at one percentile (0..100).
type Percentile struct {
	P  float64
	Ms float64
}

// Render writes j's report to w as one HTML document.
func Render(w io.Writer, j *Job) error {
	v := newView(j)
	// Render into a buffer first so a template error never leaves half a
	// page on an HTTP response that has already said 200.
	var buf bytes.Buffer
	if err := page.Execute(&buf, v); err != nil {
		return fmt.Errorf("render report of job %s: %w", j.ID, err)
	}
	_, err := buf.WriteTo(w)
	return err
}
