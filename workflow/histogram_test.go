package workflow

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"tempest/wire"
)

func TestHistogramGeometry(t *testing.T) {
	if n := len(newDenseHistogram().Export().Counts); n != histogramBuckets {
		t.Fatalf("histogramBuckets = %d, the library has %d buckets for 1µs..60s at 3 digits", histogramBuckets, n)
	}
}

// latencySample draws a long-tailed latency: mostly around a millisecond,
// sometimes seconds, now and then past the 60 s ceiling.
func latencySample(rng *rand.Rand) time.Duration {
	d := time.Duration(rng.ExpFloat64() * float64(time.Millisecond))
	if rng.IntN(100) == 0 {
		d *= 5000
	}
	if rng.IntN(10000) == 0 {
		d = 2 * time.Minute
	}
	return d
}

func TestHistogramRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 10, 10000} {
		h := NewHistogram()
		for range n {
			h.Record(latencySample(rng))
		}
		b, err := h.Encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeHistogram(b)
		if err != nil {
			t.Fatalf("n=%d: decode: %v", n, err)
		}
		if !sameBuckets(got, h) {
			t.Fatalf("n=%d: decoded histogram differs", n)
		}
		t.Logf("%d samples encode to %d bytes", n, len(b))
	}
}

func TestHistogramRecordClamps(t *testing.T) {
	h := NewHistogram()
	h.Record(-time.Second)
	h.Record(10 * time.Minute)
	if h.Count() != 2 || h.Min() != 0 {
		t.Fatalf("count %d min %s, want 2 and 0", h.Count(), h.Min())
	}
	if max := h.Max(); max < HistogramHighest || max > HistogramHighest+HistogramHighest/1000 {
		t.Fatalf("max %s, want %s within 0.1%%", max, HistogramHighest)
	}
}

// Sharded recording, encoded and merged, must give exactly the histogram one
// recorder of every sample would have: that is what lets a gate report p99
// across datacenters.
func TestHistogramMergeIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 7))
	whole := NewHistogram()
	var shards [][]byte
	for range 7 {
		shard := NewHistogram()
		for range 1 + rng.IntN(20000) {
			d := latencySample(rng)
			shard.Record(d)
			whole.Record(d)
		}
		b, err := shard.Encode()
		if err != nil {
			t.Fatal(err)
		}
		shards = append(shards, b)
	}
	merged := NewHistogram()
	for _, b := range shards {
		h, err := DecodeHistogram(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := merged.Merge(h); err != nil {
			t.Fatal(err)
		}
	}
	if !sameBuckets(merged, whole) {
		t.Fatal("merged shards differ from the histogram of all samples")
	}
	for _, p := range []float64{0, 1, 25, 50, 75, 90, 99, 99.9, 99.99, 100} {
		if got, want := merged.Percentile(p), whole.Percentile(p); got != want {
			t.Errorf("p%v: merged %s, whole %s", p, got, want)
		}
	}

	// The same through the wire types, as managers and gates will merge.
	var acc []wire.StepStats
	for i, b := range shards {
		part := []wire.StepStats{{StepName: "root", CompletedCount: int64(i), TotalCount: int64(i), Histogram: b}}
		var err error
		if acc, err = MergeStepStats(acc, part); err != nil {
			t.Fatal(err)
		}
	}
	ps := []float64{50, 90, 99, 99.9}
	got, err := Percentiles(acc[0].Histogram, ps...)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range ps {
		if want := whole.Percentile(p); got[i] != want {
			t.Errorf("MergeStepStats p%v: %s, want %s", p, got[i], want)
		}
	}
	if acc[0].CompletedCount != 21 || acc[0].TotalCount != 21 {
		t.Errorf("counts %+v, want 0+1+...+6 = 21", acc[0])
	}
}

