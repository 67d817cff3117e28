package integration

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tempest/integration/checker"
	"tempest/internal/devcluster"
)

// TestChaos runs a randomized fault schedule against a cluster in network
// namespaces for CHAOS_DURATION (it is skipped without it: `make chaos`
// sets it), submitting jobs throughout, then heals everything and prints
// the checker's verdict. The schedule is drawn from CHAOS_SEED (random
// when unset, and printed), so a failing schedule replays with the same
// seed; the cluster's own timing is not replayed, so a replay reproduces
// the faults, not every interleaving. CHAOS_TOPOLOGY=gated runs three
// gates over two datacenters instead of one datacenter.
func TestChaos(t *testing.T) {
	dur, err := time.ParseDuration(os.Getenv("CHAOS_DURATION"))
	if err != nil || dur <= 0 {
		t.Skip("chaos runs only with CHAOS_DURATION set (make chaos)")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("CHAOS_SEED: %v", err)
		}
	}
	runChaos(t, seed, dur, os.Getenv("CHAOS_TOPOLOGY") == "gated")
}

// chaosRegressions are the schedules that once failed, replayed by name
// (CHAOS_REGRESSIONS=1; each runs for its own duration, so the set takes
// their sum). The short, fixed form of each cause is a test of its own.
var chaosRegressions = []struct {
	name  string
	seed  uint64
	dur   time.Duration
	gated bool
}{
	// Issue 28: a manager restarted while cut off joined itself and
	// stayed dead in its peers' view (TestManagerRejoinsOnceItsFaultEnds);
	// a paused gate held submissions for the client's whole deadline
	// (api TestSubmitFailsOverFromAnEndpointThatHoldsIt).
	{"issue-28-restarted-manager-stays-dead", 1795875372485754971, 4 * time.Minute, true},
	// Issue 28, left open by its first round (90 s each, gated): dc1 had no
	// manager leader for minutes while election-class breakers opened on
	// sends that only outlived a dial (transport
	// TestBreakerIgnoresCallsThatGiveUpDuringADial); a later gate leader
	// showed an older fence token than one a datacenter held, and gates
	// changed leader dozens of times while the probe's end reached its
	// gate late (gate TestTakenOverLeasesReachAMajorityBeforeADatacenter,
	// TestJobEndIsOnAMajorityBeforeItIsAcknowledged).
	{"issue-28-election-breakers-flap", 1795879324720797571, 90 * time.Second, true},
	{"issue-28-gate-fence-regressed", 1795880156324601547, 90 * time.Second, true},
	{"issue-28-gate-probe-late", 1795880744277755329, 90 * time.Second, true},
	// A leader answered outcome_unknown and the client's next endpoint
	// no_leader, which the client reported: two jobs "refused" ran (api
	// TestNoLeaderElsewhereDoesNotHideAnUnknownOutcome).
	{"issue-28-refused-ran-after-unknown", 1795890311212927583, 90 * time.Second, false},
}

// TestChaosRegressions replays chaosRegressions (skipped without
// CHAOS_REGRESSIONS: they take minutes each).
func TestChaosRegressions(t *testing.T) {
	if os.Getenv("CHAOS_REGRESSIONS") == "" {
		t.Skip("chaos regressions run only with CHAOS_REGRESSIONS set")
	}
	for _, r := range chaosRegressions {
		t.Run(r.name, func(t *testing.T) { runChaos(t, r.seed, r.dur, r.gated) })
	}
}

