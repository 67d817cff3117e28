// Command provision measures quorum provisioning with real processes: how
// many workflows a datacenter of 3 managers places per second, and how long
// a 10-workflow job takes from Submit until every workflow runs. It also
// measures what the time is made of: a bbolt micro-benchmark of fsync'd
// commits on this disk (Update against Batch, N concurrent writers), CPU per
// provision of every process, transport messages per provision, and, where
// Linux perf is available, CPU profiles of the leader and a follower and
// counts of every manager's fdatasyncs and UDP syscalls.
//
//	go run ./bench/provision -bin bin            # after `make build`
//
// The run, in order:
//
//  1. bbolt micro-benchmark (before any cluster runs, see bolt.go);
//  2. a devcluster of -managers managers and -workers workers of -cores
//     cores each, once the leader is elected and the workers registered. A
//     worker's --cores is only a number, but it bounds what runs at once:
//     workers × cores / -sleep is the most workflows the datacenter can
//     start per second (4 × 256 / 200 ms = 5,120/s by default). Near that
//     ceiling jobs queue for cores and the queue, not provisioning, sets
//     the rate, so the bench warns when a rate passes half of it. The
//     benchmark's API client talks to the leader only. The managers'
//     election profile defaults to lan: the test profile's short
//     timeouts cause elections when neighbours starve a shared 2-core
//     machine, and a rep during which leadership changed is left out;
//  3. latency: -lat-n jobs of -lat-workflows sleep workflows, one after
//     another, each timed from the Submit call until a Watch event shows every
//     workflow RUNNING (or beyond), then split into phases by the leader's
//     log lines (latency.go); then, with perf, 20 more jobs with perf trace
//     on the managers to count fdatasyncs per job;
//  4. throughput: for each -concurrency C and each of -reps reps (the order
//     of the Cs rotates per rep), C goroutines submit jobs of -workflows
//     sleep workflows of -sleep back to back; after -warmup, the leader's
//     /metrics is read at the edges of a -window and once a second: the
//     number of workflows in RUNNING or a later status, whose growth is the
//     provisioning rate. CPU of every process (/proc/PID/stat) and the
//     transport counters of every manager are read at the same edges;
//  5. a diagnostic rep at the highest concurrency with perf attached
//     (diag.go), reported apart because perf slows what it watches.
//
// Output: tables on stdout (markdown), progress on stderr, and everything
// as JSON in -out (default bench/results/<UTC stamp>-provision) with the
// perf data and trace summaries; -keep keeps the nodes' logs and data. perf
// needs the rights to trace other processes (it ran as root here).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

