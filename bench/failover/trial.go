package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// TrialResult is what one trial measured. Durations are nanoseconds in
// JSON; a nil pointer means the trial did not get that far.
type TrialResult struct {
	Trial           int    `json:"trial"`
	Victim          string `json:"victim,omitempty"`
	VictimWasLeader bool   `json:"victim_was_leader"`
	KillTerm        uint64 `json:"kill_term,omitempty"`
	NewLeader       string `json:"new_leader,omitempty"`
	NewTerm         uint64 `json:"new_term,omitempty"`

	Setup          time.Duration  `json:"setup_ns"`
	Steady         time.Duration  `json:"steady_ns"`
	Detection      *time.Duration `json:"detection_ns,omitempty"`       // every survivor declared the victim dead
	DetectionFirst *time.Duration `json:"detection_first_ns,omitempty"` // the first survivor did
	Failover       *time.Duration `json:"failover_ns,omitempty"`        // every survivor follows the new leader
	FailoverFirst  *time.Duration `json:"failover_first_ns,omitempty"`  // the first survivor reported it
	TimedOut       bool           `json:"timed_out"`

	// Steady-state window: nothing was wrong, so all of these are false.
	FPDeadSteady      int `json:"fp_dead_steady"`      // dead events (per observer)
	FPElectionsSteady int `json:"fp_elections_steady"` // terms started
	LeaderLostSteady  int `json:"leader_lost_steady"`  // "no leader" reports (per observer)
	SuspectSteady     int `json:"suspect_steady"`      // failed probes of healthy nodes
	RefuteSteady      int `json:"refute_steady"`       // suspicions a healthy node refuted

	// After the kill: about nodes other than the victim.
	FPDeadAfterKill     int `json:"fp_dead_after_kill"`
	SuspectAfterKill    int `json:"suspect_after_kill"`
	ExtraTermsAfterKill int `json:"extra_terms_after_kill"` // leader kill: terms beyond the one that won; follower kill: any new term
	LeaderLostAfterKill int `json:"leader_lost_after_kill"` // follower kill only
	MaxLHMSteady        int `json:"max_lhm_steady"`         // highest Lifeguard score before the kill
	MaxLHM              int `json:"max_lhm"`                // highest, kill included
	// What the nodes' watch saw, steady window and kill alike.
	watchTotals

	SetupDeadEvents int `json:"setup_dead_events"`
	SetupAttempts   int `json:"setup_attempts"`
	TermAtReady     int `json:"term_at_ready"` // terms the first election took

	Error string `json:"error,omitempty"`
}

type phase int

const (
	phaseSetup phase = iota
	phaseSteady
	phaseAfterKill
)

// nodeSpec is where one node listens.
type nodeSpec struct {
	id       string
	bind     string
	quicPort int
	swimPort int
	ns       string // network namespace, "" for the driver's own
}

func (n nodeSpec) quicAddr() string { return net.JoinHostPort(n.bind, strconv.Itoa(n.quicPort)) }
func (n nodeSpec) swimAddr() string { return net.JoinHostPort(n.bind, strconv.Itoa(n.swimPort)) }

// view is what the driver knows of one node's beliefs, from its events.
type view struct {
	id       string
	up       bool
	ready    bool
	exited   bool
	alive    map[string]bool
	leader   string
	term     uint64
	leaderAt time.Time
}

func (v *view) aliveCount() int {
	n := 0
	for _, ok := range v.alive {
		if ok {
			n++
		}
	}
	return n
}

// trial is one cluster of node processes and the bookkeeping of a trial.
type trial struct {
	log    *slog.Logger
	res    *TrialResult
	procs  []*proc
	views  []*view
	index  map[string]int
	events chan nodeEvent
	cancel context.CancelFunc
	wg     sync.WaitGroup
	grace  time.Duration

	phase     phase
	fatal     error
	baseTerm  uint64 // agreed term when the steady window opened
	maxTerm   uint64 // highest term any node reported
	victim    int
	killAt    time.Time
	killTerm  uint64
	deadAt    map[int]time.Time
	firstNew  time.Time // first report of a new leader after a leader kill
	failover  time.Time // last survivor's report of the agreed new leader
	newLeader string
	newTerm   uint64
}

