package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"tempest/internal/devcluster"
	"tempest/internal/target"
)

// demoJob is the embedded sample: an HTTP load test against the built-in
// target and a sleep workflow beside it.
const demoJob = `name: demo
timeout: 60s
datacenters: 2
workflows:
  - name: get-root
    type: http
    cores: 1
    vus: 8
    duration: 3s
    steps:
      - {name: root, method: GET, url: "%s/"}
      - {name: search, method: GET, url: "%s/search?q=tempest"}
  - {name: nap, type: sleep, cores: 1, duration: 2s}
`

// runDemo starts a whole local cluster of real processes — 3 gates and two
// datacenters of 3 managers and 2 workers each — and a built-in HTTP
// target, runs the sample job through a gate in both datacenters, prints
// the summary, and stops everything.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	keep := fs.Bool("keep", false, "keep the cluster directory (logs, data) after the demo")
	bin := fs.String("bin", "", "directory holding tempest-manager and tempest-worker (default: beside this binary)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	start := time.Now()
	dir, err := os.MkdirTemp("", "tempest-demo-")
	if err != nil {
		fmt.Fprintf(stderr, "tempest demo: %v\n", err)
		return exitUsage
	}
	if !*keep {
		defer os.RemoveAll(dir)
	}
	say := func(format string, a ...any) { fmt.Fprintf(stdout, format+"\n", a...) }

	say("Tempest demo: a local cluster of real processes runs an HTTP load test against a built-in target.")
	tgtCfg := target.DefaultConfig()
	tgtCfg.Addr = "127.0.0.1:0"
	tgt, err := target.New(tgtCfg)
	if err != nil {
		fmt.Fprintf(stderr, "tempest demo: %v\n", err)
		return exitUsage
	}
	if err := tgt.Start(ctx); err != nil {
		fmt.Fprintf(stderr, "tempest demo: start target: %v\n", err)
		return exitUsage
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tgt.Shutdown(sctx)
	}()
	say("  target         http://%s (counts every request it answers)", tgt.Addr())

	c, err := devcluster.Start(ctx, devcluster.Options{
		Dir: dir, BinDir: *bin, Datacenters: 2, Gates: 3, Managers: 3, Workers: 2, CoresPerWorker: 2,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		fmt.Fprintf(stderr, "tempest demo: %v\n", err)
		return exitUsage
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		c.Stop(sctx)
		say("  stopped        every node (%s in all)", time.Since(start).Round(100*time.Millisecond))
		if *keep {
			say("  kept           %s", dir)
		}
	}()
	readyCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	view, err := c.WaitReady(readyCtx)
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "tempest demo: cluster did not become ready: %v (logs: rerun with --keep)\n", err)
		return exitUsage
	}
	for _, n := range view.Nodes {
		role := n.Role
		if n.DC != "" {
			role += " in " + n.DC
		}
		if n.IsLeader {
			role += " (leader)"
		}
		say("  %-14s %s", n.Name, role)
	}
	for _, n := range c.Nodes() {
		if n.Role == "worker" {
			say("  %-14s worker in %s, 2 cores", n.Name, n.DC)
		}
	}

	client, err := c.Client()
	if err != nil {
		fmt.Fprintf(stderr, "tempest demo: %v\n", err)
		return exitUsage
	}
	defer client.Close()
	url := "http://" + tgt.Addr()
	job := fmt.Sprintf(demoJob, url, url)
	id, err := client.Submit(ctx, []byte(job), filepath.Join(dir, "demo.yaml"))
	if err != nil {
		return reportError(stderr, err)
	}
	say("  submitted      job %s through the gates to 2 datacenters (8 virtual users for 3s in each, plus a 2s sleep)", id)
	say("")
	code := followJob(ctx, client, id, outputSummary, interruptDetaches, stdout, stderr)
	seen := tgt.Stats().Requests
	st, err := client.Job(ctx, id)
	if err == nil {
		var sent int64
		for _, wf := range st.Workflows {
			if wf.Type == "http" {
				sent += wf.CompletedCount + wf.FailedCount
			}
		}
		say("")
		say("  the target counted %d requests; the cluster reported %d", seen, sent)
	}
	return code
}