type options struct {
	bin, dir, out             string
	keep                      bool
	managers, workers         int
	cores                     int
	concurrency               []int
	workflows                 int
	sleep, warmup, window     time.Duration
	reps                      int
	latN, latWorkflows        int
	latSleep                  time.Duration
	latOverlap                bool
	diag                      bool
	bolt, boltOnly            bool
	boltWriters               []int
	boltReps, boltValue       int
	boltDuration              time.Duration
	boltDir                   string
	concStr, boltWritersIn    string
	swimProfile, electProfile string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "provision: %v\n", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("provision", flag.ContinueOnError)
	fs.StringVar(&o.bin, "bin", "bin", "`directory` with tempest-manager and tempest-worker (make build)")
	fs.StringVar(&o.dir, "dir", "", "cluster `directory` (default: a fresh one under $TMPDIR, removed unless -keep)")
	fs.StringVar(&o.out, "out", "", "results `directory` (default bench/results/<UTC stamp>-provision)")
	fs.BoolVar(&o.keep, "keep", false, "keep the cluster directory (nodes' logs and data)")
	fs.IntVar(&o.managers, "managers", 3, "managers")
	fs.IntVar(&o.workers, "workers", 4, "workers")
	fs.IntVar(&o.cores, "cores", 256, "cores per worker (only a number; with -workers and -sleep it sets the datacenter's ceiling on starts per second, which must stay well above the rate measured)")
	fs.StringVar(&o.swimProfile, "swim-profile", "test", "SWIM profile of the nodes (devcluster's default)")
	fs.StringVar(&o.electProfile, "election-profile", "lan", "election profile of the managers: lan (the production default) rides out the CPU stalls of a shared 2-core machine, where test's short timeouts cause elections")
	fs.StringVar(&o.concStr, "concurrency", "1,4,8", "throughput: jobs submitted concurrently, comma-separated")
	fs.IntVar(&o.workflows, "workflows", 50, "throughput: sleep workflows per job")
	fs.DurationVar(&o.sleep, "sleep", 200*time.Millisecond, "throughput: each workflow's duration")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "throughput: submitting before the window opens")
	fs.DurationVar(&o.window, "window", 5*time.Second, "throughput: measured window")
	fs.IntVar(&o.reps, "reps", 5, "throughput: repetitions per concurrency")
	fs.IntVar(&o.latN, "lat-n", 100, "latency: jobs, one after another")
	fs.IntVar(&o.latWorkflows, "lat-workflows", 10, "latency: sleep workflows per job")
	fs.DurationVar(&o.latSleep, "lat-sleep", 200*time.Millisecond, "latency: each workflow's duration")
	fs.BoolVar(&o.latOverlap, "lat-overlap", false, "latency: submit the next job as soon as the previous runs, not once it ended")
	fs.BoolVar(&o.diag, "diag", true, "diagnostic rep with perf attached to the managers (needs perf)")
	fs.BoolVar(&o.bolt, "bolt", true, "run the bbolt micro-benchmark first")
	fs.BoolVar(&o.boltOnly, "bolt-only", false, "run only the bbolt micro-benchmark")
	fs.StringVar(&o.boltWritersIn, "bolt-writers", "1,8,64", "bbolt: concurrent writers, comma-separated")
	fs.IntVar(&o.boltReps, "bolt-reps", 3, "bbolt: repetitions per cell")
	fs.IntVar(&o.boltValue, "bolt-value", 512, "bbolt: value bytes per write")
	fs.DurationVar(&o.boltDuration, "bolt-duration", time.Second, "bbolt: measured time per cell")
	fs.StringVar(&o.boltDir, "bolt-dir", "", "bbolt: `directory` for the files (default: the cluster directory's parent)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var err error
	if o.concurrency, err = parseInts(o.concStr); err != nil {
		return nil, fmt.Errorf("-concurrency: %w", err)
	}
	if o.boltWriters, err = parseInts(o.boltWritersIn); err != nil {
		return nil, fmt.Errorf("-bolt-writers: %w", err)
	}
	if o.managers < 1 || o.workers < 1 || o.cores < 1 || o.workflows < 1 || o.latWorkflows < 1 || o.reps < 1 {
		return nil, fmt.Errorf("-managers, -workers, -cores, -workflows, -lat-workflows and -reps must be positive")
	}
	return o, nil
}

// report is everything the run measured, as written to results.json.
type report struct {
	Started    time.Time     `json:"started"`
	GoVersion  string        `json:"go_version"`
	NumCPU     int           `json:"num_cpu"`
	Options    any           `json:"options"`
	Bolt       []boltResult  `json:"bolt,omitempty"`
	Latency    []latSample   `json:"latency,omitempty"`
	Throughput []tpRep       `json:"throughput,omitempty"`
	Diag       *diagResult   `json:"diag,omitempty"`
	LatDiag    *diagResult   `json:"latency_diag,omitempty"`
	IdleMsgs   idleMsgs      `json:"idle_msgs_per_sec"`
	Duration   time.Duration `json:"duration_ns"`
}

type idleMsgs struct {
	LeaderOut, LeaderIn, FollowersOut, FollowersIn float64
	// Cores is the CPU the idle cluster uses (SWIM, elections, timers).
	Cores float64
}

