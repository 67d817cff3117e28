package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"tempest/api"
	"tempest/wire"
)

// plainInterval is how often the plain (non-terminal) display prints when
// nothing but the counts changed.
const plainInterval = 5 * time.Second

// ANSI sequences of the live display: the block is redrawn from its first
// line, each line cleared before it is written, and anything below the new
// block (when it shrank) erased.
const (
	ansiUp        = "\x1b[%dA"
	ansiClearLine = "\r\x1b[2K"
	ansiClearDown = "\x1b[J"
)

// display shows a job's progress while it runs. On a terminal it is a block
// of lines redrawn in place: the job (status, elapsed, remaining, current
// rate, errors), a line per workflow (its rate and p50/p99 over the newest
// second, errors) and, when statuses come from more than one datacenter, a
// line per datacenter. Elsewhere (a pipe, a CI log) the same lines are
// printed plainly, without escapes or carriage returns, when the status
// changes and every plainInterval otherwise. The block always ends with a
// newline, so whatever is printed after the last update starts on a line of
// its own.
//
// A gate sends one status merged over the job's datacenters, with a line
// per datacenter in Datacenters: those lines are drawn from it, each with a
// rate of its own. Statuses without Datacenters are kept by their
// Datacenter, so a stream that interleaves several datacenters' statuses
// also renders as one job with a line each.
type display struct {
	w     io.Writer
	tty   bool
	width int // terminal columns; 0 when unknown (no truncation)
	now   func() time.Time

	dcs   map[string]*dcView
	order []string                 // datacenters in the order first seen
	pipes map[string]*pipelineView // RainStorm workflows by name (rainstorm_watch.go)

	drawn      int // lines of the live block on screen
	printed    bool
	lastPrint  time.Time
	lastStatus string
	lastLines  int
}

// dcView is the newest status from one datacenter and the rates derived
// from the statuses before it.
type dcView struct {
	st  api.JobStatus
	job rateMeter
	wfs map[string]*rateMeter // by workflow id
	// parts are the rates of the datacenters a gate's merged status
	// lists, by name.
	parts map[string]*rateMeter
	// placed is where each workflow last ran, by workflow id and name, so
	// a retry is told as it happens: which worker was lost, where the
	// workflow went.
	placed map[string]*placement
}

// placement is a workflow's newest attempt as the display last saw it.
type placement struct {
	attempts int
	worker   string // the last worker it was seen on; kept while it waits
	lossTold bool   // the end of this attempt has been told
	lostTold int    // how many of its lost attempts have been told
}

// rateMeter derives a rate from cumulative counts, over the server's
// elapsed time so that network jitter does not make it swing.
type rateMeter struct {
	prevDone    int64
	prevElapsed float64
	rate        float64
}

// observe takes a new cumulative count at elapsed seconds and returns the
// rate since the last observation at least half a second earlier.
func (m *rateMeter) observe(done int64, elapsed float64) float64 {
	if dt := elapsed - m.prevElapsed; dt >= 0.5 || (m.prevElapsed == 0 && elapsed > 0) {
		m.rate = float64(done-m.prevDone) / dt
		m.prevDone, m.prevElapsed = done, elapsed
	}
	return m.rate
}

func newDisplay(w io.Writer, tty bool, width int, now func() time.Time) *display {
	return &display{w: w, tty: tty, width: width, now: now, dcs: map[string]*dcView{}}
}