func TestMergeStepStats(t *testing.T) {
	enc := func(ds ...time.Duration) []byte {
		h := NewHistogram()
		for _, d := range ds {
			h.Record(d)
		}
		b, err := h.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a := []wire.StepStats{
		{StepName: "login", CompletedCount: 3, FailedCount: 1, TotalCount: 4, Histogram: enc(time.Millisecond, 2*time.Millisecond, 3*time.Millisecond)},
		{StepName: "browse", CompletedCount: 1, TotalCount: 1, Histogram: enc(time.Second)},
	}
	b := []wire.StepStats{
		{StepName: "checkout", FailedCount: 2, TotalCount: 2},
		{StepName: "login", CompletedCount: 1, TotalCount: 1, Histogram: enc(4 * time.Millisecond)},
		{StepName: "login", CompletedCount: 1, TotalCount: 1}, // a repeated name merges too
	}
	got, err := MergeStepStats(a, b)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range got {
		names = append(names, s.StepName)
	}
	if strings.Join(names, ",") != "login,browse,checkout" {
		t.Fatalf("order %v, want a's steps then b's new ones", names)
	}
	login := got[0]
	if login.CompletedCount != 5 || login.FailedCount != 1 || login.TotalCount != 6 {
		t.Fatalf("login counts %+v", login)
	}
	ps, err := Percentiles(login.Histogram, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	// 3 significant digits: 4ms lands in a bucket 2µs wide.
	if ps[0] != time.Millisecond || ps[1] < 4*time.Millisecond || ps[1] > 4*time.Millisecond+4*time.Microsecond {
		t.Fatalf("login min/max %v, want 1ms and 4ms (to 0.1%%)", ps)
	}
	if got[2].Histogram != nil {
		t.Fatal("a step without samples must stay without a histogram")
	}
}

func TestMergeStepStatsRefusesBadInput(t *testing.T) {
	good, _ := NewHistogram().Encode()
	many := make([]wire.StepStats, MaxMergeSteps+1)
	for i := range many {
		many[i].StepName = strconv.Itoa(i)
	}
	for name, in := range map[string][]wire.StepStats{
		"negative":      {{StepName: "a", CompletedCount: -1}},
		"overflow":      {{StepName: "a", FailedCount: math.MaxInt64}, {StepName: "a", FailedCount: 1}},
		"bad histogram": {{StepName: "a", Histogram: []byte{0xff}}},
		"too many":      many,
	} {
		if _, err := MergeStepStats(in, []wire.StepStats{{StepName: "a", Histogram: good}}); err == nil {
			t.Errorf("%s: merged without error", name)
		}
	}
}

// The worst honest encoding (every bucket populated, with counts as large
// as a total below MaxInt64 allows) must fit MaxHistogramBytes, or a busy
// worker's progress would be refused by its own manager.
func TestHistogramWorstCaseSize(t *testing.T) {
	dense := newDenseHistogram()
	counts := make([]int64, histogramBuckets)
	for i := range counts {
		counts[i] = math.MaxInt64 / histogramBuckets
	}
	dense = hdrhistogram.Import(&hdrhistogram.Snapshot{
		LowestTrackableValue: 1, HighestTrackableValue: highestMicros, SignificantFigures: HistogramDigits, Counts: counts,
	})
	full := NewHistogram()
	full.mergeDense(dense, NewHistogram().h)
	// The last bucket reaches past HistogramHighest; values past it are
	// never recorded (Record clamps, DecodeHistogram refuses them).
	h := NewHistogram()
	for v, c := range full.h.ForEachBucket {
		if v <= highestMicros {
			if err := h.h.RecordValues(v, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	b, err := h.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxHistogramBytes {
		t.Fatalf("worst case encodes to %d bytes, more than MaxHistogramBytes %d", len(b), MaxHistogramBytes)
	}
	got, err := DecodeHistogram(b)
	if err != nil {
		t.Fatalf("worst case does not decode: %v", err)
	}
	if !sameBuckets(got, h) {
		t.Fatal("worst case does not round-trip")
	}
	t.Logf("worst case: %d bytes", len(b))
}

// sameBuckets reports whether two histograms hold the same counts in the
// same buckets.
func sameBuckets(a, b *Histogram) bool {
	type bucket struct{ v, c int64 }
	var as, bs []bucket
	for v, c := range a.h.ForEachBucket {
		as = append(as, bucket{v, c})
	}
	for v, c := range b.h.ForEachBucket {
		bs = append(bs, bucket{v, c})
	}
	return a.Count() == b.Count() && slices.Equal(as, bs)
}

func uvarints(vs ...uint64) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.AppendUvarint(b, v)
	}
	return b
}

func encodeWire(t testing.TB, w histogramWire) []byte {
	t.Helper()
	b, err := wire.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func geometry(buckets []byte) histogramWire {
	return histogramWire{Version: histogramVersion, Lowest: 1, Highest: highestMicros, Digits: HistogramDigits, Buckets: buckets}
}

func TestDecodeHistogramRefusesHostileInput(t *testing.T) {
	wide := geometry(uvarints(1, 1))
	wide.Highest = math.MaxInt64 // a far wider histogram than ours
	precise := geometry(uvarints(1, 1))
	precise.Digits = 5
	future := geometry(uvarints(1, 1))
	future.Version = 2
	top := uint64(highestMicros)
	cases := map[string][]byte{
		"oversized":           make([]byte, MaxHistogramBytes+1),
		"not cbor":            []byte("hello"),
		"trailing bytes":      append(encodeWire(t, geometry(uvarints(1, 1))), 0),
		"indefinite length":   {0xbf, 0x01, 0x01, 0xff},
		"wide geometry":       encodeWire(t, wide),
		"other precision":     encodeWire(t, precise),
		"unknown version":     encodeWire(t, future),
		"truncated varint":    encodeWire(t, geometry([]byte{0x80})),
		"value without count": encodeWire(t, geometry(uvarints(5))),
		"zero count":          encodeWire(t, geometry(uvarints(5, 0))),
		"repeated value":      encodeWire(t, geometry(uvarints(5, 1, 0, 1))),
		"value past range":    encodeWire(t, geometry(uvarints(top+1, 1))),
		"delta past range":    encodeWire(t, geometry(uvarints(top, 1, 1<<63, 1))),
		"count past int64":    encodeWire(t, geometry(uvarints(1, 1<<63))),
		"total overflows":     encodeWire(t, geometry(uvarints(1, math.MaxInt64, 1, 1))),
	}
	for name, b := range cases {
		if _, err := DecodeHistogram(b); err == nil {
			t.Errorf("%s: decoded without error", name)
		} else if !errors.Is(err, ErrInvalidHistogram) {
			t.Errorf("%s: error %v is not ErrInvalidHistogram", name, err)
		}
	}
	// Right at the limits is fine.
	for name, buckets := range map[string][]byte{
		"zero value":  uvarints(0, 3),
		"last bucket": uvarints(top, 5),
		"max total":   uvarints(1, math.MaxInt64-1, 1, 1),
	} {
		if _, err := DecodeHistogram(encodeWire(t, geometry(buckets))); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestPercentiles(t *testing.T) {
	h := NewHistogram()
	for i := 1; i <= 100; i++ {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	b, _ := h.Encode()
	got, err := Percentiles(b, 50, 99, 100)
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{50 * time.Millisecond, 99 * time.Millisecond, 100 * time.Millisecond}
	for i := range want {
		// 3 significant digits: within 0.1%.
		if diff := got[i] - want[i]; diff < 0 || diff > want[i]/1000 {
			t.Errorf("percentile %d: %s, want %s", i, got[i], want[i])
		}
	}
	if got, err := Percentiles(nil, 99); err != nil || got[0] != 0 {
		t.Errorf("empty histogram: %v %v, want 0", got, err)
	}
	for _, p := range []float64{-1, 100.5, math.NaN()} {
		if _, err := Percentiles(b, p); err == nil {
			t.Errorf("percentile %v accepted", p)
		}
	}
}

func TestSnapshotStepStats(t *testing.T) {
	h := NewHistogram()
	h.Record(3 * time.Millisecond)
	s := Snapshot{Steps: []StepSnapshot{
		{Name: "a", Completed: 1, Failed: 2, Latency: h},
		{Name: "b", Failed: 1, Latency: NewHistogram()},
	}}
	ws, err := s.StepStats()
	if err != nil {
		t.Fatal(err)
	}
	if ws[0].TotalCount != 3 || ws[0].Histogram == nil || ws[1].Histogram != nil {
		t.Fatalf("step stats %+v", ws)
	}
	got, err := DecodeHistogram(ws[0].Histogram)
	if err != nil || !sameBuckets(got, h) {
		t.Fatalf("histogram does not round-trip: %v", err)
	}
}

func TestMergeStepStatsCorrectedHistograms(t *testing.T) {
	enc := func(vals ...time.Duration) []byte {
		h := NewHistogram()
		for _, v := range vals {
			h.Record(v)
		}
		b, err := h.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a := []wire.StepStats{{StepName: "s", CompletedCount: 2, TotalCount: 2, Histogram: enc(time.Millisecond, 2*time.Millisecond), CorrectedHistogram: enc(5 * time.Millisecond)}}
	b := []wire.StepStats{{StepName: "s", CompletedCount: 1, TotalCount: 1, Histogram: enc(3 * time.Millisecond), CorrectedHistogram: enc(9*time.Millisecond, 7*time.Millisecond)}}
	got, err := MergeStepStats(a, b)
	if err != nil {
		t.Fatal(err)
	}
	want := enc(5*time.Millisecond, 9*time.Millisecond, 7*time.Millisecond)
	if len(got) != 1 || !bytes.Equal(got[0].CorrectedHistogram, want) {
		t.Fatalf("corrected histograms did not merge exactly: %+v", got)
	}
	if got[0].CompletedCount != 3 || !bytes.Equal(got[0].Histogram, enc(time.Millisecond, 2*time.Millisecond, 3*time.Millisecond)) {
		t.Fatalf("uncorrected merge changed: %+v", got[0])
	}
}