func run(ctx context.Context, args []string) error {
	o, err := parseFlags(args)
	if err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		return err
	}
	rep := &report{Started: time.Now(), GoVersion: runtime.Version(), NumCPU: runtime.NumCPU(), Options: map[string]any{
		"managers": o.managers, "workers": o.workers, "cores": o.cores, "concurrency": o.concurrency,
		"workflows": o.workflows, "sleep": o.sleep.String(), "warmup": o.warmup.String(), "window": o.window.String(),
		"reps": o.reps, "lat_n": o.latN, "lat_workflows": o.latWorkflows, "lat_sleep": o.latSleep.String(),
		"lat_overlap": o.latOverlap, "bolt_writers": o.boltWriters, "bolt_value": o.boltValue,
		"swim_profile": o.swimProfile, "election_profile": o.electProfile,
	}}
	if o.out == "" {
		o.out = filepath.Join("bench", "results", time.Now().UTC().Format("20060102T150405Z")+"-provision")
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	if o.dir == "" {
		if o.dir, err = os.MkdirTemp("", "tempest-provision-"); err != nil {
			return err
		}
		if !o.keep {
			defer os.RemoveAll(o.dir)
		}
	}
	if o.boltDir == "" {
		o.boltDir = filepath.Dir(filepath.Clean(o.dir))
	}
	bin, err := filepath.Abs(o.bin)
	if err != nil {
		return err
	}
	defer func() {
		rep.Duration = time.Since(rep.Started)
		b, _ := json.MarshalIndent(rep, "", "  ")
		path := filepath.Join(o.out, "results.json")
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			logf("write %s: %v", path, err)
		} else {
			logf("results in %s", path)
		}
	}()

	fmt.Printf("# provision benchmark, %s\n\n", rep.Started.UTC().Format(time.RFC3339))
	fmt.Printf("- %s, GOMAXPROCS=%d, NumCPU=%d, load average at start %s\n", runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), loadAvg())
	fmt.Printf("- cluster: %d managers, %d workers × %d cores (at most %.0f workflow starts/s with sleeps of %s); throughput jobs of %d × sleep %s, C ∈ %v, %d reps, warm-up %s, window %s; latency %d jobs of %d × sleep %s\n\n",
		o.managers, o.workers, o.cores, o.ceiling(), o.sleep, o.workflows, o.sleep, o.concurrency, o.reps, o.warmup, o.window, o.latN, o.latWorkflows, o.latSleep)

	if o.bolt || o.boltOnly {
		logf("bbolt micro-benchmark in %s", o.boltDir)
		rep.Bolt, err = runBolt(o.boltDir, o.boltWriters, o.boltReps, o.boltValue, o.boltDuration)
		if err != nil {
			return err
		}
		printBolt(rep.Bolt, o)
		if o.boltOnly {
			return nil
		}
	}

	logf("starting cluster in %s", o.dir)
	c, err := startCluster(ctx, o.dir, bin, o.managers, o.workers, o.cores, o.swimProfile, o.electProfile)
	if err != nil {
		return err
	}
	defer func() {
		logf("stopping cluster")
		c.stop()
	}()
	logf("leader %s (pid %d, %s), term %.0f", c.leader.Name, c.leader.PID, c.leader.API, c.term)
	elections := 0
	// checkLeader notes an election since the last check and follows the
	// new leader.
	checkLeader := func(what string) (bool, error) {
		why, err := c.leadershipChanged(ctx)
		if err != nil || why == "" {
			return false, err
		}
		elections++
		logf("%s: %s", what, why)
		fmt.Printf("**Warning: %s during %s.**\n\n", why, what)
		if err := c.findLeader(ctx); err != nil {
			return true, err
		}
		logf("new leader %s (pid %d), term %.0f", c.leader.Name, c.leader.PID, c.term)
		return true, nil
	}

	// One job through every path first: connections dialled, code paged in.
	if _, err := runLatency(ctx, c, 3, o.latWorkflows, o.latSleep, false); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}

	// The transports' background (elections, heartbeats): subtracted from
	// the per-provision message counts.
	if rep.IdleMsgs, err = c.idleMessages(ctx, 2*time.Second); err != nil {
		return err
	}

	logf("latency: %d jobs of %d workflows", o.latN, o.latWorkflows)
	rep.Latency, err = runLatency(ctx, c, o.latN, o.latWorkflows, o.latSleep, o.latOverlap)
	if err != nil {
		return err
	}
	ps, err := phases(c.leader.Log, rep.Latency)
	if err != nil {
		logf("phases: %v", err)
	}
	if _, err := checkLeader("the latency run"); err != nil {
		return err
	}
	printLatency(rep.Latency, ps, o)

	if o.diag && perfAvailable() {
		// The same jobs again with perf trace on the managers: how many
		// fdatasyncs one job costs, and how long they take on an idle
		// cluster. Apart from the samples above, since tracing adds a few
		// microseconds to every traced syscall.
		n := min(20, o.latN)
		rep.LatDiag = &diagResult{}
		logf("latency diagnostic: %d jobs with perf trace on the managers", n)
		h := diagHooks(c, o.out, "lat", false, rep.LatDiag)
		if err := h.start(); err != nil {
			// perf without the rights to trace: the measurements stand.
			fmt.Printf("Latency diagnostic skipped: %v\n\n", err)
		} else {
			ls, err := runLatency(ctx, c, n, o.latWorkflows, o.latSleep, o.latOverlap)
			if err != nil {
				return fmt.Errorf("latency diagnostic: %w", err)
			}
			if err := h.end(); err != nil {
				rep.LatDiag.Notes = append(rep.LatDiag.Notes, err.Error())
			}
			var all []time.Duration
			for _, s := range ls {
				all = append(all, s.AllRunning)
			}
			d := summarize(all)
			fmt.Printf("### Latency diagnostic: %d more jobs with perf trace attached (p50 %s ms, max %s ms)\n\n", n, msf(d.P50), msf(d.Max))
			printSyscalls(rep.LatDiag, c, float64(n), "job (whole life: submit, placement, completion)")
		}
	}

	cfg := tpConfig{Workflows: o.workflows, Sleep: o.sleep, Warmup: o.warmup, Window: o.window}
	for r := range o.reps {
		for k := range o.concurrency {
			conc := o.concurrency[(k+r)%len(o.concurrency)]
			tr, err := runThroughput(ctx, c, conc, r, cfg, nil)
			if err != nil {
				return fmt.Errorf("throughput C=%d rep %d: %w", conc, r+1, err)
			}
			rep.Throughput = append(rep.Throughput, tr)
			if tr.Disturbed != "" {
				logf("throughput C=%d rep %d left out: %s", conc, r+1, tr.Disturbed)
				elections++
				if err := c.findLeader(ctx); err != nil {
					return err
				}
				continue
			}
			logf("throughput C=%d rep %d: %.0f workflows/s (%d jobs, submit p50 %s ms), Tempest %.2f cores, host busy %.0f %% + steal %.0f %%, load %s, errors %d, failed %.0f",
				conc, r+1, tr.Rate, tr.Jobs, msf(tr.SubmitLatency.P50), tr.cores(), tr.HostBusy, tr.HostSteal, tr.Load, len(tr.Errors), tr.Failed)
			if o.capacityBound(tr.Rate) {
				logf("warning: %.0f workflows/s is over half the cluster's ceiling of %.0f starts/s; jobs likely queued for cores (raise -cores)", tr.Rate, o.ceiling())
			}
		}
	}
	printThroughput(rep.Throughput, rep.IdleMsgs, o)

	if o.diag {
		if !perfAvailable() {
			fmt.Printf("## Diagnostic pass\n\nperf is not installed: no profile of the leader.\n\n")
		} else {
			conc := slices.Max(o.concurrency)
			rep.Diag = &diagResult{}
			logf("diagnostic rep at C=%d with perf attached", conc)
			tr, err := runThroughput(ctx, c, conc, 0, cfg, diagHooks(c, o.out, "tp", true, rep.Diag))
			if err != nil {
				if ctx.Err() != nil {
					return err
				}
				// perf could not attach, typically: the measured reps stand.
				fmt.Printf("## Diagnostic rep\n\nFailed: %v\n\n", err)
			} else {
				rep.Diag.Rep = tr
				printDiag(rep.Diag, c)
			}
		}
	}

	if _, err := checkLeader("the diagnostic pass"); err != nil {
		return err
	}
	fmt.Printf("Elections during the run: %d (swim profile %s, election profile %s). Load average at the end %s.\n", elections, o.swimProfile, o.electProfile, loadAvg())
	return nil
}

