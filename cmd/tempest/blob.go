package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"tempest/api"
)

// runBlob serves `tempest blob put FILE`: upload a file of any size in
// chunks (never held in memory whole) and print its SHA-256 once a majority
// of the managers store it, and `tempest blob stat SHA256`.
func runBlob(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("blob", "blob put FILE | blob stat SHA256", stderr)
	var conn apiFlags
	conn.register(fs)
	args, code, ok := parseCommand(fs, args, 2, stderr)
	if !ok {
		return code
	}
	c, err := conn.client()
	if err != nil {
		return reportError(stderr, err)
	}
	defer c.Close()
	switch args[0] {
	case "put":
		sum, size, err := api.HashFile(args[1])
		if err != nil {
			fmt.Fprintf(stderr, "tempest: %v\n", err)
			return exitUsage
		}
		f, err := os.Open(args[1])
		if err != nil {
			fmt.Fprintf(stderr, "tempest: %v\n", err)
			return exitUsage
		}
		defer f.Close()
		info, err := c.UploadBlob(ctx, sum, f, size, nil)
		if err != nil {
			return reportError(stderr, err)
		}
		fmt.Fprintf(stderr, "stored %s: %d bytes on %d of %d managers\n", args[1], info.Size, info.Replicas, info.Needed)
		fmt.Fprintln(stdout, sum)
	case "stat":
		info, err := c.BlobStat(ctx, args[1])
		if err != nil {
			return reportError(stderr, err)
		}
		printJSON(stdout, info)
	default:
		fmt.Fprintf(stderr, "tempest: blob %q: want put FILE or stat SHA256\n", args[0])
		return exitUsage
	}
	return exitOK
}