func (d *display) update(st api.JobStatus) {
	v, ok := d.dcs[st.Datacenter]
	if !ok {
		v = &dcView{wfs: map[string]*rateMeter{}, parts: map[string]*rateMeter{}, placed: map[string]*placement{}}
		d.dcs[st.Datacenter] = v
		d.order = append(d.order, st.Datacenter)
	}
	v.st = st
	v.job.observe(st.TotalCompleted+st.TotalFailed, st.ElapsedSeconds)
	for _, msg := range v.retries(st.Workflows) {
		d.note(msg)
	}
	for _, wf := range st.Workflows {
		m, ok := v.wfs[wf.WorkflowID+"/"+wf.Name]
		if !ok {
			m = &rateMeter{}
			v.wfs[wf.WorkflowID+"/"+wf.Name] = m
		}
		m.observe(wf.CompletedCount+wf.FailedCount, st.ElapsedSeconds)
	}
	for _, part := range st.Datacenters {
		m, ok := v.parts[part.Name]
		if !ok {
			m = &rateMeter{}
			v.parts[part.Name] = m
		}
		m.observe(part.TotalCompleted+part.TotalFailed, st.ElapsedSeconds)
	}
	lines := d.lines()
	if d.tty {
		d.redraw(lines)
		return
	}
	status := d.status()
	now := d.now()
	// A new datacenter or workflow changes the block's shape: worth a print.
	if !d.printed || status != d.lastStatus || len(lines) != d.lastLines || st.Status.Terminal() ||
		now.Sub(d.lastPrint) >= plainInterval {
		fmt.Fprintln(d.w, strings.Join(lines, "\n"))
		d.printed, d.lastPrint, d.lastStatus, d.lastLines = true, now, status, len(lines)
	}
}

// retries tells, once each, that a workflow's attempt ended on a worker and
// it waits to run again (with the reason the server gives), and where its
// next attempt runs. Statuses may skip the waiting one: the move is then
// told in one line.
func (v *dcView) retries(wfs []api.WorkflowStatus) []string {
	var out []string
	for _, wf := range wfs {
		key := wf.WorkflowID + "/" + wf.Name
		p, seen := v.placed[key]
		if !seen {
			v.placed[key] = &placement{attempts: wf.Attempts, worker: wf.Worker, lostTold: len(wf.LostAttempts)}
			continue
		}
		// A lost attempt's counts stay in the workflow's: say whose they
		// are, once, before where the rest of the load went.
		for _, la := range wf.LostAttempts[min(p.lostTold, len(wf.LostAttempts)):] {
			out = append(out, fmt.Sprintf("%s: %s", wf.Name, lostLine(la)))
		}
		p.lostTold = max(p.lostTold, len(wf.LostAttempts))
		switch {
		case wf.Status == wire.WorkflowPending && p.worker != "" && !p.lossTold && wf.Error != "":
			out = append(out, fmt.Sprintf("%s: attempt %d on %s ended: %s; it will run again", wf.Name, p.attempts, p.worker, oneLine(wf.Error)))
			p.lossTold = true
		case wf.Worker != "" && wf.Attempts > p.attempts && p.worker != "" && wf.Worker != p.worker:
			if p.lossTold {
				out = append(out, fmt.Sprintf("%s: attempt %d runs on %s", wf.Name, wf.Attempts, wf.Worker))
			} else {
				out = append(out, fmt.Sprintf("%s: attempt %d on %s ended; attempt %d runs on %s", wf.Name, p.attempts, p.worker, wf.Attempts, wf.Worker))
			}
		}
		if wf.Worker != "" && (wf.Worker != p.worker || wf.Attempts > p.attempts) {
			p.worker, p.lossTold = wf.Worker, false
		}
		p.attempts = max(p.attempts, wf.Attempts)
	}
	return out
}

// note prints msg on a line of its own above the live block, which is drawn
// again below it on the next update.
func (d *display) note(msg string) {
	if d.tty && d.drawn > 0 {
		fmt.Fprintf(d.w, ansiUp+ansiClearDown, d.drawn)
	}
	fmt.Fprintln(d.w, msg)
	d.drawn = 0
}