// cores is how many cores the cluster and the benchmark used on average
// during the window.
func (r tpRep) cores() float64 {
	if r.Window <= 0 {
		return 0
	}
	return float64(r.CPU["manager"]+r.CPU["worker"]+r.CPU["bench"]) / float64(r.Window)
}

func (c *cluster) idleMessages(ctx context.Context, d time.Duration) (idleMsgs, error) {
	var im idleMsgs
	if err := c.waitIdle(ctx, 30*time.Second); err != nil {
		return im, err
	}
	a, err := c.snapshot(ctx)
	if err != nil {
		return im, err
	}
	time.Sleep(d)
	b, err := c.snapshot(ctx)
	if err != nil {
		return im, err
	}
	s := b.at.Sub(a.at).Seconds()
	im.Cores = (b.cpu["manager"] + b.cpu["worker"] - a.cpu["manager"] - a.cpu["worker"]).Seconds() / s
	im.LeaderOut = (b.leader.msgsOut() - a.leader.msgsOut()) / s
	im.LeaderIn = (b.leader.msgsIn() - a.leader.msgsIn()) / s
	for i := range b.followers {
		im.FollowersOut += (b.followers[i].msgsOut() - a.followers[i].msgsOut()) / s
		im.FollowersIn += (b.followers[i].msgsIn() - a.followers[i].msgsIn()) / s
	}
	return im, nil
}

