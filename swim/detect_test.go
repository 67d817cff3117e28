package swim

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
)

// Measurements, run on demand (they take a while and their numbers depend
// on the host):
//
//	TEMPEST_MEASURE=1 [TEMPEST_TRIALS=20] go test -run 'Profile$' -v ./swim/
//
// Results on the development VM (2 vCPUs shared with other builds, no
// -race), profile "test" (PI 200ms, bound 2.4s):
//
//	detection, 3 nodes, 20 trials, until both survivors ran OnDead:
//	  p50 938ms, p90 1.19s, p99 1.20s (min 929ms, mean 1.005s)
//	staleness of the newest heartbeat at the prober, sampled every 50ms for 10s:
//	  3 embedders:  mean 339ms, p99 958ms, max 959ms; 1.7 heartbeats/s each (one per 3 PI)
//	  20 embedders: mean 2.31s, p99 5.96s, max 6.77s; 0.2 heartbeats/s each (one per ~20 PI)
//
// Detection clusters just above PI + suspicion min (800ms): with three
// nodes the second survivor's failed probe confirms the suspicion quickly,
// so the timer runs its 600ms minimum rather than its 1.2s maximum.
// Staleness grows linearly with the number of peers, as the package
// documentation explains: the prober hears a peer only on its own direct
// probe of it, one peer per probe interval, in shuffled round-robin (so the
// worst gap approaches two rounds).

func measuring(t *testing.T) {
	if os.Getenv("TEMPEST_MEASURE") != "1" {
		t.Skip("set TEMPEST_MEASURE=1 to measure")
	}
}

func TestDetectionTimeProfile(t *testing.T) {
	measuring(t)
	trials := 20
	if s := os.Getenv("TEMPEST_TRIALS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("TEMPEST_TRIALS=%q", s)
		}
		trials = n
	}
	tm := testTiming(t)
	var all, first []time.Duration
	for i := range trials {
		t.Run(fmt.Sprintf("trial-%d", i), func(t *testing.T) {
			nodes := startCluster(t, 3, nil)
			victim := nodes[i%3] // the seed node is not special once joined
			var peers []*testNode
			for _, tn := range nodes {
				if tn != victim {
					peers = append(peers, tn)
				}
			}
			killed := time.Now()
			if err := victim.Shutdown(); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 3*tm.DetectionBound(3), 5*time.Millisecond, func() error {
				for _, p := range peers {
					if _, ok := p.rec.deadTime(victim.Name()); !ok {
						return fmt.Errorf("%s has not declared %s dead", p.Name(), victim.Name())
					}
				}
				return nil
			})
			var latest, earliest time.Duration
			for j, p := range peers {
				at, _ := p.rec.deadTime(victim.Name())
				d := at.Sub(killed)
				if d > latest {
					latest = d
				}
				if j == 0 || d < earliest {
					earliest = d
				}
			}
			all = append(all, latest)
			first = append(first, earliest)
		})
	}
	t.Logf("profile %q, 3 nodes, %d trials; bound %s", ProfileTest, len(all), tm.DetectionBound(3))
	t.Logf("all peers saw OnDead: %s", summarize(all))
	t.Logf("first peer saw OnDead: %s", summarize(first))
}

// stampEmbedder sends a worker heartbeat whose Version is the send time in
// unix nanoseconds (all nodes share one clock here) and, on the prober,
// records the newest stamp heard from each peer.
type stampEmbedder struct {
	name string

	mu     sync.Mutex
	newest map[string]time.Time
	heard  map[string]int
}

func newStampEmbedder(name string) *stampEmbedder {
	return &stampEmbedder{name: name, newest: make(map[string]time.Time), heard: make(map[string]int)}
}

func (e *stampEmbedder) LocalState() []byte {
	b, err := EncodeWorkerHeartbeat(&wire.WorkerHeartbeat{
		NodeID: e.name, State: wire.WorkerHealthy, TotalCores: 16, AvailableCores: 8,
		Version: uint64(time.Now().UnixNano()),
	})
	if err != nil {
		panic(err)
	}
	return b
}

func (e *stampEmbedder) PeerState(node NodeInfo, state []byte, _ time.Duration) {
	hb, err := DecodeWorkerHeartbeat(state)
	if err != nil {
		return
	}
	sent := time.Unix(0, int64(hb.Version))
	e.mu.Lock()
	defer e.mu.Unlock()
	if sent.After(e.newest[node.Name]) {
		e.newest[node.Name] = sent
	}
	e.heard[node.Name]++
}

func TestStateStalenessProfile(t *testing.T) {
	measuring(t)
	for _, k := range []int{3, 20} {
		t.Run(fmt.Sprintf("embedders-%d", k), func(t *testing.T) {
			prober := newStampEmbedder("node-0")
			nodes := startCluster(t, k+1, func(i int, cfg *Config) {
				if i == 0 {
					cfg.Embedder = prober
				} else {
					cfg.Embedder = newStampEmbedder(cfg.NodeName)
				}
			})
			names := make([]string, 0, k)
			for _, tn := range nodes[1:] {
				names = append(names, tn.Name())
			}
			testutil.Eventually(t, time.Duration(4*k+10)*testTiming(t).ProbeInterval, 10*time.Millisecond, func() error {
				prober.mu.Lock()
				defer prober.mu.Unlock()
				for _, n := range names {
					if prober.newest[n].IsZero() {
						return fmt.Errorf("nothing heard from %s yet", n)
					}
				}
				return nil
			})

			prober.mu.Lock()
			clear(prober.heard)
			prober.mu.Unlock()
			const window, every = 10 * time.Second, 50 * time.Millisecond
			var ages []time.Duration
			var sum time.Duration
			end := time.Now().Add(window)
			tick := time.NewTicker(every)
			defer tick.Stop()
			for now := range tick.C {
				if now.After(end) {
					break
				}
				prober.mu.Lock()
				for _, n := range names {
					age := now.Sub(prober.newest[n])
					ages = append(ages, age)
					sum += age
				}
				prober.mu.Unlock()
			}
			prober.mu.Lock()
			heard := 0
			for _, n := range names {
				heard += prober.heard[n]
			}
			prober.mu.Unlock()
			t.Logf("1 prober + %d embedders, %s sampled every %s: mean age %s, max age %s, p50 %s, p99 %s; %.1f heartbeats/s per embedder",
				k, window, every, (sum / time.Duration(len(ages))).Round(time.Millisecond),
				slices.Max(ages).Round(time.Millisecond), pct(ages, 50), pct(ages, 99),
				float64(heard)/float64(k)/window.Seconds())
		})
	}
}

func summarize(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no samples"
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return fmt.Sprintf("p50 %s, p90 %s, p99 %s, min %s, max %s, mean %s",
		pct(ds, 50), pct(ds, 90), pct(ds, 99),
		slices.Min(ds).Round(time.Millisecond), slices.Max(ds).Round(time.Millisecond),
		(sum / time.Duration(len(ds))).Round(time.Millisecond))
}

// pct is the nearest-rank percentile.
func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))].Round(time.Millisecond)
}
