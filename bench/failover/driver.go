package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"tempest/leadership"
	"tempest/security"
	"tempest/swim"
)

// Aims from the issue: p99 over the trials.
const (
	aimDetection = 3 * time.Second
	aimFailover  = 2 * time.Second
)

type driverConfig struct {
	trials          int
	nodes           int
	swimProfile     string
	electionProfile string
	kill            string
	steady          time.Duration
	timeout         time.Duration
	setupTimeout    time.Duration
	grace           time.Duration
	hog             int
	netns           bool
	lossPc          float64
	install         bool
	lhm             bool
	nodeLogLevel    string
	keep            bool
	nodeOwnGroup    bool
	nodeNice        int
	jsonOut         string
	verbose         bool
}

func parseDriverFlags(args []string) (driverConfig, error) {
	var c driverConfig
	fs := flag.NewFlagSet("failover", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: failover [flags]\n\nMeasures failure detection (swim) and leader failover (leadership) with real node\nprocesses killed by SIGKILL. See the package documentation for what is measured.\n\n")
		fs.PrintDefaults()
	}
	fs.IntVar(&c.trials, "trials", 20, "number of trials (one kill each)")
	fs.IntVar(&c.nodes, "nodes", 3, "node processes per trial (at least 3, so the survivors keep a quorum)")
	fs.StringVar(&c.swimProfile, "swim-profile", swim.ProfileLAN, "swim timing profile: lan (gates), fastlan (the default for managers and workers), local or test")
	fs.StringVar(&c.electionProfile, "election-profile", "lan", "leadership profile: lan, local or test")
	fs.StringVar(&c.kill, "kill", "leader", "victim of each trial: leader (measures detection and failover), follower, or alternate")
	fs.DurationVar(&c.steady, "steady", 10*time.Second, "steady-state window before each kill in which any dead event or election is a false positive")
	fs.DurationVar(&c.timeout, "timeout", 0, "how long to wait after a kill for detection and failover (0: twice the profile's detection bound plus four election timeouts plus 5s)")
	fs.DurationVar(&c.setupTimeout, "setup-timeout", 30*time.Second, "how long a fresh cluster may take to join and elect")
	fs.DurationVar(&c.grace, "grace", 3*time.Second, "how long survivors get to exit after SIGTERM before SIGKILL")
	fs.IntVar(&c.hog, "hog", 0, "busy-loop processes to run beside the nodes (2 saturates a 2-core machine)")
	fs.BoolVar(&c.netns, "netns", false, "run each node in its own network namespace behind a bridge (implied by -netns-loss)")
	fs.Float64Var(&c.lossPc, "netns-loss", 0, "percent of packets dropped on the bridge between the nodes' namespaces (needs root and iproute2)")
	fs.BoolVar(&c.install, "install", false, "apt-get install iproute2 (and nftables, if the kernel lacks netem) when missing")
	fs.BoolVar(&c.lhm, "lhm", true, "feed swim's local health score to the elector, as the roles do")
	fs.StringVar(&c.nodeLogLevel, "node-log-level", "warn", "log level of the node processes (their logs stay in the run directory)")
	fs.BoolVar(&c.nodeOwnGroup, "node-own-group", false, "start every node in its own session, hence its own scheduling group (autogroup), as systemd gives every service its own cgroup; default: the driver's group, beside the hogs")
	fs.IntVar(&c.nodeNice, "node-nice", 0, "nice value of the nodes: with -node-own-group the weight of each node's group (autogroup nice, like a unit's CPUWeight), otherwise the processes' own (nice(1), like a unit's Nice=)")
	fs.BoolVar(&c.keep, "keep", false, "keep the run directory (node logs and bbolt files) instead of deleting it")
	fs.StringVar(&c.jsonOut, "json", "", "also write the configuration, every trial and the summary as JSON to this file")
	fs.BoolVar(&c.verbose, "v", false, "debug logging from the driver")
	if err := fs.Parse(args); err != nil {
		return c, errUsage
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q (subcommands: node, hog)", fs.Args())
	}
	var errs []error
	if c.trials < 1 {
		errs = append(errs, errors.New("-trials must be at least 1"))
	}
	if c.nodes < 3 {
		errs = append(errs, errors.New("-nodes must be at least 3: two survivors of three are the smallest quorum"))
	}
	if _, err := swim.ProfileTiming(c.swimProfile); err != nil {
		errs = append(errs, fmt.Errorf("-swim-profile: %w", err))
	}
	if _, err := leadership.ProfileByName(c.electionProfile); err != nil {
		errs = append(errs, fmt.Errorf("-election-profile: %w", err))
	}
	switch c.kill {
	case "leader", "follower", "alternate":
	default:
		errs = append(errs, fmt.Errorf("-kill %q: want leader, follower or alternate", c.kill))
	}
	if c.steady < 0 || c.timeout < 0 || c.setupTimeout <= 0 || c.grace <= 0 {
		errs = append(errs, errors.New("-steady and -timeout must be >= 0, -setup-timeout and -grace > 0"))
	}
	if c.hog < 0 {
		errs = append(errs, errors.New("-hog must be >= 0"))
	}
	if c.nodeNice < -20 || c.nodeNice > 19 {
		errs = append(errs, errors.New("-node-nice must be in [-20, 19]"))
	}
	if c.lossPc < 0 || c.lossPc >= 100 || math.IsNaN(c.lossPc) {
		errs = append(errs, errors.New("-netns-loss must be in [0, 100)"))
	}
	if c.lossPc > 0 {
		c.netns = true
	}
	if c.netns && c.nodes > 250 {
		errs = append(errs, errors.New("-netns supports at most 250 nodes"))
	}
	return c, errors.Join(errs...)
}

