package workflow

import (
	"context"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"tempest/wire"
)

func splitHTTP(t *testing.T, p HTTPParams, n int) []*HTTPParams {
	t.Helper()
	b, err := wire.Marshal(&p)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := HTTPType{}.Split(b, n)
	if err != nil {
		t.Fatalf("split %d ways: %v", n, err)
	}
	out := make([]*HTTPParams, len(parts))
	for i, raw := range parts {
		d, err := HTTPType{}.DecodeParams(raw)
		if err != nil {
			t.Fatalf("shard %d: %v", i, err)
		}
		out[i] = d.(*HTTPParams)
	}
	return out
}

func TestSplitDividesExactly(t *testing.T) {
	steps := []HTTPStep{step("a", "http://127.0.0.1:1/")}
	t.Run("closed vus and iterations", func(t *testing.T) {
		got := splitHTTP(t, HTTPParams{VUs: 10, Iterations: 1001, Steps: steps}, 3)
		var vus, offsets []int
		var its int64
		for _, p := range got {
			vus, offsets, its = append(vus, p.VUs), append(offsets, p.VUOffset), its+p.Iterations
		}
		if !slices.Equal(vus, []int{4, 3, 3}) || !slices.Equal(offsets, []int{0, 4, 7}) || its != 1001 {
			t.Fatalf("vus %v offsets %v iterations %d; want [4 3 3] [0 4 7] 1001", vus, offsets, its)
		}
	})
	t.Run("closed duration keeps the duration", func(t *testing.T) {
		for _, p := range splitHTTP(t, HTTPParams{VUs: 4, Duration: time.Minute, Steps: steps}, 4) {
			if p.VUs != 1 || p.Duration != time.Minute || p.Iterations != 0 {
				t.Fatalf("shard %+v", p)
			}
		}
	})
	t.Run("ramping vus", func(t *testing.T) {
		got := splitHTTP(t, HTTPParams{VUs: 0, Stages: []Stage{{Duration: time.Second, Target: 5}, {Duration: time.Second, Target: 2}}, Steps: steps}, 2)
		if got[0].Stages[0].Target+got[1].Stages[0].Target != 5 || got[0].Stages[1].Target+got[1].Stages[1].Target != 2 {
			t.Fatalf("stage targets %v / %v do not add up", got[0].Stages, got[1].Stages)
		}
		if got[1].VUOffset != 3 {
			t.Fatalf("second shard numbers its VUs from %d, want 3 (after the first shard's peak of 3)", got[1].VUOffset)
		}
	})
	t.Run("open rate and max_vus", func(t *testing.T) {
		got := splitHTTP(t, HTTPParams{Model: OpenModel, Rate: 100, MaxVUs: 50, Duration: time.Second,
			Stages: []Stage{{Duration: time.Second, Target: 300}}, Steps: steps}, 3)
		var rate, target float64
		var maxVUs int
		for _, p := range got {
			rate, target, maxVUs = rate+p.Rate, target+p.Stages[0].Target, maxVUs+p.MaxVUs
		}
		if math.Abs(rate-100) > 1e-9 || math.Abs(target-300) > 1e-9 || maxVUs != 50 {
			t.Fatalf("rate %v target %v max_vus %d; want 100, 300, 50", rate, target, maxVUs)
		}
	})
}

func TestSplitRefusals(t *testing.T) {
	steps := []HTTPStep{step("a", "http://127.0.0.1:1/")}
	for _, tc := range []struct {
		name string
		p    HTTPParams
		n    int
		want string
	}{
		{"more shards than vus", HTTPParams{VUs: 2, Duration: time.Second, Steps: steps}, 3, "every shard needs a VU"},
		{"more shards than iterations", HTTPParams{VUs: 8, Iterations: 3, Steps: steps}, 4, "every shard needs an iteration"},
		{"too many shards", HTTPParams{VUs: 100, Duration: time.Second, Steps: steps}, MaxShards + 1, "between 1 and"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := wire.Marshal(&tc.p)
			if _, err := (HTTPType{}).Split(b, tc.n); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("split = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// Run shard by shard against one server, the shards of a split workflow
// send exactly the iterations the whole would, and no two VUs of different
// shards share a {{vu}} number.
func TestShardsRunTheWholeLoad(t *testing.T) {
	var mu sync.Mutex
	byVU := map[int]int{}
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		vu, _ := strconv.Atoi(r.URL.Query().Get("vu"))
		mu.Lock()
		byVU[vu]++
		mu.Unlock()
	})
	whole := HTTPParams{VUs: 7, Iterations: 500, Steps: []HTTPStep{step("a", tg.URL+"/?vu={{vu}}")}}
	var completed int64
	for _, p := range splitHTTP(t, whole, 3) {
		res, err := newRunner(t, "http", p).Run(context.Background(), Env{Cores: []int{0}})
		if err != nil {
			t.Fatal(err)
		}
		completed += res.Completed + res.Failed
	}
	if completed != 500 || tg.total.Load() != 500 {
		t.Fatalf("shards ran %d iterations and the target saw %d; want 500", completed, tg.total.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(byVU) != 7 {
		t.Fatalf("VU numbers seen: %v; want 1..7 once each across shards", byVU)
	}
	for vu := 1; vu <= 7; vu++ {
		if byVU[vu] == 0 {
			t.Fatalf("VU %d never ran (saw %v)", vu, byVU)
		}
	}
}
