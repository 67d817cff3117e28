package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
)

// runResults writes a job's results to stdout as the server renders them:
// JSON, CSV with one row per workflow step, or HTML (one self-contained
// report page: `tempest results ID --format html > report.html`).
func runResults(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("results", "results ID [--format json|csv|html] [--workflow NAME]", stderr)
	var conn apiFlags
	conn.register(fs)
	format := fs.String("format", "json", "json, csv or html")
	wf := fs.String("workflow", "", "a RainStorm workflow: print its output (json or csv)")
	args, code, ok := parseCommand(fs, args, 1, stderr)
	if !ok {
		return code
	}
	if *format != "json" && *format != "csv" && *format != "html" {
		fmt.Fprintf(stderr, "tempest results: --format %q: want json, csv or html\n", *format)
		return exitUsage
	}
	c, err := conn.client()
	if err != nil {
		return reportError(stderr, err)
	}
	defer c.Close()
	if *wf != "" {
		// A pipeline's output may be millions of rows: written as it
		// arrives, not held first.
		if err := c.OutputTo(ctx, args[0], *wf, *format, stdout); err != nil {
			return reportError(stderr, err)
		}
		return exitOK
	}
	body, err := c.Results(ctx, args[0], *format)
	if err != nil {
		return reportError(stderr, err)
	}
	if _, err := stdout.Write(body); err != nil {
		fmt.Fprintf(stderr, "tempest: write results: %v\n", err)
		return exitUsage
	}
	if len(body) > 0 && !bytes.HasSuffix(body, []byte("\n")) {
		fmt.Fprintln(stdout)
	}
	return exitOK
}
