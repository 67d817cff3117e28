// Command heartbeat measures how fresh a manager leader's view of its
// workers is as the number of workers grows: the staleness of a worker is
// now − when the leader last had its heartbeat (new or repeated), read from
// the leader's cluster view (api.NodeView.HeartbeatAgeMs).
//
// Each cell runs one real manager (QUIC transport, SWIM on memberlist,
// election, bbolt store; a datacenter of one, so it leads at once) and N
// real workers, all in this process: every worker is a worker.Worker with
// its own QUIC endpoint and its own memberlist node on a loopback address
// of its own (127.0.x.y, so per-IP limits see separate hosts), joined to
// the manager's SWIM and registered with it, exactly as the worker binary
// runs it. Only the process boundary is missing: a 2-core machine cannot
// run a hundred worker processes, but it can run a hundred workers' network
// stacks in one. Two modes, run side by side in rotating order:
//
//   - passive: Config.HeartbeatPush 0, heartbeats only in SWIM acks (the
//     channel the design started with);
//   - push: the worker also pushes its heartbeat to the leader over QUIC
//     every -push.
//
// Once the leader has had a heartbeat of every worker (so the passive
// channel has been round once: its steady state), or a minute and two
// probe rounds have passed, and a further -warmup, the
// leader's view is sampled every -every for -window; every sample of every
// worker is one staleness observation, a worker never heard from counting
// as stale since the cell began.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"tempest/bench/internal/stats"
	"tempest/manager"
	"tempest/security"
	"tempest/swim"
	"tempest/wire"
	"tempest/worker"
	"tempest/workflow"
)

type options struct {
	counts  []int
	reps    int
	profile string
	push    time.Duration
	warmup  time.Duration
	window  time.Duration
	every   time.Duration
	only    string
	stagger time.Duration
	detail  bool
}

func main() {
	var o options
	var counts string
	flag.StringVar(&counts, "workers", "10,30,100", "worker counts to measure")
	flag.IntVar(&o.reps, "reps", 2, "repetitions of every (count, mode) cell, modes in rotating order")
	flag.StringVar(&o.profile, "swim-profile", swim.ProfileFastLAN, "SWIM profile of every node")
	flag.DurationVar(&o.push, "push", worker.DefaultHeartbeatPush, "HeartbeatPush of the push mode")
	flag.DurationVar(&o.warmup, "warmup", 5*time.Second, "time from the leader having heard from every worker to the first sample")
	flag.DurationVar(&o.window, "window", 20*time.Second, "sampling window per cell")
	flag.DurationVar(&o.every, "every", 200*time.Millisecond, "sampling period")
	flag.StringVar(&o.only, "only", "", "run one mode only: passive or push")
	flag.DurationVar(&o.stagger, "stagger", 100*time.Millisecond, "pause between starting two workers")
	flag.BoolVar(&o.detail, "detail", false, "print, per cell, which workers and which seconds had samples over 1 s")
	flag.Parse()
	for _, f := range strings.Split(counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "heartbeat: -workers: %q is not a count\n", f)
			os.Exit(2)
		}
		o.counts = append(o.counts, n)
	}
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "heartbeat: %v\n", err)
		os.Exit(1)
	}
}

type cellKey struct {
	n    int
	push bool
}