func printBolt(rs []boltResult, o *options) {
	fmt.Printf("## bbolt commits on this disk (%d-byte values, medians of %d reps of %s)\n\n", o.boltValue, o.boltReps, o.boltDuration)
	fmt.Println("| mode | writers | writes/s | commits/s | writes/commit | p50 ms | p99 ms |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|")
	for _, s := range summarizeBolt(rs, o.boltWriters) {
		fmt.Printf("| %s | %d | %.0f | %.0f | %.1f | %s | %s |\n", s.Mode, s.Writers, s.OpsPerSec, s.CommitsPerSec, s.OpsPerCommit, msf(s.P50), msf(s.P99))
	}
	fmt.Println()
}

func printLatency(ss []latSample, ps phaseSet, o *options) {
	var all, sub []time.Duration
	first := 0
	for _, s := range ss {
		all = append(all, s.AllRunning)
		sub = append(sub, s.Submit)
		if s.FirstEvent {
			first++
		}
	}
	a, b := summarize(all), summarize(sub)
	fmt.Printf("## Latency: %d jobs of %d × sleep %s, one after another\n\n", len(ss), o.latWorkflows, o.latSleep)
	fmt.Println("| measure | p50 ms | p90 ms | p99 ms | max ms | mean ms |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	fmt.Printf("| Submit start → every workflow RUNNING (Watch) | %s | %s | %s | %s | %s |\n", msf(a.P50), msf(a.P90), msf(a.P99), msf(a.Max), msf(a.Mean))
	fmt.Printf("| Submit call alone | %s | %s | %s | %s | %s |\n", msf(b.P50), msf(b.P90), msf(b.P99), msf(b.Max), msf(b.Mean))
	fmt.Printf("\nIn %d of %d samples the Watch stream's first event already showed every workflow started.\n\n", first, len(ss))
	if ps.Matched == 0 {
		fmt.Printf("No sample could be matched to the leader's log lines.\n\n")
		return
	}
	fmt.Printf("Phases from the leader's log (millisecond timestamps, %d samples matched):\n\n", ps.Matched)
	fmt.Println("| phase | p50 ms | p90 ms | max ms |")
	fmt.Println("|---|---:|---:|---:|")
	for _, p := range []struct {
		name string
		xs   []time.Duration
	}{
		{"intake: HTTP, parse, job + workflow records committed", ps.Intake},
		{"replicate: JobSubmission to both peers, each commits", ps.Replicate},
		{"first placement: status commit, quorum RT, ASSIGNED commit, commit RT + peers' commits, dispatch RT, RUNNING commit", ps.First},
		{"spread: first → last workflow dispatched", ps.Spread},
		{"close: job RUNNING commit, HTTP answer", ps.Close},
		{"watch: Submit returned → Watch event", ps.Watch},
	} {
		d := summarize(p.xs)
		fmt.Printf("| %s | %s | %s | %s |\n", p.name, msf(d.P50), msf(d.P90), msf(d.Max))
	}
	fmt.Println()
}

// ceiling is the most workflows per second the cluster can start: each
// throughput workflow holds one core for -sleep.
func (o *options) ceiling() float64 {
	return float64(o.workers*o.cores) / o.sleep.Seconds()
}

// capacityBound reports whether rate came close enough to the cluster's
// ceiling that jobs likely queued for cores, so that the rate measures the
// queue rather than provisioning.
func (o *options) capacityBound(rate float64) bool { return rate > o.ceiling()/2 }

func printThroughput(rs []tpRep, idle idleMsgs, o *options) {
	fmt.Printf("## Throughput: jobs of %d × sleep %s submitted back to back by C clients (medians of %d reps, window %s)\n\n", o.workflows, o.sleep, o.reps, o.window)
	fmt.Println("| C | provisions/s | per rep | per second (min–max over reps) | submit p50 / p99 ms | Tempest CPU, cores | host busy / steal | failed | errors |")
	fmt.Println("|---:|---:|---|---|---:|---:|---:|---:|---:|")
	var bound []int
	for _, conc := range o.concurrency {
		var rates, p50, p99, busy, steal, cores []float64
		var per []string
		lo, hi := 1e18, 0.0
		failed, errs := 0.0, 0
		for _, r := range rs {
			if r.Concurrency != conc || r.Disturbed != "" {
				continue
			}
			rates = append(rates, r.Rate)
			per = append(per, fmt.Sprintf("%.0f", r.Rate))
			p50 = append(p50, float64(r.SubmitLatency.P50))
			p99 = append(p99, float64(r.SubmitLatency.P99))
			busy = append(busy, r.HostBusy)
			steal = append(steal, r.HostSteal)
			cores = append(cores, r.cores())
			for _, x := range r.PerSecond {
				lo, hi = min(lo, x), max(hi, x)
			}
			failed += r.Failed
			errs += len(r.Errors)
		}
		if len(rates) == 0 {
			continue
		}
		fmt.Printf("| %d | **%.0f** | %s | %.0f–%.0f | %s / %s | %.2f | %.0f %% / %.0f %% | %.0f | %d |\n", conc, median(rates), strings.Join(per, ", "),
			lo, hi, msf(time.Duration(median(p50))), msf(time.Duration(median(p99))), median(cores), median(busy), median(steal), failed, errs)
		if o.capacityBound(median(rates)) {
			bound = append(bound, conc)
		}
	}
	fmt.Println()
	if len(bound) > 0 {
		fmt.Printf("**Capacity-bound at C ∈ %v:** over half the cluster's ceiling of %.0f starts/s, so jobs queued for cores and the queue, not provisioning, set the rate. Raise -cores.\n\n", bound, o.ceiling())
	}
	fmt.Println("CPU per provision (ms of user+system CPU per workflow started, medians over reps), and transport messages per provision (idle background subtracted):")
	fmt.Println()
	fmt.Println("| C | leader | 2 followers | workers | bench client | **total** | ⇒ ceiling at 2 cores | leader msgs out / in | followers out / in |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, conc := range o.concurrency {
		var ld, fl, wk, bc, tot, lo, li, fo, fi []float64
		for _, r := range rs {
			if r.Concurrency != conc || r.Started <= 0 || r.Disturbed != "" {
				continue
			}
			n := r.Started
			perMs := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / n }
			ld = append(ld, perMs(r.CPU["leader"]))
			fl = append(fl, perMs(r.CPU["manager"]-r.CPU["leader"]))
			wk = append(wk, perMs(r.CPU["worker"]))
			bc = append(bc, perMs(r.CPU["bench"]))
			tot = append(tot, perMs(r.CPU["manager"]+r.CPU["worker"]+r.CPU["bench"]))
			s := r.Window.Seconds()
			lo = append(lo, (r.LeaderOut-idle.LeaderOut*s)/n)
			li = append(li, (r.LeaderIn-idle.LeaderIn*s)/n)
			fo = append(fo, (r.FollowersOut-idle.FollowersOut*s)/n)
			fi = append(fi, (r.FollowersIn-idle.FollowersIn*s)/n)
		}
		if len(tot) == 0 {
			continue
		}
		fmt.Printf("| %d | %.2f | %.2f | %.2f | %.2f | **%.2f** | %.0f /s | %.1f / %.1f | %.1f / %.1f |\n", conc,
			median(ld), median(fl), median(wk), median(bc), median(tot), 2000/median(tot),
			median(lo), median(li), median(fo), median(fi))
	}
	fmt.Printf("\nIdle background: the idle cluster uses %.3f cores; leader %.0f msgs/s out, %.0f in; followers together %.0f out, %.0f in.\n\n", idle.Cores, idle.LeaderOut, idle.LeaderIn, idle.FollowersOut, idle.FollowersIn)
}