type driver struct {
	cfg     driverConfig
	log     *slog.Logger
	out     io.Writer
	exe     string
	secret  string
	runDir  string
	timeout time.Duration
	lab     *netLab
	timing  swim.Timing
	elect   leadership.Profile
}

// Report is the -json output.
type Report struct {
	Date        string        `json:"date"`
	Command     string        `json:"command"`
	GoVersion   string        `json:"go_version"`
	NumCPU      int           `json:"num_cpu"`
	Config      reportConfig  `json:"config"`
	LoadStart   string        `json:"load_avg_start"`
	LoadEnd     string        `json:"load_avg_end"`
	CPUBusyPct  float64       `json:"cpu_busy_percent"`
	LossMethod  string        `json:"loss_method,omitempty"`
	LossSeen    uint64        `json:"loss_packets_seen,omitempty"`
	LossDropped uint64        `json:"loss_packets_dropped,omitempty"`
	Trials      []TrialResult `json:"trials"`
	Summary     summary       `json:"summary"`
}

type reportConfig struct {
	Trials          int     `json:"trials"`
	Nodes           int     `json:"nodes"`
	SwimProfile     string  `json:"swim_profile"`
	ElectionProfile string  `json:"election_profile"`
	Kill            string  `json:"kill"`
	SteadyNS        int64   `json:"steady_ns"`
	TimeoutNS       int64   `json:"timeout_ns"`
	Hog             int     `json:"hog"`
	Netns           bool    `json:"netns"`
	LossPercent     float64 `json:"loss_percent"`
	LHM             bool    `json:"lhm"`
	NodeOwnGroup    bool    `json:"node_own_group"`
	NodeNice        int     `json:"node_nice"`
}

