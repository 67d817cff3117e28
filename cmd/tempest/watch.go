package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"tempest/api"
	"tempest/wire"
)

// runWatch follows a job to its end and exits as exitFor says: 0 if it
// completed, 1 if thresholds failed, 2 if it failed otherwise. With --json each status goes to stdout as one JSON line
// (NDJSON) as it arrives.
func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("watch", "watch ID [--json]", stderr)
	var conn apiFlags
	conn.register(fs)
	asJSON := fs.Bool("json", false, "print every status as one JSON line on stdout instead of the display and summary")
	c, args, code, ok := openCommand(fs, &conn, args, 1, stderr)
	if !ok {
		return code
	}
	defer c.Close()
	mode := outputSummary
	if *asJSON {
		mode = outputStreamJSON
	}
	return followJob(ctx, c, args[0], mode, stdout, stderr)
}

// outputMode is what followJob writes on stdout.
type outputMode int

const (
	outputSummary    outputMode = iota // the summary table at the end
	outputFinalJSON                    // the final status as one JSON object
	outputStreamJSON                   // every status as one JSON line
)

// followJob watches a job until it ends: progress on stderr, mode's output
// on stdout. The exit code says how the job ended.
func followJob(ctx context.Context, c *api.Client, id string, mode outputMode, stdout, stderr io.Writer) int {
	var display *progress
	if mode != outputStreamJSON {
		display = newProgress(stderr, isTerminal(stderr), time.Now)
	}
	enc := json.NewEncoder(stdout)
	var final api.JobStatus
	err := c.Watch(ctx, id, func(st api.JobStatus) {
		final = st
		if display != nil {
			display.update(st)
		}
		if mode == outputStreamJSON {
			_ = enc.Encode(st)
		}
	})
	if display != nil {
		display.finish()
	}
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "tempest: stopped watching job %s; it keeps running (tempest cancel %s stops it)\n", id, id)
			return exitUsage
		}
		return reportError(stderr, err)
	}
	switch mode {
	case outputSummary:
		printSummary(stdout, final)
	case outputFinalJSON:
		printJSON(stdout, final)
	}
	return exitFor(final)
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

// plainInterval is how often the plain (non-terminal) display prints a line
// when nothing but the counts changed.
const plainInterval = 5 * time.Second

// progress shows a job's progress: one line rewritten in place on a
// terminal, or a plain line per status change (and every plainInterval)
// otherwise, which reads well in CI logs.
type progress struct {
	w   io.Writer
	tty bool
	now func() time.Time

	lastPrint  time.Time
	lastStatus wire.JobStatus
	printed    bool
	lineLen    int // of the live line, to blank it when it shrinks

	// Rate over the last interval, from the server's elapsed time so that
	// network jitter does not make it swing.
	prevDone    int64
	prevElapsed float64
	rate        float64
}

func newProgress(w io.Writer, tty bool, now func() time.Time) *progress {
	return &progress{w: w, tty: tty, now: now}
}

func (p *progress) update(st api.JobStatus) {
	done := st.TotalCompleted + st.TotalFailed
	if dt := st.ElapsedSeconds - p.prevElapsed; dt >= 0.5 || (p.prevElapsed == 0 && st.ElapsedSeconds > 0) {
		p.rate = float64(done-p.prevDone) / dt
		p.prevDone, p.prevElapsed = done, st.ElapsedSeconds
	}
	line := p.line(st)
	now := p.now()
	if p.tty {
		pad := ""
		if n := p.lineLen - len(line); n > 0 {
			pad = strings.Repeat(" ", n)
		}
		fmt.Fprintf(p.w, "\r%s%s", line, pad)
		p.lineLen = len(line)
		p.printed = true
		return
	}
	if !p.printed || st.Status != p.lastStatus || st.Status.Terminal() || now.Sub(p.lastPrint) >= plainInterval {
		fmt.Fprintln(p.w, line)
		p.printed, p.lastPrint, p.lastStatus = true, now, st.Status
	}
}

// finish ends the live line so what follows starts on its own.
func (p *progress) finish() {
	if p.tty && p.printed {
		fmt.Fprintln(p.w)
	}
}

func (p *progress) line(st api.JobStatus) string {
	finished := 0
	for _, wf := range st.Workflows {
		switch wf.Status {
		case wire.WorkflowCompleted, wire.WorkflowFailed, wire.WorkflowCancelled:
			finished++
		}
	}
	return fmt.Sprintf("%s %-10s %7s  completed %d  failed %d  %s  workflows %d/%d",
		st.JobID, st.Status, formatElapsed(st.ElapsedSeconds), st.TotalCompleted, st.TotalFailed,
		formatRate(p.rate), finished, len(st.Workflows))
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