// runChaos runs the schedule seed draws for dur, then checks the cluster
// recovers and the checker's verdict (TestChaos).
func runChaos(t *testing.T, seed uint64, dur time.Duration, gated bool) {
	t.Logf("CHAOS_SEED=%d CHAOS_DURATION=%s", seed, dur)
	opts := devcluster.Options{Managers: 3, Workers: 3}
	dcs := 0
	if gated {
		opts = devcluster.Options{Gates: 3, Datacenters: 2, Managers: 3, Workers: 1, LeaseTTL: 5 * time.Second}
		dcs = 1
	}
	p := startPartitioned(t, opts)
	ch := &chaos{p: p, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), killed: map[string]bool{}, paused: map[string]bool{}}

	var submits sync.WaitGroup
	start := time.Now()
	end := start.Add(dur)
	for step := 1; time.Now().Before(end); step++ {
		action := ch.next()
		t.Logf("chaos step %d: %s", step, action.name)
		if action.submit {
			rate, secs := 10+ch.intn(20), 2+ch.intn(5) // drawn here: the schedule stays one per seed
			submits.Add(1)
			go func() {
				defer submits.Done()
				p.submitLoad("chaos", rate, fmt.Sprintf("%ds", secs), dcs)
			}()
		} else if err := action.do(); err != nil {
			t.Logf("chaos step %d: %v", step, err)
		}
		time.Sleep(time.Duration(300+ch.intn(2500)) * time.Millisecond)
	}
	submits.Wait()
	avail := p.hist.Availability(start, time.Now(), promptAnswer)
	ch.restoreAll()
	healed := time.Now()
	took, werr := p.awaitWhole(chaosRecoveryBound, dcs)
	if werr != nil {
		t.Errorf("not whole within %s of lifting every fault: %v", chaosRecoveryBound, werr)
		p.logViews()
	} else {
		t.Logf("whole again %s after every fault was lifted (bound %s)", took.Round(10*time.Millisecond), chaosRecoveryBound)
	}
	rec := p.recoverAfter(healed, dcs, 60*time.Second)
	v := p.finish(checker.Rules{MaxExtra: workerFenceBound(30)}, 180*time.Second)
	t.Logf("CHAOS VERDICT (seed %d): %s", seed, v)
	t.Logf("CHAOS AVAILABILITY (seed %d, %s): %s (from %s); host load average %s", seed, topology(dcs), avail,
		avail.GapFrom.Sub(start).Round(time.Second), loadAverage())
	partitionReport(t, fmt.Sprintf("chaos seed=%d", seed), rec, v)
	if !v.OK() {
		t.Errorf("checker failed; replay the schedule with CHAOS_SEED=%d CHAOS_DURATION=%s CHAOS_TOPOLOGY=%s", seed, dur, topology(dcs))
	}
	if werr != nil {
		p.dumpStacks()
	}
}

// chaosRecoveryBound is how long the cluster may take, once every fault
// of a chaos run is lifted, to be whole again (awaitWhole). It is wide:
// on a shared 2-core host at a load average of 48 the test profiles'
// elections flap (check-quorum steps leaders down when acks come late),
// and issue 28's seed took 88 s to its first acknowledged probe with the
// fix. What it catches is a cluster that stays broken, as issue 28's did.
const chaosRecoveryBound = 120 * time.Second

// promptAnswer is the answer time a submission must beat to count as
// available: a client that waits longer for its yes or no is, for it, an
// outage.
const promptAnswer = 2 * time.Second

// loadAverage is the host's 1, 5 and 15 minute load averages, for the
// figures' context: the machine is shared, and a starved node answers late.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// topology names a run's layout as CHAOS_TOPOLOGY does ("plain" is its
// empty default).
func topology(dcs int) string {
	if dcs > 0 {
		return "gated"
	}
	return "plain"
}

// logViews logs each datacenter's view of the cluster, as its leader gives
// it, for a cluster that did not recover.
func (p *pcluster) logViews() {
	for _, dc := range p.Datacenters() {
		for _, name := range p.namesOf("manager", dc) {
			n, _ := p.Node(name)
			ctx, cancel := context.WithTimeout(context.Background(), 2*viewTimeout)
			v, err := p.viewOf(ctx, n)
			cancel()
			if err != nil {
				p.t.Logf("%s view through %s: %v", dc, name, err)
				continue
			}
			for _, n := range v.Nodes {
				p.t.Logf("%s view: %s %s %s leader=%v term=%d cores=%d/%d", dc, n.Name, n.Role, n.State, n.IsLeader, n.Term, n.AvailableCores, n.TotalCores)
			}
			break
		}
	}
}

