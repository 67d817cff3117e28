package manager

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"tempest/wire"
)

func seeded(seed byte) *rand.ChaCha8 { return rand.NewChaCha8([32]byte{seed}) }

func TestCandidateWeight(t *testing.T) {
	for _, tc := range []struct {
		c    candidate
		want int64
	}{
		{candidate{spare: 4}, 8},
		{candidate{spare: 4, degraded: true}, 4},
		{candidate{spare: 1, degraded: true}, 1},
		{candidate{spare: 0}, 0},
		{candidate{spare: -3}, 0},
	} {
		if got := tc.c.weight(); got != tc.want {
			t.Errorf("weight(%+v) = %d, want %d", tc.c, got, tc.want)
		}
	}
}

func TestChooseEdgeCases(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cands []candidate
		want  int
	}{
		{"none", nil, -1},
		{"all without spare cores", []candidate{{id: "a"}, {id: "b"}}, -1},
		{"only one has weight", []candidate{{id: "a"}, {id: "b", spare: 2}, {id: "c"}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := choose(seeded(1), tc.cands)
			if err != nil || got != tc.want {
				t.Fatalf("choose = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
	if _, err := choose(failingReader{}, []candidate{{id: "a", spare: 1}, {id: "b", spare: 1}}); err == nil {
		t.Fatal("choose with a broken random source succeeded")
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("entropy exhausted") }

// TestChooseIsWeightedBySpareCores draws many times from a seeded source
// and checks each worker's share against its weight: spare cores, halved
// when DEGRADED.
func TestChooseIsWeightedBySpareCores(t *testing.T) {
	cands := []candidate{
		{id: "small", spare: 2},                         // weight 4
		{id: "big", spare: 4},                           // weight 8
		{id: "struggling", spare: 8, degraded: true},    // weight 8
		{id: "tiny-degraded", spare: 1, degraded: true}, // weight 1
	}
	var total int64
	for _, c := range cands {
		total += c.weight()
	}
	const draws = 40000
	counts := make([]int, len(cands))
	r := seeded(42)
	for range draws {
		i, err := choose(r, cands)
		if err != nil {
			t.Fatal(err)
		}
		counts[i]++
	}
	for i, c := range cands {
		want := float64(c.weight()) / float64(total)
		got := float64(counts[i]) / draws
		// Five standard deviations of a binomial share.
		tol := 5 * math.Sqrt(want*(1-want)/draws)
		if math.Abs(got-want) > tol {
			t.Errorf("%s chosen %.4f of the time, want %.4f ± %.4f", c.id, got, want, tol)
		}
	}
}

func TestPickEligibility(t *testing.T) {
	now := func() time.Time { return time.Unix(1700000000, 0) }
	reg := func(tb *workerTable, id string, cores int) {
		tb.register(&wire.WorkerRegistration{NodeID: id, Addr: id, TotalCores: cores, Version: 1})
	}
	hb := func(tb *workerTable, id string, state wire.WorkerState, avail, queue int) {
		tb.heartbeat(&wire.WorkerHeartbeat{NodeID: id, State: state, TotalCores: 8, AvailableCores: avail, QueueDepth: queue, Version: 2, Addr: id}, "")
	}
	for _, tc := range []struct {
		name     string
		setup    func(tb *workerTable)
		cores    int
		excluded []string
		want     string // "" = none
	}{
		{"healthy with room", func(tb *workerTable) { reg(tb, "a", 4) }, 2, nil, "a"},
		{"not enough cores", func(tb *workerTable) { reg(tb, "a", 1) }, 2, nil, ""},
		{"excluded", func(tb *workerTable) { reg(tb, "a", 4); reg(tb, "b", 4) }, 1, []string{"a"}, "b"},
		{"all excluded", func(tb *workerTable) { reg(tb, "a", 4) }, 1, []string{"a"}, ""},
		{"draining gets nothing", func(tb *workerTable) { reg(tb, "a", 8); hb(tb, "a", wire.WorkerDraining, 8, 0) }, 1, nil, ""},
		{"degraded still used", func(tb *workerTable) { reg(tb, "a", 8); hb(tb, "a", wire.WorkerDegraded, 8, 0) }, 1, nil, "a"},
		{"queue at soft limit", func(tb *workerTable) { reg(tb, "a", 8); hb(tb, "a", wire.WorkerHealthy, 8, 4) }, 1, nil, ""},
		{"dead", func(tb *workerTable) { reg(tb, "a", 8); tb.dead("a") }, 1, nil, ""},
		{"dead then registered again", func(tb *workerTable) { reg(tb, "a", 8); tb.dead("a"); reg(tb, "a", 8) }, 1, nil, "a"},
		{"known only by hearsay", func(tb *workerTable) {
			tb.learn(&wire.WorkerStateSnapshot{NodeID: "a", Addr: "a", TotalCores: 8, AvailableCores: 8})
		}, 1, nil, ""},
		{"stale heartbeat ignored", func(tb *workerTable) {
			reg(tb, "a", 8)
			hb(tb, "a", wire.WorkerHealthy, 8, 0)
			tb.heartbeat(&wire.WorkerHeartbeat{NodeID: "a", State: wire.WorkerDraining, TotalCores: 8, Version: 1}, "")
		}, 1, nil, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := newWorkerTable(seeded(7), 4, now)
			tc.setup(tb)
			skip := map[string]bool{}
			for _, id := range tc.excluded {
				skip[id] = true
			}
			wv, ok := tb.pick(tc.cores, func(id string) bool { return skip[id] })
			switch {
			case tc.want == "" && ok:
				t.Fatalf("picked %s, want none", wv.ID)
			case tc.want != "" && (!ok || wv.ID != tc.want):
				t.Fatalf("picked %q (%v), want %s", wv.ID, ok, tc.want)
			}
		})
	}
}

// TestPickReservesCores: a placement in flight holds its cores, so two
// concurrent placements cannot both count the same free core.
func TestPickReservesCores(t *testing.T) {
	tb := newWorkerTable(seeded(3), 64, time.Now)
	tb.register(&wire.WorkerRegistration{NodeID: "a", Addr: "a", TotalCores: 3})
	if _, ok := tb.pick(2, nil); !ok {
		t.Fatal("first pick failed")
	}
	if _, ok := tb.pick(2, nil); ok {
		t.Fatal("second pick succeeded on cores already reserved")
	}
	tb.unreserve("a", 2)
	if _, ok := tb.pick(2, nil); !ok {
		t.Fatal("pick after unreserve failed")
	}
	// The worker's ack settles the reservation with its own count.
	tb.dispatched("a", 2, 1)
	if wv, _ := tb.get("a"); wv.AvailableCores != 1 {
		t.Fatalf("available after ack = %d", wv.AvailableCores)
	}
	tb.freed("a", 2)
	if wv, _ := tb.get("a"); wv.AvailableCores != 3 {
		t.Fatalf("available after completion = %d", wv.AvailableCores)
	}
	tb.freed("a", 5)
	if wv, _ := tb.get("a"); wv.AvailableCores != 3 {
		t.Fatalf("freeing more than total gave %d cores", wv.AvailableCores)
	}
}

func TestPeerConfirm(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(tb *workerTable)
		cores   int
		version uint64
		want    bool
	}{
		{"unknown worker is confirmed", func(*workerTable) {}, 1, 1, true},
		{"alive with room", func(tb *workerTable) {
			tb.register(&wire.WorkerRegistration{NodeID: "a", Addr: "a", TotalCores: 4, Version: 5})
		}, 2, 5, true},
		{"dead", func(tb *workerTable) {
			tb.register(&wire.WorkerRegistration{NodeID: "a", Addr: "a", TotalCores: 4, Version: 5})
			tb.dead("a")
		}, 1, 5, false},
		{"more cores than the machine has", func(tb *workerTable) {
			tb.register(&wire.WorkerRegistration{NodeID: "a", Addr: "a", TotalCores: 4, Version: 5})
		}, 8, 5, false},
		{"our newer view says draining", func(tb *workerTable) {
			tb.heartbeat(&wire.WorkerHeartbeat{NodeID: "a", State: wire.WorkerDraining, TotalCores: 4, Version: 9}, "")
		}, 1, 5, false},
		{"draining in an older view than the leader's", func(tb *workerTable) {
			tb.heartbeat(&wire.WorkerHeartbeat{NodeID: "a", State: wire.WorkerDraining, TotalCores: 4, Version: 3}, "")
		}, 1, 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := newWorkerTable(seeded(1), 4, time.Now)
			tc.setup(tb)
			if ok, reason := tb.confirm("a", tc.cores, tc.version); ok != tc.want {
				t.Fatalf("confirm = %v (%s), want %v", ok, reason, tc.want)
			}
		})
	}
}
