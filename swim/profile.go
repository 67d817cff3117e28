package swim

import (
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/memberlist"
)

// Profile names accepted in [Config.Profile].
const (
	// ProfileLAN is memberlist's LAN defaults: one probe a second, suspicion
	// of 4×PI. It rides out a node that stops answering for several
	// seconds, and detects a crash in about 6 s: the gates' cross-datacenter
	// cluster runs it, and so should a datacenter whose hosts may stall
	// (overcommitted VMs, nodes without the CPU weight of the systemd units).
	ProfileLAN = "lan"
	// ProfileFastLAN is the default for a datacenter's managers and
	// workers: it detects a crashed node in about 2 s (2.5 s at p99 at 5 %
	// packet loss on a busy host) by probing every 400 ms and letting a
	// suspicion that a second prober confirms expire after 1.2 s, while a
	// suspicion nobody confirms — one prober's lost packets or its own
	// stall — runs 7.2 s, time enough to refute. A node that gets no CPU
	// for about 1.6 s is declared dead: the systemd units give the process
	// three times the default CPU weight so that busy neighbours cannot
	// starve it that long (docs/failure-detection.md).
	ProfileFastLAN = "fastlan"
	// ProfileLocal is memberlist's loopback/local defaults: same probe rate
	// as LAN, shorter timeouts.
	ProfileLocal = "local"
	// ProfileTest detects failures on loopback in about a second so that
	// tests which kill a node finish quickly. Never use it across a real
	// network: a GC pause or a busy host would be mistaken for a failure.
	ProfileTest = "test"
)

// Failure detection time, from crash to every survivor seeing the node dead,
// is the sum of four phases (memberlist v0.7.0, state.go and suspicion.go):
//
//  1. until a survivor probes the node: each node probes one peer per
//     probe interval (PI) in shuffled round-robin, so with several probers
//     usually within one PI; at worst about 2(n-1) PI.
//  2. the failed probe: suspicion starts only when the probe's whole
//     interval has passed (direct ping, indirect pings, TCP fallback): +1 PI.
//  3. the suspicion timer: min = SuspicionMult × max(1, log10 n) × PI.
//     memberlist wants k = SuspicionMult-2 independent confirmations; when
//     the cluster is too small to supply them (n-2 < k) the timer is just
//     min, otherwise it starts at max = SuspicionMaxTimeoutMult × min and
//     falls towards min as confirmations arrive (Lifeguard).
//  4. the dead message gossiped to the others: a GossipInterval or two.
//
// Per profile, for clusters of under ten nodes (log10 n < 1); "bound" is
// Timing.DetectionBound(3): every phase at its worst, no confirmations.
//
//	profile  PI     suspicion min / max     k   typical (n = 3)   bound (n = 3)
//	lan      1s     4s / 4s (n = 3)         2   ~6s               9.8s
//	                4s / 24s (n ≥ 4)             ~6s with 2 confirmations, up to ~30s without
//	fastlan  400ms  1.2s / 7.2s             1   ~1.9s (measured)  9.6s
//	local    1s     3s / 18s                1   ~5s               23.4s
//	test     200ms  600ms / 1.2s            1   ~1s (measured)    2.4s
//
// With k = 1 (SuspicionMult 3) a crash is confirmed as soon as a second
// survivor's own probe fails, which in a cluster of three or more happens
// within a probe round or two, so the timer runs min, not max: fastlan's
// typical 1.9 s is part of a probe round, a failed probe and 1.2 s. "bound" assumes
// no confirmation ever comes (a two-node cluster, or every other survivor
// unable to probe) and is what tests size their deadlines by.
//
// At n = 100 the suspicion bounds double (log10 100 = 2). A degraded local
// node (LHM > 0) stretches its own probe interval by (LHM+1)×, which slows
// phases 1 and 2 on that node only. Measured figures for "test" are in
// detect_test.go, for fastlan and lan in docs/failure-detection.md.

// Timing is the part of a profile that decides how quickly failures are
// detected and how fresh embedded state is.
type Timing struct {
	ProbeInterval           time.Duration
	ProbeTimeout            time.Duration
	SuspicionMult           int
	SuspicionMaxTimeoutMult int
	GossipInterval          time.Duration
	PushPullInterval        time.Duration
}

// ProfileTiming returns the timing of a named profile.
func ProfileTiming(profile string) (Timing, error) {
	mc, err := profileConfig(profile)
	if err != nil {
		return Timing{}, err
	}
	return Timing{
		ProbeInterval:           mc.ProbeInterval,
		ProbeTimeout:            mc.ProbeTimeout,
		SuspicionMult:           mc.SuspicionMult,
		SuspicionMaxTimeoutMult: mc.SuspicionMaxTimeoutMult,
		GossipInterval:          mc.GossipInterval,
		PushPullInterval:        mc.PushPullInterval,
	}, nil
}

