package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"tempest/api"
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
	var live *display
	if mode != outputStreamJSON {
		tty, width := isTerminal(stderr), 0
		if f, ok := stderr.(*os.File); ok && tty {
			width = terminalWidth(f)
		}
		live = newDisplay(stderr, tty, width, time.Now)
	}
	enc := json.NewEncoder(stdout)
	var final api.JobStatus
	err := c.Watch(ctx, id, func(st api.JobStatus) {
		final = st
		if live != nil {
			live.pipelines(ctx, c, st)
			live.update(st)
		}
		if mode == outputStreamJSON {
			_ = enc.Encode(st)
		}
	})
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