func runDriver(ctx context.Context, args []string) (err error) {
	cfg, err := parseDriverFlags(args)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if cfg.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)

	d := &driver{cfg: cfg, log: log, out: os.Stdout}
	d.timing, _ = swim.ProfileTiming(cfg.swimProfile)
	d.elect, _ = leadership.ProfileByName(cfg.electionProfile)
	d.timeout = cfg.timeout
	if d.timeout == 0 {
		d.timeout = 2*d.timing.DetectionBound(cfg.nodes) + 4*d.elect.ElectionTimeout() + 5*time.Second
	}
	if d.exe, err = os.Executable(); err != nil {
		return fmt.Errorf("locate own executable: %w", err)
	}
	if d.secret, err = security.GenerateSecret(); err != nil {
		return fmt.Errorf("cluster secret: %w", err)
	}
	if d.runDir, err = os.MkdirTemp("", "tempest-failover-"); err != nil {
		return fmt.Errorf("run directory: %w", err)
	}
	trialsRan := false
	defer func() {
		if cfg.keep || (err != nil && trialsRan) {
			log.Info("run directory kept (node logs, bbolt files)", "dir", d.runDir)
			return
		}
		if rerr := os.RemoveAll(d.runDir); rerr != nil {
			log.Warn("removing run directory", "dir", d.runDir, "err", rerr)
		}
	}()

	if cfg.netns {
		if err := checkLabTools(ctx, cfg.install, log); err != nil {
			return err
		}
		lab, err := newNetLab(ctx, cfg.nodes, cfg.lossPc, cfg.install, log)
		if err != nil {
			return fmt.Errorf("network namespaces: %w", err)
		}
		d.lab = lab
		defer lab.Close()
	}

	rep := &Report{
		Date:      time.Now().UTC().Format(time.RFC3339),
		Command:   strings.Join(os.Args, " "),
		GoVersion: runtime.Version(),
		NumCPU:    runtime.NumCPU(),
		Config: reportConfig{
			Trials: cfg.trials, Nodes: cfg.nodes, SwimProfile: cfg.swimProfile, ElectionProfile: cfg.electionProfile,
			Kill: cfg.kill, SteadyNS: int64(cfg.steady), TimeoutNS: int64(d.timeout), Hog: cfg.hog,
			Netns: cfg.netns, LossPercent: cfg.lossPc, LHM: cfg.lhm,
			NodeOwnGroup: cfg.nodeOwnGroup, NodeNice: cfg.nodeNice,
		},
	}
	if d.lab != nil {
		rep.LossMethod = d.lab.method
	}

	var hogs []*proc
	var hogWG sync.WaitGroup
	defer func() {
		stopProcs(hogs, time.Second, log)
		hogWG.Wait()
	}()
	for i := range cfg.hog {
		p, err := startProc(ctx, procSpec{idx: i, name: fmt.Sprintf("hog-%d", i+1), argv: []string{d.exe, "hog"}}, nil, &hogWG, log)
		if err != nil {
			return fmt.Errorf("cpu hog: %w", err)
		}
		hogs = append(hogs, p)
	}
	if cfg.hog > 0 {
		// Let the hogs reach full speed before anything is measured.
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	rep.LoadStart = loadAvg()
	cpu0 := readCPU()
	d.header(rep)
	setupFailures := 0
	for n := 1; n <= cfg.trials; n++ {
		trialsRan = true
		res := d.runTrial(ctx, n)
		if ctx.Err() != nil {
			log.Warn("interrupted; cleaning up", "trials_done", n-1)
			break
		}
		rep.Trials = append(rep.Trials, res)
		d.printTrial(res)
		if res.Victim == "" {
			setupFailures++
		} else {
			setupFailures = 0
		}
		if setupFailures == 3 {
			err = errors.New("three trials in a row could not form a cluster; giving up (see the node logs in the run directory)")
			break
		}
	}
	rep.CPUBusyPct = busyPercent(cpu0, readCPU())
	rep.LoadEnd = loadAvg()
	if d.lab != nil && d.lab.method == "nftables" {
		seen, dropped, err := d.lab.lossStats(context.WithoutCancel(ctx))
		if err != nil {
			log.Warn("reading loss counters", "err", err)
		} else {
			rep.LossSeen, rep.LossDropped = seen, dropped
		}
	}
	rep.Summary = summarizeTrials(rep.Trials)
	if len(rep.Trials) > 0 {
		d.printSummary(rep)
	}
	if cfg.jsonOut != "" {
		if err := writeJSON(cfg.jsonOut, rep); err != nil {
			return err
		}
	}
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted: %w", context.Cause(ctx))
	}
	return nil
}

