// Command gate measures what the gate tier costs and how fast it recovers,
// with real processes on loopback:
//
//  1. overhead: submit-to-all-running latency of a job of -workflows sleep
//     workflows, through a gate and directly to the datacenter's manager
//     leader, interleaved (gate, direct, gate, ...) so both see the same
//     machine; -n jobs each;
//
//  2. failover: -trials times, a job runs and a client watches it through
//     the gates (the Go client the CLI uses, listing every gate); the gate
//     leader is SIGKILLed and the time until the watching client receives a
//     status whose leases name the new leader is recorded; the killed gate
//     is restarted and the cluster settles before the next trial.
//
//     make build && go run ./bench/gate -bin bin
//
// The cluster: -gates gates in front of one datacenter of -managers
// managers and -workers workers (64 cores each, so capacity is never the
// limit). Timing profiles default to the dev cluster's (test: loopback
// only). Output: tables on stdout, progress on stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"tempest/api"
	"tempest/bench/internal/stats"
	"tempest/internal/devcluster"
	"tempest/wire"
)

type options struct {
	bin                       string
	gates, managers, workers  int
	n, workflows, trials      int
	swimProfile, electProfile string
	reportInterval            time.Duration
	keep                      bool
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin", "directory holding tempest-gate, tempest-manager and tempest-worker")
	flag.IntVar(&o.gates, "gates", 3, "gates")
	flag.IntVar(&o.managers, "managers", 3, "managers")
	flag.IntVar(&o.workers, "workers", 2, "workers")
	flag.IntVar(&o.n, "n", 30, "jobs per path for the overhead measurement")
	flag.IntVar(&o.workflows, "workflows", 4, "sleep workflows per job")
	flag.IntVar(&o.trials, "trials", 12, "gate leader kills for the failover measurement")
	flag.StringVar(&o.swimProfile, "swim-profile", "test", "SWIM profile of every node")
	flag.StringVar(&o.electProfile, "election-profile", "test", "election profile of every node")
	flag.BoolVar(&o.keep, "keep", false, "keep the cluster directory")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench/gate:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	bin, err := filepath.Abs(o.bin)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "tempest-bench-gate-")
	if err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(dir)
	}
	ctx := context.Background()
	c, err := devcluster.Start(ctx, devcluster.Options{
		Dir: dir, BinDir: bin, Gates: o.gates, Managers: o.managers, Workers: o.workers, CoresPerWorker: 64,
		SwimProfile: o.swimProfile, ElectionProfile: o.electProfile,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	defer c.Stop(context.Background())
	if err := ready(ctx, c); err != nil {
		return err
	}
	gates, err := c.Client()
	if err != nil {
		return err
	}
	defer gates.Close()
	direct, err := api.NewClient(c.ManagerAPIs(""), c.Token())
	if err != nil {
		return err
	}
	defer direct.Close()

	fmt.Fprintf(os.Stderr, "overhead: %d jobs of %d workflows per path\n", o.n, o.workflows)
	var viaGate, viaManager []time.Duration
	for i := 0; i < o.n; i++ {
		for _, p := range []struct {
			client *api.Client
			out    *[]time.Duration
			dcs    string
		}{{gates, &viaGate, "datacenters: 1\n"}, {direct, &viaManager, ""}} {
			d, err := submitToRunning(ctx, p.client, o.workflows, p.dcs)
			if err != nil {
				return err
			}
			*p.out = append(*p.out, d)
		}
	}
	g, m := stats.Summarize(viaGate), stats.Summarize(viaManager)
	fmt.Printf("\n## Submit to all workflows RUNNING (%d jobs of %d sleep workflows per path, interleaved)\n\n", o.n, o.workflows)
	fmt.Println("| path | p50 | p90 | p99 | max |")
	fmt.Println("|---|---|---|---|---|")
	row := func(name string, d stats.Dist) {
		fmt.Printf("| %s | %s | %s | %s | %s |\n", name, ms(d.P50), ms(d.P90), ms(d.P99), ms(d.Max))
	}
	row("through a gate", g)
	row("direct to the manager leader", m)
	fmt.Printf("\ngate overhead: p50 +%s (%.2fx), p99 +%s (%.2fx)\n", ms(g.P50-m.P50), ratio(g.P50, m.P50), ms(g.P99-m.P99), ratio(g.P99, m.P99))

	fmt.Fprintf(os.Stderr, "failover: %d gate leader kills\n", o.trials)
	var seen []time.Duration
	for i := 0; i < o.trials; i++ {
		d, err := failoverTrial(ctx, c, gates)
		if err != nil {
			return fmt.Errorf("trial %d: %w", i+1, err)
		}
		fmt.Fprintf(os.Stderr, "  trial %d: %s\n", i+1, ms(d))
		seen = append(seen, d)
	}
	f := stats.Summarize(seen)
	fmt.Printf("\n## Gate leader SIGKILL → a watching client sees the new leader's status (%d trials)\n\n", f.N)
	fmt.Println("| p50 | p90 | p99 | min | max |")
	fmt.Println("|---|---|---|---|---|")
	fmt.Printf("| %s | %s | %s | %s | %s |\n", ms(f.P50), ms(f.P90), ms(f.P99), ms(f.Min), ms(f.Max))
	fmt.Printf("\nprofiles: swim %s, election %s; lease_ttl %s\n", o.swimProfile, o.electProfile, "6s")
	return nil
}

func ready(ctx context.Context, c *devcluster.Cluster) error {
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	_, err := c.WaitReady(rctx)
	return err
}

// submitToRunning times one job from Submit until a status shows every
// workflow RUNNING or later; the job is cancelled afterwards.
func submitToRunning(ctx context.Context, client *api.Client, workflows int, dcs string) (time.Duration, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "name: bench\ntimeout: 60s\n%sworkflows:\n", dcs)
	for i := 0; i < workflows; i++ {
		fmt.Fprintf(&b, "  - {name: nap-%d, type: sleep, cores: 1, duration: 30s}\n", i)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	id, err := client.Submit(ctx, []byte(b.String()), "bench.yaml")
	if err != nil {
		return 0, fmt.Errorf("submit: %w", err)
	}
	errRunning := errors.New("running")
	err = client.Watch(ctx, id, func(st api.JobStatus) {
		if allRunning(st, workflows) {
			cancel()
		}
	})
	d := time.Since(start)
	if ctx.Err() == nil && err != nil && !errors.Is(err, errRunning) {
		return 0, fmt.Errorf("watch %s: %w", id, err)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if _, err := client.Cancel(cctx, id, "benchmark done"); err != nil {
		return 0, fmt.Errorf("cancel %s: %w", id, err)
	}
	return d, nil
}

func allRunning(st api.JobStatus, n int) bool {
	if len(st.Workflows) != n {
		return false
	}
	for _, w := range st.Workflows {
		if w.Status != wire.WorkflowRunning && !w.Status.Terminal() {
			return false
		}
	}
	return true
}

// failoverTrial watches a running job through the gates, kills the gate
// leader and returns how long the watcher waited for a status from the
// new leader.
func failoverTrial(ctx context.Context, c *devcluster.Cluster, client *api.Client) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	id, err := client.Submit(ctx, []byte("name: failover\ntimeout: 60s\ndatacenters: 1\nworkflows:\n  - {name: nap, type: sleep, cores: 1, duration: 40s}\n"), "f.yaml")
	if err != nil {
		return 0, err
	}
	type event struct {
		at     time.Time
		holder string
	}
	events := make(chan event, 1024)
	wctx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan error, 1)
	go func() {
		watchDone <- client.Watch(wctx, id, func(st api.JobStatus) {
			if len(st.Datacenters) > 0 && st.Status == wire.JobRunning {
				select {
				case events <- event{time.Now(), st.Datacenters[0].LeaseHolder}:
				default:
				}
			}
		})
	}()
	defer func() {
		stopWatch()
		<-watchDone
		cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer ccancel()
		client.Cancel(cctx, id, "trial done")
	}()
	var leader string
	select {
	case e := <-events:
		leader = e.holder
	case <-ctx.Done():
		return 0, errors.New("the job never showed RUNNING")
	}
	if leader == "" {
		return 0, errors.New("no lease holder in the status")
	}
	killed := time.Now()
	if err := c.Kill(leader); err != nil {
		return 0, err
	}
	var took time.Duration
	for took == 0 {
		select {
		case e := <-events:
			if e.holder != leader && e.at.After(killed) {
				took = e.at.Sub(killed)
			}
		case <-ctx.Done():
			return 0, fmt.Errorf("no status from a new leader within a minute of killing %s", leader)
		}
	}
	if err := c.Restart(leader); err != nil {
		return 0, err
	}
	return took, ready(ctx, c)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
