// Package stats summarises benchmark samples the same way for every tool
// under bench/, so their tables can be compared.
package stats

import (
	"math"
	"slices"
	"time"
)

// Dist summarises a sample of durations. Percentiles are nearest-rank (the
// smallest sample with at least p of the samples at or below it), so they
// are always observed values; with 20 samples p99 is the maximum, with 100
// the second largest.
type Dist struct {
	N    int           `json:"n"`
	P50  time.Duration `json:"p50_ns"`
	P90  time.Duration `json:"p90_ns"`
	P99  time.Duration `json:"p99_ns"`
	Min  time.Duration `json:"min_ns"`
	Max  time.Duration `json:"max_ns"`
	Mean time.Duration `json:"mean_ns"`
}

// Summarize computes a Dist; an empty sample gives the zero Dist.
func Summarize(xs []time.Duration) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var sum time.Duration
	for _, x := range s {
		sum += x
	}
	return Dist{
		N:    len(s),
		P50:  NearestRank(s, 0.50),
		P90:  NearestRank(s, 0.90),
		P99:  NearestRank(s, 0.99),
		Min:  s[0],
		Max:  s[len(s)-1],
		Mean: sum / time.Duration(len(s)),
	}
}

// NearestRank returns the p-quantile (0..1) of an ascending sample.
func NearestRank(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
