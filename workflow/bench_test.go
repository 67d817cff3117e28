package workflow

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"tempest/wire"
)

// BenchmarkHTTPRunner measures the closed model against a loopback target
// that answers at once: the ceiling of the net/http path, which the
// load-test issue compares its leaner client against. The target shares the
// machine's cores, so req/s is a lower bound on what a remote target would
// see.
func BenchmarkHTTPRunner(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	for _, vus := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("vus=%d", vus), func(b *testing.B) {
			p := HTTPParams{VUs: vus, Iterations: int64(max(b.N, 1)), Steps: []HTTPStep{{Name: "root", Method: "GET", URL: srv.URL}}}
			run, err := DefaultRegistry().New(wire.WorkflowSpec{Name: "bench", Type: "http", Cores: 2, Params: mustMarshal(b, &p)})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			res, err := run.Run(context.Background(), Env{Cores: []int{0, 1}})
			b.StopTimer()
			if err != nil || res.Failed != 0 {
				b.Fatalf("failed %d, err %v", res.Failed, err)
			}
			b.ReportMetric(float64(res.Completed)/b.Elapsed().Seconds(), "req/s")
			b.ReportMetric(float64(res.Steps[0].Latency.Percentile(99).Microseconds()), "p99-µs")
		})
	}
}

// realisticLatency is lognormal around 2ms: what a healthy HTTP target looks
// like (latencySample, the tests' long-tailed spread, populates far more
// buckets than real traffic does).
func realisticLatency(rng *rand.Rand) time.Duration {
	return time.Duration(float64(2*time.Millisecond) * math.Exp(0.6*rng.NormFloat64()))
}

// BenchmarkSnapshot is the cost of one progress report for a 5-step
// workflow on 2 cores that recorded 1000 requests per step per shard since
// the last one: fold the shards in, copy out, encode for the wire.
func BenchmarkSnapshot(b *testing.B) {
	names := []string{"a", "b", "c", "d", "e"}
	rec := newRecorder(names, nil, 2, false)
	rng := rand.New(rand.NewPCG(1, 1))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for vu := range 2 {
			for i := range names {
				for range 1000 {
					rec.shard(vu).record(i, outcome{latency: realisticLatency(rng), timed: true})
				}
			}
		}
		b.StartTimer()
		if _, err := rec.snapshot(0).StepStats(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHistogramDecodeMerge is what a manager pays per step per worker
// report: decode one cumulative histogram of a million requests and merge it.
func BenchmarkHistogramDecodeMerge(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	h := NewHistogram()
	for range 1000000 {
		h.Record(realisticLatency(rng))
	}
	enc, _ := h.Encode()
	b.ReportMetric(float64(len(enc)), "bytes")
	b.ReportAllocs()
	acc := NewHistogram()
	for b.Loop() {
		d, err := DecodeHistogram(enc)
		if err != nil {
			b.Fatal(err)
		}
		if err := acc.Merge(d); err != nil {
			b.Fatal(err)
		}
	}
}
