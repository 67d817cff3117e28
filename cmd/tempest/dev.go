package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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
	var allowExec, sourceDirs listFlag
	fs.Var(&allowExec, "allow-exec", "let the workers run this exec `program`: an absolute path, or the SHA-256 of a program jobs upload (repeatable; examples/rainstorm-upper.sh is always allowed)")
	fs.Var(&sourceDirs, "source-dir", "let path: sources read files under this `directory` (repeatable; default none)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	workerConfig, err := devWorkerConfig(allowExec, sourceDirs)
	if err != nil {
		fmt.Fprintf(stderr, "tempest dev: %v\n", err)
		return exitUsage
	}
	if *dir == "" || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "usage: tempest dev --dir DIR [--dcs 2] [--gates 3] [--managers 3] [--workers 2] [--cores 2] [--allow-exec PATH|SHA256]... [--source-dir DIR]...")
		return exitUsage
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		fmt.Fprintf(stderr, "tempest dev: %v\n", err)
		return exitUsage
	}
	if err := checkFreshDir(abs); err != nil {
		fmt.Fprintf(stderr, "tempest dev: %v\n", err)
		return exitUsage
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c, err := devcluster.Start(ctx, devcluster.Options{
		Dir: abs, BinDir: *bin, Datacenter: *dc, Datacenters: *dcs, Gates: *gates,
		Managers: *managers, Workers: *workers, CoresPerWorker: *cores,
		Logger: logger, WorkerConfig: workerConfig,
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

// checkFreshDir refuses a directory that already holds a cluster: its nodes'
// data would be started under a new token and new ports, with the old
// cluster's jobs in their stores (and, if it still runs, its processes
// beside the new ones). An empty or absent directory is fine.
func checkFreshDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(entries) == 0) {
		return nil
	}
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(filepath.Join(dir, "cluster.json"))
	if err != nil {
		return fmt.Errorf("%s is not empty; give tempest dev a new or empty --dir", dir)
	}
	var f devcluster.File
	if err := json.Unmarshal(raw, &f); err != nil {
		return fmt.Errorf("%s holds a cluster.json that does not parse (%v); give tempest dev a new or empty --dir", dir, err)
	}
	var running []string
	for _, n := range f.Nodes {
		if n.PID > 0 && syscall.Kill(n.PID, 0) == nil {
			running = append(running, fmt.Sprintf("%s (pid %d)", n.Name, n.PID))
		}
	}
	if len(running) > 0 {
		return fmt.Errorf("%s holds a cluster that is still running: %s; stop it (Ctrl-C in its terminal) or use another --dir",
			dir, strings.Join(running, ", "))
	}
	return fmt.Errorf("%s holds another cluster (%d nodes, their jobs in its data); remove it (rm -r %s) or use another --dir",
		dir, len(f.Nodes), dir)
}

// ExampleExecSum is the SHA-256 of examples/rainstorm-upper.sh, the exec
// program of the README's example: a dev cluster's workers allow it, so
// the example runs as written (a test keeps it equal to the file).
const ExampleExecSum = "7e7910932d94bdf5e3305f046486adb73322ffbf520068d9d3a05d767a488729"

// devWorkerConfig is the exec policy and source directories of a dev
// cluster's workers: exec on for the example program and what --allow-exec
// names, path: sources under the --source-dir directories.
func devWorkerConfig(allow, dirs []string) (map[string]any, error) {
	sums, programs := []string{ExampleExecSum}, []string{}
	for _, a := range allow {
		switch {
		case filepath.IsAbs(a):
			programs = append(programs, filepath.Clean(a))
		case len(a) == 64 && strings.Trim(strings.ToLower(a), "0123456789abcdef") == "":
			sums = append(sums, strings.ToLower(a))
		default:
			return nil, fmt.Errorf("--allow-exec %q: want an absolute path or a hex SHA-256", a)
		}
	}
	var abs []string
	for _, d := range dirs {
		p, err := filepath.Abs(d)
		if err != nil {
			return nil, fmt.Errorf("--source-dir %q: %w", d, err)
		}
		abs = append(abs, p)
	}
	execCfg := map[string]any{"enabled": true, "programs": programs, "program_sums": sums}
	if os.Geteuid() == 0 {
		// A root worker refuses exec without exec.user. A dev cluster runs
		// its programs as the user who started it, root included: say so.
		execCfg["user"] = "root"
	}
	cfg := map[string]any{"exec": execCfg}
	if len(abs) > 0 {
		cfg["source_dirs"] = abs
	}
	return cfg, nil
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}