func printDiag(d *diagResult, c *cluster) {
	r := d.Rep
	fmt.Printf("## Diagnostic rep (C=%d, perf attached: slower, not comparable)\n\n", r.Concurrency)
	fmt.Printf("%.0f workflows/s over %s, host busy %.0f %% + steal %.0f %%; perf trace span %s with %.0f workflows started.\n\n",
		r.Rate, r.Window.Round(time.Millisecond), r.HostBusy, r.HostSteal, d.Span.Round(time.Millisecond), d.SpanStarted)
	lp, fp := d.Profiles[c.leader.Name], (*profileSummary)(nil)
	if len(c.followers) > 0 {
		fp = d.Profiles[c.followers[0].Name]
	}
	if lp != nil && fp != nil {
		fmt.Printf("CPU profiles (perf, 999 Hz): the leader (%d samples) and follower %s (%d samples). Each sample is charged to the first matching component, so each column adds up to 100 %%:\n\n",
			lp.Samples, c.followers[0].Name, fp.Samples)
		fmt.Println("| leader | follower | component |")
		fmt.Println("|---:|---:|---|")
		for i, comp := range lp.Components {
			fmt.Printf("| %.1f %% | %.1f %% | %s |\n", comp.Share, fp.Components[i].Share, comp.Name)
		}
		fmt.Printf("| %.1f %% | %.1f %% | runtime and kernel other (scheduler, netpoll, timers, futex, perf's own sampling) |\n\n", lp.Other, fp.Other)
		for _, x := range []struct {
			name string
			p    *profileSummary
		}{{"leader", lp}, {"follower", fp}} {
			fmt.Printf("Top functions on CPU (self), %s:\n\n```\n", x.name)
			for _, t := range x.p.Top {
				fmt.Println(t)
			}
			fmt.Printf("```\n\n")
		}
	}
	printSyscalls(d, c, d.SpanStarted, "workflow started")
}