func run(o options) error {
	timing, err := swim.ProfileTiming(o.profile)
	if err != nil {
		return err
	}
	fmt.Printf("# tempest heartbeat staleness  %s\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("# %s, %d CPUs, load average at start %s\n", runtime.Version(), runtime.NumCPU(), loadavg())
	fmt.Printf("# swim %q (probe %s), push every %s in push mode, window %s sampled every %s, %d reps\n",
		o.profile, timing.ProbeInterval, o.push, o.window, o.every, o.reps)
	samples := map[cellKey][]time.Duration{}
	for rep := range o.reps {
		for i, n := range o.counts {
			modes := []bool{false, true}
			if (rep+i)%2 == 1 {
				modes = []bool{true, false}
			}
			if o.only != "" {
				modes = []bool{o.only == "push"}
			}
			for _, push := range modes {
				var cpu float64
				xs, err := cell(n, push, o, timing, &cpu)
				if err != nil {
					return fmt.Errorf("rep %d, %d workers, push %v: %w", rep+1, n, push, err)
				}
				d := stats.Summarize(xs)
				line := fmt.Sprintf("rep %d  workers %3d  %-7s  p50 %6s  p99 %7s  max %7s  cpu %.2f cores  (n=%d, load %s)",
					rep+1, n, mode(push), ms(d.P50), ms(d.P99), ms(d.Max), cpu, d.N, loadavg())
				fmt.Println(line)
				k := cellKey{n, push}
				samples[k] = append(samples[k], xs...)
			}
		}
	}
	fmt.Println()
	fmt.Println("| workers | passive p50 | passive p99 | push p50 | push p99 | p99 passive ÷ push |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, n := range o.counts {
		a, b := stats.Summarize(samples[cellKey{n, false}]), stats.Summarize(samples[cellKey{n, true}])
		ratio := "-"
		if b.P99 > 0 {
			ratio = fmt.Sprintf("%.1f×", float64(a.P99)/float64(b.P99))
		}
		fmt.Printf("| %d | %s | %s | %s | %s | %s |\n", n, ms(a.P50), ms(a.P99), ms(b.P50), ms(b.P99), ratio)
	}
	fmt.Printf("\n# load average at end %s\n", loadavg())
	return nil
}

func mode(push bool) string {
	if push {
		return "push"
	}
	return "passive"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond)) }