// SuspicionTimeout returns the bounds of memberlist's suspicion timer in a
// cluster of n nodes: the timer runs for max unless enough independent peers
// confirm the suspicion, and never for less than min. When the cluster is too
// small to supply the confirmations memberlist asks for, both are min.
func (t Timing) SuspicionTimeout(n int) (lo, hi time.Duration) {
	// Same arithmetic as memberlist's suspicionTimeout (util.go), kept in
	// millisecond precision the way memberlist does it.
	scale := math.Max(1, math.Log10(math.Max(1, float64(n))))
	lo = time.Duration(t.SuspicionMult) * time.Duration(scale*1000) * t.ProbeInterval / 1000
	k := t.SuspicionMult - 2
	if n-2 < k {
		k = 0
	}
	if k < 1 {
		return lo, lo
	}
	return lo, time.Duration(t.SuspicionMaxTimeoutMult) * lo
}

// DetectionBound is a generous upper bound on the time from a crash to every
// survivor declaring the node dead in a cluster of n nodes whose members are
// healthy (LHM 0). Tests use it to size their deadlines; it is not a promise
// under load.
func (t Timing) DetectionBound(n int) time.Duration {
	_, hi := t.SuspicionTimeout(n)
	firstProbe := time.Duration(2*max(1, n-1)) * t.ProbeInterval
	return firstProbe + t.ProbeInterval + hi + 4*t.GossipInterval
}

// profileConfig builds the memberlist configuration of a named profile.
// Identity, addresses, delegates and keys are filled in by New.
func profileConfig(profile string) (*memberlist.Config, error) {
	switch profile {
	case ProfileLAN:
		return lanProfile(), nil
	case ProfileFastLAN:
		return fastLANProfile(), nil
	case ProfileLocal:
		return localProfile(), nil
	case ProfileTest:
		return testProfile(), nil
	}
	return nil, fmt.Errorf("unknown profile %q (want %q, %q, %q or %q)", profile, ProfileFastLAN, ProfileLAN, ProfileLocal, ProfileTest)
}

func lanProfile() *memberlist.Config { return memberlist.DefaultLANConfig() }

// fastLANProfile trades probe traffic (2.5 probes a second per node
// instead of 1) for detection, and leans on Lifeguard's confirmations to
// tell a crash from a false suspicion instead of on one fixed window:
//
//   - a crashed node fails every survivor's probe, so a second prober
//     confirms the suspicion within a probe round or two and the timer runs
//     its minimum, 3 PI = 1.2 s: detection is part of a probe round, a
//     failed probe and 1.2 s, about 2 s in a small cluster;
//   - a healthy node is suspected when one prober's packets are lost or the
//     prober itself is starved of CPU; nobody confirms that, so the timer
//     runs 6 × 1.2 = 7.2 s, longer than lan's 4 s, for the refutation to
//     get through. The previous fastlan had one 1.5 s window for both,
//     and on a heavily loaded host a healthy node's refutation missed it.
//
// What it does not ride out is a node that answers nobody — a stall of the
// whole process or host — for more than about PI + 1.2 s: every prober
// fails, the suspicion is confirmed, and the node is declared dead (lan
// takes about 5 s of silence). SuspicionMult 3 is the only value that asks
// for a confirmation in a 3-node cluster (memberlist wants SuspicionMult-2
// of them from the n-2 other nodes).
func fastLANProfile() *memberlist.Config {
	c := memberlist.DefaultLANConfig()
	// 400 ms, not 300: the silence a live node survives is 4 PI (a probe
	// and the confirmed minimum), 1.6 s here against 1.2 s. A node process
	// starved of CPU on a loaded host went silent for longer than that
	// (docs/failure-detection.md); the CPU weight of the systemd units is
	// what keeps it from happening.
	c.ProbeInterval = 400 * time.Millisecond
	// Direct ping, then indirect pings and the TCP fallback within the rest
	// of the interval; a loaded host's awareness stretches both.
	c.ProbeTimeout = 200 * time.Millisecond
	c.SuspicionMult = 3
	c.SuspicionMaxTimeoutMult = 6
	// Ten gossip rounds a second, so a suspicion, its confirmation and the
	// refutation each cross the cluster in about 100 ms.
	c.GossipInterval = 100 * time.Millisecond
	c.PushPullInterval = 15 * time.Second
	c.TCPTimeout = 2 * time.Second
	c.GossipToTheDeadTime = 15 * time.Second
	return c
}

func localProfile() *memberlist.Config { return memberlist.DefaultLocalConfig() }

func testProfile() *memberlist.Config {
	c := memberlist.DefaultLocalConfig()
	c.ProbeInterval = 200 * time.Millisecond
	c.ProbeTimeout = 100 * time.Millisecond
	c.SuspicionMult = 3
	// memberlist's default of 6 lets an unconfirmed suspicion run 6× the
	// minimum; 2 keeps the worst case of a 3-node test cluster near 2s
	// while still exercising the confirmation path.
	c.SuspicionMaxTimeoutMult = 2
	c.GossipInterval = 50 * time.Millisecond
	// Push/pull repairs anything gossip missed; tests should not wait 15s
	// for it.
	c.PushPullInterval = time.Second
	// Small clusters give retransmitLimit = mult × ceil(log10(n+1)) = mult;
	// 3 keeps one lost UDP packet from hiding a state change.
	c.RetransmitMult = 3
	c.TCPTimeout = 500 * time.Millisecond
	// Dead nodes are gossiped to, and kept in the member table, this long.
	c.GossipToTheDeadTime = 5 * time.Second
	// A loaded CI host should slow its own probes a little, not 8×.
	c.AwarenessMaxMultiplier = 4
	return c
}
