package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"tempest/internal/devcluster"
)

// runDev starts a local cluster of real processes and keeps it up until
// SIGINT/SIGTERM.
func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "directory for cluster.json, env, and each node's data and log (required)")
	dcs := fs.Int("dcs", 2, "datacenters (named dc1, dc2, ...)")
	gates := fs.Int("gates", 3, "gates (0 for a datacenter without gates; 1, 3 or 5)")
	managers := fs.Int("managers", 3, "managers per datacenter (1, 3 or 5)")
	workers := fs.Int("workers", 2, "workers per datacenter")
	cores := fs.Int("cores", 2, "cores per worker")
	dc := fs.String("dc", "dc1", "datacenter name when --dcs is 1")
	bin := fs.String("bin", "", "directory holding tempest-gate, tempest-manager and tempest-worker (default: beside this binary)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *dir == "" || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "usage: tempest dev --dir DIR [--dcs 2] [--gates 3] [--managers 3] [--workers 2] [--cores 2]")
		return exitUsage
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		fmt.Fprintf(stderr, "tempest dev: %v\n", err)
		return exitUsage
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c, err := devcluster.Start(ctx, devcluster.Options{
		Dir: abs, BinDir: *bin, Datacenter: *dc, Datacenters: *dcs, Gates: *gates,
		Managers: *managers, Workers: *workers, CoresPerWorker: *cores,
		Logger: logger,
	})
	if err != nil {
		fmt.Fprintf(stderr, "tempest dev: %v\n", err)
		return exitUsage
	}
	defer func() {
		fmt.Fprintln(stderr, "stopping every node")
		stopCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		c.Stop(stopCtx)
	}()
	readyCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	_, err = c.WaitReady(readyCtx)
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "tempest dev: cluster did not become ready: %v (logs under %s)\n", err, abs)
		return exitUsage
	}
	fmt.Fprintf(stdout, "cluster ready: %d gates; %d datacenters of %d managers and %d workers\n", *gates, max(*dcs, 1), *managers, *workers)
	fmt.Fprintf(stdout, "  api           %s\n", strings.Join(c.APIs(), ","))
	fmt.Fprintf(stdout, "  cluster.json  %s\n", filepath.Join(abs, "cluster.json"))
	fmt.Fprintf(stdout, "  environment   source %s\n", filepath.Join(abs, "env"))
	fmt.Fprintln(stdout, "press Ctrl-C to stop")
	<-ctx.Done()
	return exitOK
}
