package main

import (
	"context"
	"fmt"
	"io"
)

// runCancel stops a job everywhere it runs.
func runCancel(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("cancel", "cancel ID [--reason TEXT]", stderr)
	var conn apiFlags
	conn.register(fs)
	reason := fs.String("reason", "", "why, recorded with the job")
	c, args, code, ok := openCommand(fs, &conn, args, 1, stderr)
	if !ok {
		return code
	}
	defer c.Close()
	ack, err := c.Cancel(ctx, args[0], *reason)
	if err != nil {
		return reportError(stderr, err)
	}
	if !ack.Cancelled {
		fmt.Fprintf(stdout, "job %s had already finished; nothing to cancel\n", ack.JobID)
		return exitOK
	}
	fmt.Fprintf(stdout, "cancelled job %s (%d workflows stopped)\n", ack.JobID, ack.WorkflowsCancelled)
	return exitOK
}