var errDeadline = errors.New("deadline passed")

// startTrial starts one node process per spec.
func (d *driver) startTrial(ctx context.Context, res *TrialResult, dir string, specs []nodeSpec) (*trial, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("trial directory: %w", err)
	}
	evCtx, cancel := context.WithCancel(ctx)
	t := &trial{
		log:    d.log.With("trial", res.Trial),
		res:    res,
		index:  map[string]int{},
		events: make(chan nodeEvent, 256),
		cancel: cancel,
		grace:  d.cfg.grace,
		victim: -1,
		deadAt: map[int]time.Time{},
	}
	peers := make([]string, len(specs))
	for i, s := range specs {
		peers[i] = s.id + "=" + s.quicAddr()
		t.index[s.id] = i
		t.views = append(t.views, &view{id: s.id, alive: map[string]bool{}})
	}
	for i, s := range specs {
		argv := []string{
			d.exe, "node",
			"-id", s.id,
			"-bind", s.bind,
			"-quic-port", strconv.Itoa(s.quicPort),
			"-swim-port", strconv.Itoa(s.swimPort),
			"-peers", strings.Join(peers, ","),
			"-swim-profile", d.cfg.swimProfile,
			"-election-profile", d.cfg.electionProfile,
			"-data", filepath.Join(dir, s.id),
			"-lhm=" + strconv.FormatBool(d.cfg.lhm),
			"-log-level", d.cfg.nodeLogLevel,
		}
		// Everyone joins the first node: the join graph is a star, so the
		// cluster cannot form as two halves that never meet.
		if i > 0 {
			argv = append(argv, "-seeds", specs[0].swimAddr())
		}
		switch {
		case d.cfg.nodeOwnGroup:
			argv = append(argv, "-group-nice", strconv.Itoa(d.cfg.nodeNice))
		case d.cfg.nodeNice != 0:
			argv = append([]string{"nice", "-n", strconv.Itoa(d.cfg.nodeNice)}, argv...)
		}
		if s.ns != "" {
			// ip netns exec execs the command in place: the pid is the node's.
			argv = append([]string{"ip", "netns", "exec", s.ns}, argv...)
		}
		p, err := startProc(evCtx, procSpec{
			idx:     i,
			name:    s.id,
			argv:    argv,
			env:     []string{"AUTH_SECRET=" + d.secret},
			logPath: filepath.Join(dir, s.id+".log"),
			setsid:  d.cfg.nodeOwnGroup,
		}, t.events, &t.wg, d.log)
		if err != nil {
			t.stop()
			return nil, err
		}
		t.procs = append(t.procs, p)
	}
	return t, nil
}

// stop ends every node process and waits for their readers.
func (t *trial) stop() {
	t.cancel()
	stopProcs(t.procs, t.grace, t.log)
	t.wg.Wait()
}