func writeJSON(path string, rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

func (d *driver) printf(format string, args ...any) {
	fmt.Fprintf(d.out, format, args...)
}

func (d *driver) header(rep *Report) {
	c, tm, el := d.cfg, d.timing, d.elect
	lo, hi := tm.SuspicionTimeout(c.nodes)
	network := "loopback (127.0.0.1)"
	if d.lab != nil {
		network = fmt.Sprintf("network namespaces + bridge, %g%% loss (%s)", c.lossPc, d.lab.method)
	}
	d.printf("# tempest failover benchmark  %s\n", rep.Date)
	d.printf("# %s, %d CPUs, load average at start %s\n", rep.GoVersion, rep.NumCPU, rep.LoadStart)
	d.printf("# nodes=%d trials=%d kill=%s steady=%s timeout=%s hog=%d lhm-to-elector=%t network=%s\n",
		c.nodes, c.trials, c.kill, c.steady, d.timeout, c.hog, c.lhm, network)
	sched := "in the driver's scheduling group, beside the hogs"
	if c.nodeOwnGroup {
		sched = "each in its own scheduling group (autogroup)"
	}
	d.printf("# nodes: %s, nice %d\n", sched, c.nodeNice)
	d.printf("# swim %q: probe %s, probe timeout %s, suspicion mult %d (timer %s..%s at n=%d), gossip %s; detection bound %s\n",
		c.swimProfile, tm.ProbeInterval, tm.ProbeTimeout, tm.SuspicionMult, lo, hi, c.nodes, tm.GossipInterval, tm.DetectionBound(c.nodes))
	d.printf("# election %q: tick %s, heartbeat %s, election timeout %s (randomised up to %s)\n",
		c.electionProfile, el.TickInterval, el.HeartbeatInterval(), el.ElectionTimeout(), 2*el.ElectionTimeout())
	d.printf("# detection = kill until the last survivor's swim OnDead; failover = kill until every survivor follows one new leader in a higher term (times in ms)\n")
}

func optMS(d *time.Duration) string {
	if d == nil {
		return "-"
	}
	return ms(*d)
}

func (d *driver) printTrial(r TrialResult) {
	role := "follower"
	if r.VictimWasLeader {
		role = "leader"
	}
	line := fmt.Sprintf("trial %2d  kill %s (%s, term %d)  detection %s (first %s)", r.Trial, r.Victim, role, r.KillTerm, optMS(r.Detection), optMS(r.DetectionFirst))
	if r.VictimWasLeader {
		line += fmt.Sprintf("  failover %s (first %s) -> %s term %d", optMS(r.Failover), optMS(r.FailoverFirst), r.NewLeader, r.NewTerm)
	}
	line += fmt.Sprintf("  | steady %.1fs: fp-dead %d elections %d suspect %d refute %d | after: fp-dead %d extra-terms %d | lhm %d/%d",
		r.Steady.Seconds(), r.FPDeadSteady, r.FPElectionsSteady, r.SuspectSteady, r.RefuteSteady, r.FPDeadAfterKill, r.ExtraTermsAfterKill, r.MaxLHMSteady, r.MaxLHM)
	line += fmt.Sprintf(" | stalls %d", r.Stalls)
	if r.MaxStall != nil {
		line += fmt.Sprintf(" (max %d ms, cpu-wait %d ms)", r.MaxStall.GapMS, r.MaxStall.WaitMS)
	}
	line += fmt.Sprintf(" quiet %d (max %d ms) rcvbuf %d", r.Quiets, r.MaxQuietMS, r.UDPRcvbuf)
	if r.Error != "" {
		line += "\n          ERROR: " + r.Error
	}
	d.printf("%s\n", line)
}

type summary struct {
	Detection      dist `json:"detection"`
	DetectionFirst dist `json:"detection_first"`
	Failover       dist `json:"failover"`
	FailoverFirst  dist `json:"failover_first"`

	Completed        int           `json:"completed"`
	Failed           int           `json:"failed"`
	TimedOut         int           `json:"timed_out"`
	SteadyTotal      time.Duration `json:"steady_total_ns"`
	FPDeadSteady     int           `json:"fp_dead_steady"`
	FPElections      int           `json:"fp_elections_steady"`
	LeaderLostSteady int           `json:"leader_lost_steady"`
	SuspectSteady    int           `json:"suspect_steady"`
	RefuteSteady     int           `json:"refute_steady"`
	FPDeadAfterKill  int           `json:"fp_dead_after_kill"`
	SuspectAfterKill int           `json:"suspect_after_kill"`
	ExtraTerms       int           `json:"extra_terms_after_kill"`
	TrialsExtraTerms int           `json:"trials_with_extra_terms"`
	MaxLHMSteady     int           `json:"max_lhm_steady"`
	MaxLHM           int           `json:"max_lhm"`
	watchTotals
}

func summarizeTrials(trials []TrialResult) summary {
	var s summary
	var det, detFirst, fo, foFirst []time.Duration
	for _, r := range trials {
		if r.Error != "" {
			s.Failed++
		} else {
			s.Completed++
		}
		if r.TimedOut {
			s.TimedOut++
		}
		if r.Detection != nil {
			det = append(det, *r.Detection)
		}
		if r.DetectionFirst != nil {
			detFirst = append(detFirst, *r.DetectionFirst)
		}
		if r.Failover != nil {
			fo = append(fo, *r.Failover)
		}
		if r.FailoverFirst != nil {
			foFirst = append(foFirst, *r.FailoverFirst)
		}
		s.SteadyTotal += r.Steady
		s.FPDeadSteady += r.FPDeadSteady
		s.FPElections += r.FPElectionsSteady
		s.LeaderLostSteady += r.LeaderLostSteady
		s.SuspectSteady += r.SuspectSteady
		s.RefuteSteady += r.RefuteSteady
		s.FPDeadAfterKill += r.FPDeadAfterKill
		s.SuspectAfterKill += r.SuspectAfterKill
		s.ExtraTerms += r.ExtraTermsAfterKill
		if r.ExtraTermsAfterKill > 0 {
			s.TrialsExtraTerms++
		}
		s.watchTotals.add(r.watchTotals)
		s.MaxLHM = max(s.MaxLHM, r.MaxLHM)
		s.MaxLHMSteady = max(s.MaxLHMSteady, r.MaxLHMSteady)
	}
	s.Detection, s.DetectionFirst = summarize(det), summarize(detFirst)
	s.Failover, s.FailoverFirst = summarize(fo), summarize(foFirst)
	return s
}

func (d *driver) printSummary(rep *Report) {
	s := rep.Summary
	d.printf("\n%-24s %4s %7s %7s %7s %7s %7s %7s\n", "metric (ms)", "n", "p50", "p90", "p99", "min", "max", "mean")
	row := func(name string, x dist) {
		if x.N == 0 {
			d.printf("%-24s %4d %7s %7s %7s %7s %7s %7s\n", name, 0, "-", "-", "-", "-", "-", "-")
			return
		}
		d.printf("%-24s %4d %7s %7s %7s %7s %7s %7s\n", name, x.N, ms(x.P50), ms(x.P90), ms(x.P99), ms(x.Min), ms(x.Max), ms(x.Mean))
	}
	row("detection (all peers)", s.Detection)
	row("detection (first peer)", s.DetectionFirst)
	row("failover (all agree)", s.Failover)
	row("failover (first report)", s.FailoverFirst)

	nodeSec := s.SteadyTotal.Seconds() * float64(d.cfg.nodes)
	d.printf("\ntrials: %d completed, %d failed (%d timed out after %s); failed trials are not in the percentiles\n", s.Completed, s.Failed, s.TimedOut, d.timeout)
	d.printf("steady state (%.0f s in all, %.0f node-seconds): false dead events %d, elections %d, \"no leader\" reports %d, failed probes of healthy nodes %d, refuted suspicions %d\n",
		s.SteadyTotal.Seconds(), nodeSec, s.FPDeadSteady, s.FPElections, s.LeaderLostSteady, s.SuspectSteady, s.RefuteSteady)
	d.printf("after kills: survivors declared dead %d, failed probes of survivors %d, extra election terms %d (in %d trials)\n",
		s.FPDeadAfterKill, s.SuspectAfterKill, s.ExtraTerms, s.TrialsExtraTerms)
	d.printf("highest Lifeguard local health score: %d in steady state, %d including the kills (the elector refuses leaders above %d)\n",
		s.MaxLHMSteady, s.MaxLHM, d.elect.MaxLeaderLHM)
	d.printf("node watch: %d process stalls >= %s (longest %s), %d spells of %s or more without answering a ping (longest %d ms), UDP receive-buffer drops %d, UDP in-errors %d\n",
		s.Stalls, stallThreshold, s.MaxStall, s.Quiets, quietThreshold, s.MaxQuietMS, s.UDPRcvbuf, s.UDPInErrors)
	d.printf("host: load average %s at start, %s at end; CPU busy %.0f%% over the run\n", rep.LoadStart, rep.LoadEnd, rep.CPUBusyPct)
	if rep.LossSeen > 0 {
		d.printf("loss: %d of %d packets crossing the bridge dropped (%.2f%%)\n", rep.LossDropped, rep.LossSeen, 100*float64(rep.LossDropped)/float64(rep.LossSeen))
	}
	verdict := func(x dist, aim time.Duration, want int) string {
		switch {
		case x.N == 0:
			return "not measured"
		case x.N < want:
			return fmt.Sprintf("NOT MET (only %d of %d trials finished)", x.N, want)
		case x.P99 <= aim:
			return fmt.Sprintf("met (p99 %s <= %s)", ms(x.P99)+"ms", aim)
		default:
			return fmt.Sprintf("NOT MET (p99 %s > %s)", ms(x.P99)+"ms", aim)
		}
	}
	leaderKills := 0
	for _, r := range rep.Trials {
		if r.VictimWasLeader {
			leaderKills++
		}
	}
	d.printf("aim: detection %s; failover %s\n", verdict(s.Detection, aimDetection, len(rep.Trials)), verdict(s.Failover, aimFailover, leaderKills))
	// One markdown row for the README's results table.
	loss := "-"
	if d.cfg.netns {
		loss = fmt.Sprintf("%g%%", d.cfg.lossPc)
	}
	d.printf("\n| swim | election | hog | loss | trials | detect p50 | detect p99 | failover p50 | failover p99 | false dead | false elections | suspicions (refuted) | load avg (1 min) |\n")
	d.printf("| %s | %s | %d | %s | %d/%d | %s | %s | %s | %s | %d | %d | %d (%d) | %s |\n",
		d.cfg.swimProfile, d.cfg.electionProfile, d.cfg.hog, loss, s.Completed, len(rep.Trials),
		mdMS(s.Detection.N, s.Detection.P50), mdMS(s.Detection.N, s.Detection.P99),
		mdMS(s.Failover.N, s.Failover.P50), mdMS(s.Failover.N, s.Failover.P99),
		s.FPDeadSteady+s.FPDeadAfterKill, s.FPElections, s.SuspectSteady, s.RefuteSteady, firstField(rep.LoadStart)+" → "+firstField(rep.LoadEnd))
}

func mdMS(n int, d time.Duration) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func firstField(s string) string {
	f, _, _ := strings.Cut(s, " ")
	return f
}
