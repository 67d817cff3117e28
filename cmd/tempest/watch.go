package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
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
	detach := fs.Bool("detach", false, "on Ctrl-C stop watching and leave the job running (default: cancel it, then print the summary)")
	c, args, code, ok := openCommand(fs, &conn, args, 1, stderr)
	if !ok {
		return code
	}
	defer c.Close()
	mode := outputSummary
	if *asJSON {
		mode = outputStreamJSON
	}
	return followJob(ctx, c, args[0], mode, interruptOf(*detach), stdout, stderr)
}

// onInterrupt is what a Ctrl-C does to a job being followed.
type onInterrupt int

const (
	// interruptCancels cancels the job, waits for it to end and prints the
	// summary, as k6 users expect of a test they stop.
	interruptCancels onInterrupt = iota
	// interruptDetaches stops following and leaves the job running.
	interruptDetaches
)

func interruptOf(detach bool) onInterrupt {
	if detach {
		return interruptDetaches
	}
	return interruptCancels
}

// cancelGrace bounds the wait for a job cancelled by Ctrl-C to report its
// end; past it the CLI stops watching and says so.
const cancelGrace = 30 * time.Second

// outputMode is what followJob writes on stdout.
type outputMode int

const (
	outputSummary    outputMode = iota // the summary table at the end
	outputFinalJSON                    // the final status as one JSON object
	outputStreamJSON                   // every status as one JSON line
)

// followJob watches a job until it ends: progress on stderr, mode's output
// on stdout. The exit code says how the job ended.
//
// ctx ends on Ctrl-C. With interruptCancels the watch itself goes on, on a
// context of its own, while the job is cancelled, so the summary of what
// ran is printed when it ends; a second Ctrl-C ends the process (main
// restores the default signal handling once ctx is done).
func followJob(ctx context.Context, c *api.Client, id string, mode outputMode, onInt onInterrupt, stdout, stderr io.Writer) int {
	var (
		live *display
		mu   sync.Mutex // the display and the interrupt's notes share stderr
	)
	if mode != outputStreamJSON {
		tty, width := isTerminal(stderr), 0
		if f, ok := stderr.(*os.File); ok && tty {
			width = terminalWidth(f)
		}
		live = newDisplay(stderr, tty, width, time.Now)
	}
	note := func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		if live != nil {
			live.note(msg)
			return
		}
		fmt.Fprintln(stderr, msg)
	}
	watchCtx := ctx
	var cancelled atomic.Bool
	if onInt == interruptCancels {
		var stopWatch context.CancelFunc
		watchCtx, stopWatch = context.WithCancel(context.WithoutCancel(ctx))
		var wg sync.WaitGroup
		defer wg.Wait()
		defer stopWatch()
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-watchCtx.Done():
				return
			case <-ctx.Done():
			}
			cancelled.Store(true)
			note(fmt.Sprintf("tempest: cancelling job %s (Ctrl-C again to quit without waiting)", id))
			cctx, done := context.WithTimeout(watchCtx, 10*time.Second)
			_, err := c.Cancel(cctx, id, "interrupted from the CLI (Ctrl-C)")
			done()
			if err != nil {
				note(fmt.Sprintf("tempest: cancel job %s: %v (tempest cancel %s retries)", id, err, id))
				stopWatch()
				return
			}
			select {
			case <-watchCtx.Done():
			case <-time.After(cancelGrace):
				stopWatch()
			}
		}()
	}
	enc := json.NewEncoder(stdout)
	var final api.JobStatus
	err := c.Watch(watchCtx, id, func(st api.JobStatus) {
		mu.Lock()
		defer mu.Unlock()
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
		if cancelled.Load() && watchCtx.Err() != nil {
			fmt.Fprintf(stderr, "tempest: stopped watching job %s before it reported its end (tempest status %s tells)\n", id, id)
			return exitUsage
		}
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
