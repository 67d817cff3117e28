package manager

import (
	"crypto/rand"
	"log/slog"
	"testing"
	"time"

	"tempest/wire"
	"tempest/workflow"
)

// A workflow asking for more cores than the largest worker has is split into
// shards that fit; one that fits, one already split, one whose type cannot
// split and any workflow before a worker is known keep their shape.
func TestSplitOversized(t *testing.T) {
	m := &Manager{reg: workflow.DefaultRegistry(), log: slog.New(slog.DiscardHandler),
		workers: newWorkerTable(rand.Reader, 16, time.Now)}
	httpSpec := func(cores, vus int) wire.WorkflowSpec {
		p := workflow.HTTPParams{VUs: vus, Duration: time.Second, Steps: []workflow.HTTPStep{{Name: "a", URL: "http://127.0.0.1:1/"}}}
		b, err := wire.Marshal(&p)
		if err != nil {
			t.Fatal(err)
		}
		return wire.WorkflowSpec{Name: "load", Type: "http", Cores: cores, Params: b}
	}
	sleep := wire.WorkflowSpec{Name: "nap", Type: "sleep", Cores: 8}

	if got := m.splitOversized([]wire.WorkflowSpec{httpSpec(5, 10)}); len(got) != 1 {
		t.Fatalf("split with no worker known: %d specs", len(got))
	}
	m.workers.join("w1", "a1", "s1")
	m.workers.heartbeat(&wire.WorkerHeartbeat{NodeID: "w1", State: wire.WorkerHealthy, TotalCores: 2, AvailableCores: 2, Version: 1}, "s1")

	got := m.splitOversized([]wire.WorkflowSpec{httpSpec(5, 10), httpSpec(2, 4), sleep, httpSpec(9, 2)})
	var names []string
	vus := 0
	for _, s := range got {
		names = append(names, s.Name)
		if s.Name == "load" && s.Shards == 3 {
			if s.Cores != 2 {
				t.Errorf("shard %d asks for %d cores, want 2", s.Shard, s.Cores)
			}
			p, err := workflow.HTTPType{}.DecodeParams(s.Params)
			if err != nil {
				t.Fatal(err)
			}
			vus += p.(*workflow.HTTPParams).VUs
		}
	}
	// 5 cores over 2-core workers: 3 shards of 2 cores, 10 VUs in all; the
	// 2-core one fits; sleep cannot split; 9 cores would need 5 shards of
	// 2 VUs: refused, kept whole.
	if len(got) != 6 || vus != 10 {
		t.Fatalf("specs %v with %d VUs in the 3 shards; want 3 shards + 3 whole workflows and 10 VUs", names, vus)
	}
	if got[3].Cores != 2 || got[4].Cores != 8 || got[5].Cores != 9 {
		t.Fatalf("whole workflows changed: %+v", got[3:])
	}
}