// cell runs one manager and n workers and returns the staleness samples.
// cpuShare receives the process's CPU time over the window per second of
// it (1.0 = one core busy): what the nodes cost, pushes included.
func cell(n int, push bool, o options, timing swim.Timing, cpuShare *float64) ([]time.Duration, error) {
	secret, err := security.GenerateSecret()
	if err != nil {
		return nil, err
	}
	keyring := func() (*security.Keyring, error) { return security.NewKeyring(secret, "") }
	dir, err := os.MkdirTemp("", "tempest-hb-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	quicAddr, err := freeAddr("udp")
	if err != nil {
		return nil, err
	}
	swimAddr, err := freeAddr("tcp")
	if err != nil {
		return nil, err
	}
	mcfg := manager.DefaultConfig()
	mcfg.ID, mcfg.Datacenter = "m1", "dc1"
	mcfg.QUICListen, mcfg.SwimBind = quicAddr, swimAddr
	mcfg.Peers = []manager.Peer{{ID: "m1", QUIC: quicAddr}}
	mcfg.DataDir = dir
	mcfg.SwimProfile = o.profile
	mcfg.Logger = log
	mk, err := keyring()
	if err != nil {
		return nil, err
	}
	m, err := manager.New(mcfg, manager.Deps{Keyring: mk, Registry: workflow.DefaultRegistry()})
	if err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	mdone := make(chan error, 1)
	go func() { mdone <- m.Run(ctx) }()
	defer func() {
		cancel()
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = m.Shutdown(sctx)
		<-mdone
	}()

	start := time.Now()
	var workers []chan error
	wctx, stopWorkers := context.WithCancel(context.Background())
	defer func() {
		stopWorkers()
		for _, done := range workers {
			<-done
		}
	}()
	for i := range n {
		wcfg := worker.DefaultConfig()
		wcfg.ID, wcfg.Datacenter, wcfg.Cores = fmt.Sprintf("w%03d", i+1), "dc1", 4
		wcfg.SwimProfile, wcfg.Join, wcfg.Managers = o.profile, []string{swimAddr}, []string{quicAddr}
		// Each worker on its own loopback address, as on its own host: the
		// manager's per-IP connection limits then see a hundred hosts,
		// not one connecting a hundred times.
		ip := fmt.Sprintf("127.0.%d.%d", 1+i/250, 1+i%250)
		wcfg.QUICListen, wcfg.SwimBind = ip+":0", ip+":0"
		wcfg.HeartbeatPush = 0
		if push {
			wcfg.HeartbeatPush = o.push
		}
		wcfg.Logger = log
		wk, err := keyring()
		if err != nil {
			return nil, err
		}
		w, err := worker.New(wcfg, worker.Deps{Keyring: wk, Registry: workflow.DefaultRegistry()})
		if err != nil {
			return nil, fmt.Errorf("worker %d: %w", i+1, err)
		}
		done := make(chan error, 1)
		workers = append(workers, done)
		go func() { done <- w.Run(wctx) }()
		// Workers come up over a few seconds, as hosts do, not in one
		// burst of handshakes on a 2-core machine.
		time.Sleep(o.stagger)
	}

	// Every worker registered and heard from in the leader's view: its
	// key ids come only in heartbeats, so a SendKey means at least one
	// arrived (a SWIM join alone shows the worker with no cores).
	deadline := time.Now().Add(2*time.Minute + 8*time.Duration(n)*timing.ProbeInterval)
	lastNote := time.Now()
	for {
		view, err := m.Cluster(ctx)
		if err != nil {
			return nil, err
		}
		alive, registered, known := 0, 0, 0
		for _, nv := range view.Nodes {
			if nv.Role != string(wire.RoleWorker) {
				continue
			}
			known++
			if nv.TotalCores == 4 {
				registered++
				if nv.SendKey != "" {
					alive++
				}
			}
		}
		// Some workers may not have been heard from yet (on a starved host a
		// registration or SWIM join can still be backing off): after a
		// minute and two probe rounds the leader's view is what it is, and
		// a worker it never heard from counts as stale since the cell began.
		settled := time.Since(start) > 60*time.Second+2*time.Duration(n)*timing.ProbeInterval
		// Not m.IsLeader(): the only manager may step down for a moment
		// when its Lifeguard score climbs on a starved host; its view of
		// the workers is still the one a scheduler uses.
		if alive == n || settled {
			if alive < n {
				fmt.Fprintf(os.Stderr, "# %d workers, push %v: sampling with %d never heard from (%d not registered)\n", n, push, n-alive, n-registered)
			}
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d workers heard from in the leader's view after %s (%d known, %d with cores)",
				alive, n, time.Since(start).Round(time.Second), known, registered)
		}
		if time.Since(lastNote) > 15*time.Second {
			lastNote = time.Now()
			fmt.Fprintf(os.Stderr, "# %d workers, push %v: %d known, %d with cores, %d heard from after %s\n",
				n, push, known, registered, alive, time.Since(start).Round(time.Second))
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(o.warmup)

	var xs []time.Duration
	over, overAt := map[string]int{}, map[time.Duration]int{}
	cpu0, wall0 := cpuTime(), time.Now()
	defer func() { *cpuShare = float64(cpuTime()-cpu0) / float64(time.Since(wall0)) }()
	t := time.NewTicker(o.every)
	defer t.Stop()
	end := time.Now().Add(o.window)
	for now := range t.C {
		if now.After(end) {
			break
		}
		view, err := m.Cluster(ctx)
		if err != nil {
			return nil, err
		}
		for _, nv := range view.Nodes {
			if nv.Role != string(wire.RoleWorker) {
				continue
			}
			if nv.SendKey == "" {
				// No heartbeat yet: the key ids come only in heartbeats
				// (and a 0 age is omitted from the JSON view, like this).
				xs = append(xs, now.Sub(start))
				continue
			}
			age := time.Duration(nv.HeartbeatAgeMs) * time.Millisecond
			xs = append(xs, age)
			if age > time.Second {
				over[nv.Name]++
				overAt[now.Sub(wall0).Truncate(time.Second)]++
			}
		}
	}
	if o.detail {
		// Whether stale samples are a few workers' (a push path that
		// breaks) or everyone's at the same moments (a stalled process).
		fmt.Fprintf(os.Stderr, "# samples over 1s, by worker: %v\n# by second of the window: %v\n", over, overAt)
	}
	return xs, nil
}

func freeAddr(network string) (string, error) {
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		defer c.Close()
		return c.LocalAddr().String(), nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