func (d *display) redraw(lines []string) {
	var b strings.Builder
	if d.drawn > 0 {
		fmt.Fprintf(&b, ansiUp, d.drawn)
	}
	for _, l := range lines {
		b.WriteString(ansiClearLine)
		b.WriteString(d.fit(l))
		b.WriteByte('\n')
	}
	if len(lines) < d.drawn {
		b.WriteString(ansiClearDown)
	}
	d.drawn = len(lines)
	_, _ = io.WriteString(d.w, b.String()) // a closed terminal: nothing to do
}

// fit cuts a line to the terminal's width: a wrapped line would take two
// rows, and the next redraw would climb one row too few.
func (d *display) fit(l string) string {
	if d.width <= 1 || utf8.RuneCountInString(l) < d.width {
		return l
	}
	r := []rune(l)
	return string(r[:d.width-1])
}

// status is the job's status across datacenters: theirs when they agree.
func (d *display) status() string {
	var statuses []string
	for _, dc := range d.order {
		if s := string(d.dcs[dc].st.Status); !slices.Contains(statuses, s) {
			statuses = append(statuses, s)
		}
	}
	return strings.Join(statuses, "/")
}

func (d *display) lines() []string {
	var (
		id                string
		elapsed           float64
		remaining         = -1.0 // unknown
		completed, failed int64
		rate              float64
		wfDone, wfTotal   int
	)
	known := true
	for _, dc := range d.order {
		v := d.dcs[dc]
		st := v.st
		id = st.JobID
		elapsed = max(elapsed, st.ElapsedSeconds)
		completed += st.TotalCompleted
		failed += st.TotalFailed
		rate += v.job.rate
		for _, wf := range st.Workflows {
			wfTotal++
			if wf.Status.Terminal() {
				wfDone++
				continue
			}
			if wf.PlannedSeconds <= 0 {
				known = false
				continue
			}
			remaining = max(remaining, wf.PlannedSeconds-wf.ElapsedSeconds, 0)
		}
	}
	head := fmt.Sprintf("%s %s  elapsed %s", id, d.status(), formatElapsed(elapsed))
	switch {
	case wfTotal > 0 && wfDone == wfTotal:
	case known && remaining >= 0:
		head += "  remaining " + formatElapsed(remaining)
	default:
		head += "  remaining -"
	}
	lines := []string{head,
		fmt.Sprintf("  %s  completed %d  errors %s  workflows %d/%d done",
			formatRate(rate), completed, formatErrors(failed, completed+failed), wfDone, wfTotal)}
	// The bar is for a person at a terminal; logs get the figures above.
	if d.tty && known && remaining >= 0 && wfDone < wfTotal {
		lines = append(lines, "  "+progressBar(elapsed, remaining, d.barWidth()))
	}

	nameWidth := 0
	for _, dc := range d.order {
		for _, wf := range d.dcs[dc].st.Workflows {
			nameWidth = max(nameWidth, utf8.RuneCountInString(wf.Name))
		}
	}
	// One datacenter: its workflows under the job. Several: a line per
	// datacenter, its workflows under it.
	indent := "  "
	if len(d.order) > 1 {
		indent = "    "
	}
	for _, dc := range d.order {
		v := d.dcs[dc]
		for _, part := range v.st.Datacenters {
			lines = append(lines, partLine(part, v.parts[part.Name]))
		}
		if len(d.order) > 1 {
			st := v.st
			lines = append(lines, fmt.Sprintf("  dc %s  %s  %s  completed %d  errors %s", dash(dc), st.Status,
				formatRate(v.job.rate), st.TotalCompleted, formatErrors(st.TotalFailed, st.TotalCompleted+st.TotalFailed)))
		}
		for _, wf := range v.st.Workflows {
			lines = append(lines, indent+workflowLine(wf, v.wfs[wf.WorkflowID+"/"+wf.Name], nameWidth))
			pipe := d.pipelineLines(wf.Name, indent+"  ")
			if len(pipe) == 0 && wf.Waiting != "" {
				pipe = []string{indent + "  " + wf.Waiting}
			}
			lines = append(lines, pipe...)
		}
	}
	return lines
}