// printSyscalls prints the traced syscalls of every manager divided by per.
func printSyscalls(d *diagResult, c *cluster, per float64, unit string) {
	if len(d.Syscalls) > 0 && per > 0 {
		fmt.Printf("Syscalls per %s (perf trace over %s), with fdatasync's mean and max duration:\n\n", unit, d.Span.Round(time.Millisecond))
		fmt.Println("| manager | fdatasync | fdatasync mean / max ms | fdatasync ms total | pwrite64 | UDP sends (sendmsg+sendmmsg) | UDP receives (recvmsg+recvmmsg) |")
		fmt.Println("|---|---:|---:|---:|---:|---:|---:|")
		for _, m := range c.managers() {
			st, ok := d.Syscalls[m.Name]
			if !ok {
				continue
			}
			role := "follower"
			if m.Name == c.leader.Name {
				role = "leader"
			}
			fs := st["fdatasync"]
			fs.Calls += st["fsync"].Calls
			fmt.Printf("| %s (%s) | %.2f | %s / %s | %.2f | %.2f | %.2f | %.2f |\n", m.Name, role,
				float64(fs.Calls)/per, msf3(st["fdatasync"].avg()), msf(st["fdatasync"].Max),
				float64(st["fdatasync"].Total)/float64(time.Millisecond)/per,
				float64(st["pwrite64"].Calls)/per,
				float64(st["sendmsg"].Calls+st["sendmmsg"].Calls)/per,
				float64(st["recvmsg"].Calls+st["recvmmsg"].Calls)/per)
		}
		fmt.Println()
	}
	for _, n := range d.Notes {
		fmt.Printf("- note: %s\n", n)
	}
}

func msf3(d time.Duration) string {
	return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond))
}