// pump applies events until cond holds, the deadline passes (errDeadline)
// or ctx ends.
func (t *trial) pump(ctx context.Context, deadline time.Time, cond func() bool) error {
	if cond() {
		return nil
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		select {
		case ne := <-t.events:
			t.apply(ne)
			if t.fatal != nil {
				return t.fatal
			}
			if cond() {
				return nil
			}
		case <-timer.C:
			return errDeadline
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (t *trial) apply(ne nodeEvent) {
	v := t.views[ne.from]
	ev := ne.ev
	switch ev.Ev {
	case "up":
		v.up = true
	case "ready":
		v.ready = true
	case "join":
		v.alive[ev.Node] = true
	case "dead":
		v.alive[ev.Node] = false
		switch t.phase {
		case phaseSetup:
			t.res.SetupDeadEvents++
		case phaseSteady:
			t.res.FPDeadSteady++
			t.log.Warn("false positive: healthy node declared dead", "observer", v.id, "node", ev.Node, "state", ev.State)
		case phaseAfterKill:
			if ev.Node == t.views[t.victim].id {
				if _, seen := t.deadAt[ne.from]; !seen {
					t.deadAt[ne.from] = ev.Time()
				}
			} else {
				t.res.FPDeadAfterKill++
				t.log.Warn("false positive after kill: survivor declared dead", "observer", v.id, "node", ev.Node)
			}
		}
	case "leader":
		changed := ev.Leader != v.leader || ev.Term != v.term
		v.leader, v.term, v.leaderAt = ev.Leader, ev.Term, ev.Time()
		t.maxTerm = max(t.maxTerm, ev.Term)
		if !changed {
			return
		}
		switch t.phase {
		case phaseSteady:
			if ev.Leader == "" {
				t.res.LeaderLostSteady++
			}
			t.log.Warn("leadership changed during steady state", "observer", v.id, "leader", ev.Leader, "term", ev.Term)
		case phaseAfterKill:
			if !t.res.VictimWasLeader {
				if ev.Leader == "" {
					t.res.LeaderLostAfterKill++
				}
				t.log.Warn("leadership changed after a follower was killed", "observer", v.id, "leader", ev.Leader, "term", ev.Term)
				return
			}
			if t.firstNew.IsZero() && ev.Leader != "" && ev.Leader != t.views[t.victim].id && ev.Term > t.killTerm {
				t.firstNew = ev.Time()
			}
			t.checkFailover()
		}
	case "suspect":
		switch t.phase {
		case phaseSteady:
			t.res.SuspectSteady++
		case phaseAfterKill:
			if ev.Node != t.views[t.victim].id {
				t.res.SuspectAfterKill++
			}
		}
	case "refute":
		if t.phase == phaseSteady {
			t.res.RefuteSteady++
		}
	case "lhm":
		if ev.LHM != nil && t.phase != phaseSetup {
			t.res.MaxLHM = max(t.res.MaxLHM, *ev.LHM)
			if t.phase == phaseSteady {
				t.res.MaxLHMSteady = max(t.res.MaxLHMSteady, *ev.LHM)
			}
		}
	case "stall":
		if ev.Watch == nil || t.phase == phaseSetup {
			return
		}
		t.res.Stalls++
		if t.res.MaxStall == nil || ev.Watch.GapMS > t.res.MaxStall.GapMS {
			t.res.MaxStall = ev.Watch
		}
		if ev.Watch.GapMS >= 2*stallThreshold.Milliseconds() {
			t.log.Warn("node process stalled", "node", v.id, "at", ev.Time().Format("15:04:05.000"), "detail", ev.Watch.String())
		}
	case "quiet":
		if ev.Watch == nil || t.phase == phaseSetup {
			return
		}
		t.res.Quiets++
		t.res.MaxQuietMS = max(t.res.MaxQuietMS, ev.Watch.GapMS)
		t.log.Warn("node answered no ping", "node", v.id, "from", time.Unix(0, ev.Watch.StartT).Format("15:04:05.000"), "ms", ev.Watch.GapMS)
	case "udp":
		if ev.Watch != nil {
			t.res.UDPRcvbuf += ev.Watch.RcvbufErrs
			t.res.UDPInErrors += ev.Watch.InErrs
		}
	case "exit":
		v.exited = true
		if ne.from != t.victim {
			p := t.procs[ne.from]
			t.fatal = fmt.Errorf("node %s exited unexpectedly (%v); last log lines:\n%s", v.id, p.waitErr, logTail(p.log, 15))
		}
	default:
		t.log.Debug("unknown event", "from", v.id, "ev", ev.Ev)
	}
}

// checkFailover records the moment every survivor follows one new leader
// in a term above the one the victim led.
func (t *trial) checkFailover() {
	if !t.failover.IsZero() {
		return
	}
	victim := t.views[t.victim].id
	var (
		leader string
		term   uint64
		latest time.Time
	)
	for i, v := range t.views {
		if i == t.victim {
			continue
		}
		if v.leader == "" || v.leader == victim || v.term <= t.killTerm {
			return
		}
		if leader == "" {
			leader, term = v.leader, v.term
		} else if v.leader != leader || v.term != term {
			return
		}
		if v.leaderAt.After(latest) {
			latest = v.leaderAt
		}
	}
	t.failover, t.newLeader, t.newTerm = latest, leader, term
}

// agreed reports whether every node is up, has joined, sees all the others
// alive, and follows the same leader in the same term.
func (t *trial) agreed() bool {
	want := len(t.views) - 1
	first := t.views[0]
	for _, v := range t.views {
		if !v.up || !v.ready || v.exited || v.aliveCount() != want {
			return false
		}
		if v.leader == "" || v.leader != first.leader || v.term != first.term {
			return false
		}
	}
	return true
}

func (t *trial) detectionDone() bool {
	for i := range t.views {
		if i == t.victim {
			continue
		}
		if _, ok := t.deadAt[i]; !ok {
			return false
		}
	}
	return true
}

func (t *trial) afterKillDone() bool {
	return t.detectionDone() && (!t.res.VictimWasLeader || !t.failover.IsZero())
}

// runTrial runs one trial end to end; the returned result always carries
// what was measured, and Error says why it stopped short.
func (d *driver) runTrial(ctx context.Context, n int) TrialResult {
	res := TrialResult{Trial: n}
	dir := filepath.Join(d.runDir, fmt.Sprintf("trial-%02d", n))
	var t *trial
	var err error
	// A node that fails to start (a port taken between probing and binding)
	// costs a retry with fresh ports, not the trial.
	for attempt := 1; attempt <= 3; attempt++ {
		res = TrialResult{Trial: n, SetupAttempts: attempt}
		adir := filepath.Join(dir, fmt.Sprintf("attempt-%d", attempt))
		t, err = d.setupTrial(ctx, &res, adir)
		if err == nil || ctx.Err() != nil {
			break
		}
		d.log.Warn("trial setup failed", "trial", n, "attempt", attempt, "err", err)
	}
	if err != nil {
		res.Error = "setup: " + err.Error()
		return res
	}
	defer t.stop()
	if err := d.measure(ctx, t); err != nil {
		res.Error = err.Error()
	}
	return res
}

// setupTrial starts the nodes and waits until they agree.
func (d *driver) setupTrial(ctx context.Context, res *TrialResult, dir string) (*trial, error) {
	specs, err := d.nodeSpecs()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	t, err := d.startTrial(ctx, res, dir, specs)
	if err != nil {
		return nil, err
	}
	if err := t.pump(ctx, start.Add(d.cfg.setupTimeout), t.agreed); err != nil {
		t.stop()
		if errors.Is(err, errDeadline) {
			err = fmt.Errorf("no agreed cluster within %s: %s", d.cfg.setupTimeout, t.describe())
		}
		return nil, err
	}
	res.Setup = time.Since(start)
	res.TermAtReady = int(t.views[0].term)
	return t, nil
}

// measure runs the steady window, the kill and the wait for its detection.
func (d *driver) measure(ctx context.Context, t *trial) error {
	res := t.res
	t.phase = phaseSteady
	t.baseTerm = t.views[0].term
	steadyStart := time.Now()
	if err := t.pump(ctx, steadyStart.Add(d.cfg.steady), func() bool { return false }); !errors.Is(err, errDeadline) {
		return fmt.Errorf("steady window: %w", err)
	}
	// A disturbed steady window must settle before anything is killed; the
	// time it takes still counts as steady state.
	if err := t.pump(ctx, time.Now().Add(d.cfg.setupTimeout), t.agreed); err != nil {
		return fmt.Errorf("cluster did not settle after the steady window: %w (%s)", err, t.describe())
	}
	res.Steady = time.Since(steadyStart)
	res.FPElectionsSteady = int(t.maxTerm - t.baseTerm)

	leader := t.index[t.views[0].leader]
	victim := leader
	killLeader := d.cfg.kill == "leader" || (d.cfg.kill == "alternate" && res.Trial%2 == 1)
	if !killLeader {
		var followers []int
		for i := range t.views {
			if i != leader {
				followers = append(followers, i)
			}
		}
		victim = followers[res.Trial%len(followers)]
	}
	t.victim = victim
	t.killTerm = t.views[0].term
	t.maxTerm = t.killTerm
	res.Victim = t.views[victim].id
	res.VictimWasLeader = victim == leader
	res.KillTerm = t.killTerm

	t.phase = phaseAfterKill
	t.killAt = time.Now()
	if err := t.procs[victim].signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill: %w", err)
	}
	err := t.pump(ctx, t.killAt.Add(d.timeout), t.afterKillDone)
	t.record()
	if errors.Is(err, errDeadline) {
		res.TimedOut = true
		return fmt.Errorf("timed out after %s: %s", d.timeout, t.describe())
	}
	return err
}

// record turns the event times into the trial's results.
func (t *trial) record() {
	res := t.res
	if len(t.deadAt) > 0 {
		var first, last time.Time
		for _, at := range t.deadAt {
			if first.IsZero() || at.Before(first) {
				first = at
			}
			if at.After(last) {
				last = at
			}
		}
		df := first.Sub(t.killAt)
		res.DetectionFirst = &df
		if t.detectionDone() {
			dl := last.Sub(t.killAt)
			res.Detection = &dl
		}
	}
	if res.VictimWasLeader {
		if !t.firstNew.IsZero() {
			ff := t.firstNew.Sub(t.killAt)
			res.FailoverFirst = &ff
		}
		if !t.failover.IsZero() {
			fo := t.failover.Sub(t.killAt)
			res.Failover = &fo
			res.NewLeader, res.NewTerm = t.newLeader, t.newTerm
			res.ExtraTermsAfterKill = int(t.maxTerm - t.killTerm - 1)
		}
	} else {
		res.ExtraTermsAfterKill = int(t.maxTerm - t.killTerm)
	}
}

// describe summarises every node's view, for error messages.
func (t *trial) describe() string {
	var parts []string
	for i, v := range t.views {
		s := fmt.Sprintf("%s[up=%t ready=%t alive=%d leader=%q term=%d", v.id, v.up, v.ready, v.aliveCount(), v.leader, v.term)
		if i == t.victim {
			s += " KILLED"
		} else if t.victim >= 0 {
			_, dead := t.deadAt[i]
			s += fmt.Sprintf(" saw-victim-dead=%t", dead)
		}
		parts = append(parts, s+"]")
	}
	return strings.Join(parts, " ")
}

// nodeSpecs assigns addresses for a trial: fixed ports on the lab's
// addresses, or ports the kernel just reported free on loopback.
func (d *driver) nodeSpecs() ([]nodeSpec, error) {
	specs := make([]nodeSpec, d.cfg.nodes)
	var ports []int
	if d.lab == nil {
		var err error
		if ports, err = freePorts(2 * len(specs)); err != nil {
			return nil, err
		}
	}
	for i := range specs {
		specs[i].id = fmt.Sprintf("n%d", i+1)
		if d.lab != nil {
			specs[i].bind = d.lab.addrs[i]
			specs[i].ns = d.lab.nodeNS[i]
			specs[i].quicPort = 7100
			specs[i].swimPort = 7946
			continue
		}
		specs[i].bind = "127.0.0.1"
		specs[i].quicPort, specs[i].swimPort = ports[2*i], ports[2*i+1]
	}
	return specs, nil
}

// freePorts returns n distinct loopback ports that were free for both UDP
// and TCP (memberlist binds both on one port) a moment ago. All probes are
// held open until every port is chosen, so no port is handed out twice.
func freePorts(n int) ([]int, error) {
	var (
		ports   []int
		closers []func() error
	)
	defer func() {
		for _, c := range closers {
			_ = c()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries > 20*n {
			return nil, fmt.Errorf("found only %d of %d loopback ports free for both UDP and TCP", len(ports), n)
		}
		u, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("probe free port: %w", err)
		}
		closers = append(closers, u.Close)
		port := u.LocalAddr().(*net.UDPAddr).Port
		l, err := net.Listen("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		closers = append(closers, l.Close)
		ports = append(ports, port)
	}
	return ports, nil
}