// partLine is one datacenter of a gate's merged status: its own status,
// rate, counts, and the lease that drives it, so a datacenter that stalls
// or fails shows as itself rather than as a dip in the job's rate.
func partLine(p api.DatacenterStatus, m *rateMeter) string {
	rate := p.Rate
	if m != nil && m.rate > 0 {
		rate = m.rate
	}
	line := fmt.Sprintf("  dc %s  %s  %s  completed %d  errors %s", dash(p.Name), p.Status, formatRate(rate),
		p.TotalCompleted, formatErrors(p.TotalFailed, p.TotalCompleted+p.TotalFailed))
	if p.Error != "" {
		line += "  " + p.Error
	}
	return line
}

// progressBar draws elapsed against elapsed+remaining, as k6 does for a
// test of known length: "[=========>          ]  45%".
func progressBar(elapsed, remaining float64, width int) string {
	total := elapsed + remaining
	frac := 1.0
	if total > 0 {
		frac = min(max(elapsed/total, 0), 1)
	}
	filled := int(frac * float64(width))
	bar := strings.Repeat("=", filled)
	if filled < width {
		bar += ">" + strings.Repeat(" ", width-filled-1)
	}
	return fmt.Sprintf("[%s] %3.0f%%", bar, 100*frac)
}

// barWidth fits the bar to the terminal, between 10 and 40 cells.
func (d *display) barWidth() int {
	if d.width <= 0 {
		return 40
	}
	return min(max(d.width-12, 10), 40)
}

// workflowLine is one workflow: while it runs, its rate and percentiles over
// the newest second (Recent) when the server sends them, else the rate
// between the last statuses.
func workflowLine(wf api.WorkflowStatus, m *rateMeter, nameWidth int) string {
	name := wf.Name + strings.Repeat(" ", max(0, nameWidth-utf8.RuneCountInString(wf.Name)))
	line := fmt.Sprintf("%s  %-9s", name, wf.Status)
	if wf.Status.Terminal() || wf.Status == wire.WorkflowPending {
		return strings.TrimRight(fmt.Sprintf("%s  completed %d  errors %s", line, wf.CompletedCount,
			formatErrors(wf.FailedCount, wf.CompletedCount+wf.FailedCount)), " ")
	}
	rate, p50, p99 := m.rate, "-", "-"
	if r := wf.Recent; r != nil {
		rate = float64(r.Completed + r.Failed)
		p50, p99 = formatMs(r.P50Ms), formatMs(r.P99Ms)
	}
	return fmt.Sprintf("%s  %s  p50 %s  p99 %s  errors %s", line, formatRate(rate), p50, p99,
		formatErrors(wf.FailedCount, wf.CompletedCount+wf.FailedCount))
}

// formatErrors prints failures with their share of all outcomes.
func formatErrors(failed, total int64) string {
	if failed == 0 || total == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%.2f%%)", failed, 100*float64(failed)/float64(total))
}

func formatElapsed(s float64) string {
	d := time.Duration(s * float64(time.Second))
	if d < time.Minute {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func formatRate(r float64) string {
	if r <= 0 {
		return "-/s"
	}
	if r >= 1000 {
		return fmt.Sprintf("%.1fk/s", r/1000)
	}
	return fmt.Sprintf("%.1f/s", r)
}

// isTerminal reports whether w is a terminal, which gets the live display.
// (golang.org/x/term is not a dependency; a character device is close
// enough, and TERM=dumb opts out.)
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// lostLine tells what became of a lost attempt's requests.
func lostLine(la api.LostAttempt) string {
	reason := ""
	if r := oneLine(la.Reason); r != "" {
		reason = " (" + r + ")"
	}
	return fmt.Sprintf("attempt %d on %s was lost%s; its %d completed and %d failed requests are kept in the counts, and only the rest of the load runs again",
		la.Attempt, la.Worker, reason, la.CompletedCount, la.FailedCount)
}
