package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"tempest/api"
)

// runJobs lists the cluster's jobs, newest first.
func runJobs(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("jobs", "jobs [--json]", stderr)
	var conn apiFlags
	conn.register(fs)
	asJSON := fs.Bool("json", false, `print {"jobs": [...]} as JSON`)
	c, _, code, ok := openCommand(fs, &conn, args, 0, stderr)
	if !ok {
		return code
	}
	defer c.Close()
	jobs, err := c.Jobs(ctx)
	if err != nil {
		return reportError(stderr, err)
	}
	if *asJSON {
		if jobs == nil {
			jobs = []api.JobStatus{}
		}
		printJSON(stdout, api.JobList{Jobs: jobs})
		return exitOK
	}
	if len(jobs) == 0 {
		fmt.Fprintln(stdout, "no jobs")
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATUS\tCOMPLETED\tFAILED\tELAPSED\tSUBMITTED")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", j.JobID, dash(j.Name), j.Status, j.TotalCompleted,
			j.TotalFailed, formatElapsed(j.ElapsedSeconds), dash(j.SubmittedAt))
	}
	_ = tw.Flush()
	return exitOK
}