// chaos draws fault actions from one seeded source. Draws happen only on
// the test's goroutine, in schedule order, so a seed gives one schedule.
type chaos struct {
	p      *pcluster
	mu     sync.Mutex
	rng    *rand.Rand
	killed map[string]bool
	paused map[string]bool
}

type chaosAction struct {
	name   string
	submit bool
	do     func() error
}

func (c *chaos) intn(n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rng.IntN(n)
}

func (c *chaos) pick(names []string) string { return names[c.intn(len(names))] }

// groups are the node sets that elect or run work: a fault takes at most
// one node of a group down at a time, so the cluster can always recover.
func (c *chaos) groups() [][]string {
	var out [][]string
	if gates := c.p.namesOf("gate", ""); len(gates) > 0 {
		out = append(out, gates)
	}
	for _, dc := range c.p.Datacenters() {
		out = append(out, c.p.namesOf("manager", dc))
	}
	return out
}

func (c *chaos) down(group []string) bool {
	return slices.ContainsFunc(group, func(n string) bool { return c.killed[n] || c.paused[n] })
}

func (c *chaos) next() chaosAction {
	all := c.p.namesOf("", "")
	groups := c.groups()
	g := groups[c.intn(len(groups))]
	switch r := c.intn(100); {
	case r < 35:
		return chaosAction{name: "submit", submit: true}
	case r < 50: // a minority of a group cut from the rest
		n := c.pick(g)
		return chaosAction{name: fmt.Sprintf("cut %s from %v", n, without(g, n)), do: func() error { return c.p.net.Cut(n, without(g, n)...) }}
	case r < 55: // one way only
		n := c.pick(g)
		return chaosAction{name: fmt.Sprintf("cut %s one way to %v", n, without(g, n)), do: func() error { return c.p.net.CutOneWay(n, without(g, n)...) }}
	case r < 62:
		w := c.pick(c.p.namesOf("worker", ""))
		return chaosAction{name: fmt.Sprintf("isolate %s from the cluster", w), do: func() error { return c.p.net.Cut(w, without(all, w)...) }}
	case r < 67:
		n, pct := c.pick(all), 10+c.intn(40)
		return chaosAction{name: fmt.Sprintf("%d%% loss on %s", pct, n), do: func() error { return c.p.net.Loss(n, pct) }}
	case r < 77:
		return chaosAction{name: "heal", do: func() error { return c.p.net.Heal() }}
	case r < 85:
		if c.down(g) {
			return chaosAction{name: "restore", do: c.restoreOne}
		}
		n := c.pick(g)
		return chaosAction{name: "kill " + n, do: func() error {
			c.killed[n] = true
			return c.p.Kill(n)
		}}
	case r < 92:
		if c.down(g) {
			return chaosAction{name: "restore", do: c.restoreOne}
		}
		n := c.pick(g)
		return chaosAction{name: "pause " + n, do: func() error {
			c.paused[n] = true
			return c.p.Signal(n, syscall.SIGSTOP)
		}}
	default:
		return chaosAction{name: "restore", do: c.restoreOne}
	}
}

// restoreOne restarts or resumes one node that is down, if any.
func (c *chaos) restoreOne() error {
	for _, n := range slices.Sorted(maps.Keys(c.killed)) {
		delete(c.killed, n)
		return c.p.Restart(n)
	}
	for _, n := range slices.Sorted(maps.Keys(c.paused)) {
		delete(c.paused, n)
		return c.p.Signal(n, syscall.SIGCONT)
	}
	return nil
}

func (c *chaos) restoreAll() {
	if err := c.p.net.Heal(); err != nil {
		c.p.t.Errorf("heal: %v", err)
	}
	for len(c.killed)+len(c.paused) > 0 {
		if err := c.restoreOne(); err != nil {
			c.p.t.Errorf("restore: %v", err)
		}
	}
}
