package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"tempest/api"
)

// runStatus prints a job's status once: the summary table, or JSON.
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("status", "status ID [--json]", stderr)
	var conn apiFlags
	conn.register(fs)
	asJSON := fs.Bool("json", false, "print the job status as JSON")
	c, args, code, ok := openCommand(fs, &conn, args, 1, stderr)
	if !ok {
		return code
	}
	defer c.Close()
	st, err := c.Job(ctx, args[0])
	if err != nil {
		return reportError(stderr, err)
	}
	if *asJSON {
		printJSON(stdout, st)
	} else {
		printSummary(stdout, *st)
	}
	// A job that ended says how, as the README's exit codes promise (2 for
	// failed, cancelled or timed out); one still running is not an error.
	if st.Status.Terminal() {
		return exitFor(*st)
	}
	return exitOK
}

// printSummary writes a job's outcome: a headline, a table of workflows and
// a table of steps with latency percentiles.
func printSummary(w io.Writer, st api.JobStatus) {
	name := ""
	if st.Name != "" {
		name = fmt.Sprintf(" (%s)", st.Name)
	}
	fmt.Fprintf(w, "job %s%s: %s after %s, %d completed, %d failed\n",
		st.JobID, name, st.Status, formatElapsed(st.ElapsedSeconds), st.TotalCompleted, st.TotalFailed)
	if st.Error != "" {
		fmt.Fprintf(w, "error: %s\n", oneLine(st.Error))
	}
	if len(st.Workflows) == 0 {
		return
	}

	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKFLOW\tSTATUS\tCOMPLETED\tFAILED\tATTEMPTS\tWORKER")
	steps := 0
	for _, wf := range st.Workflows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", wf.Name, wf.Status, wf.CompletedCount, wf.FailedCount,
			wf.Attempts, dash(wf.Worker))
		steps += len(wf.Steps)
	}
	_ = tw.Flush()
	// A reason the job's error already gives (a cancel's, a timeout's) is
	// not repeated under every workflow it ended.
	jobErr := oneLine(st.Error)
	for _, wf := range st.Workflows {
		if e := oneLine(wf.Error); e != "" && (jobErr == "" || !strings.Contains(jobErr, e)) {
			fmt.Fprintf(w, "%s: %s\n", wf.Name, e)
		}
	}
	// A load workflow retried after losing an attempt keeps that attempt's
	// reported counts and runs only the rest: say whose the counts are, so
	// the table is read as the whole run it is. (A pipeline's counts are
	// exact across restarts.)
	for _, wf := range st.Workflows {
		for _, la := range wf.LostAttempts {
			fmt.Fprintf(w, "%s: %s\n", wf.Name, lostLine(la))
		}
		if wf.Attempts > 1 && len(wf.LostAttempts) == 0 && wf.Type != "rainstorm" && wf.Type != "http" {
			fmt.Fprintf(w, "%s: ran %d attempts; the counts are the last attempt's\n", wf.Name, wf.Attempts)
		}
	}
	if steps > 0 {
		fmt.Fprintln(w)
		printSteps(w, st)
	}
	printThresholds(w, st)
}

// printSteps writes the table of steps: requests (completed and failed),
// their rate over the workflow's run, latency percentiles from the merged
// histograms, and errors with their share.
func printSteps(w io.Writer, st api.JobStatus) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKFLOW\tSTEP\tCOUNT\tRPS\tP50\tP90\tP95\tP99\tP99.9\tMAX\tERRORS")
	for _, wf := range st.Workflows {
		secs := wf.ElapsedSeconds
		if secs <= 0 {
			secs = st.ElapsedSeconds // an older server, or a workflow that never reported
		}
		for _, s := range wf.Steps {
			count := s.Completed + s.Failed
			rps := "-"
			if secs > 0 && count > 0 {
				rps = fmt.Sprintf("%.1f", float64(count)/secs)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", wf.Name, s.Name, count, rps,
				formatMs(s.P50Ms), formatMs(s.P90Ms), formatMs(s.P95Ms), formatMs(s.P99Ms), formatMs(s.P999Ms),
				formatMs(s.MaxMs), formatErrors(s.Failed, count))
		}
	}
	_ = tw.Flush()
	// Where a step failed, what kind of failures and which statuses.
	for _, wf := range st.Workflows {
		for _, s := range wf.Steps {
			if len(s.Errors) > 0 {
				fmt.Fprintf(w, "%s %s: errors %s; responses %s\n", wf.Name, s.Name, joinCounts(s.Errors, " "), joinCounts(s.Statuses, "×"))
			}
		}
	}
	printChecks(w, st)
}

// printChecks writes each step's checks, as k6 does: a mark, the name, the
// share passed and the counts.
func printChecks(w io.Writer, st api.JobStatus) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := false
	for _, wf := range st.Workflows {
		for _, s := range wf.Steps {
			for _, c := range s.Checks {
				if !header {
					fmt.Fprintln(tw, "WORKFLOW\tSTEP\tCHECK\tPASSED\t✓\t✗")
					header = true
				}
				mark, share := "✓", "-"
				if c.Failed > 0 {
					mark = "✗"
				}
				if n := c.Passed + c.Failed; n > 0 {
					share = fmt.Sprintf("%.2f%%", 100*float64(c.Passed)/float64(n))
				}
				fmt.Fprintf(tw, "%s\t%s\t%s %s\t%s\t%d\t%d\n", wf.Name, s.Name, mark, c.Name, share, c.Passed, c.Failed)
			}
		}
	}
	_ = tw.Flush()
}

// joinCounts writes counts by key, largest first: "status 40, timeout 3".
func joinCounts(m map[string]int64, sep string) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b)) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s%s%d", k, sep, m[k])
	}
	return strings.Join(parts, ", ")
}

// printThresholds writes one line per threshold: a tick or a cross, where
// it applies, the expression and the measured value. Workflows still
// running have no verdicts yet and print nothing.
func printThresholds(w io.Writer, st api.JobStatus) {
	n, failed := 0, 0
	for _, wf := range st.Workflows {
		n += len(wf.Thresholds)
		for _, r := range wf.Thresholds {
			if !r.Passed {
				failed++
			}
		}
	}
	if n == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "thresholds: %d passed, %d failed\n", n-failed, failed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, wf := range st.Workflows {
		for _, r := range wf.Thresholds {
			mark := "✓"
			if !r.Passed {
				mark = "✗"
			}
			where := wf.Name
			if r.Step != "" {
				where += "/" + r.Step
			}
			actual := "actual " + r.Actual
			if r.AbortOnFail {
				actual += " (abort_on_fail)"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", mark, where, oneLine(r.Expr), oneLine(actual))
		}
	}
	_ = tw.Flush()
}

// formatMs prints a latency with the precision it deserves.
func formatMs(ms float64) string {
	switch {
	case ms <= 0:
		return "-"
	case ms < 10:
		return fmt.Sprintf("%.2fms", ms)
	case ms < 1000:
		return fmt.Sprintf("%.1fms", ms)
	}
	return fmt.Sprintf("%.2fs", ms/1000)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
