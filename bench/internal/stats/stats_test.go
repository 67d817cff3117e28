package stats

import (
	"testing"
	"time"
)

func TestSummarizeNearestRank(t *testing.T) {
	var xs []time.Duration
	for i := 100; i >= 1; i-- {
		xs = append(xs, time.Duration(i)*time.Millisecond)
	}
	d := Summarize(xs)
	want := Dist{N: 100, P50: 50 * time.Millisecond, P90: 90 * time.Millisecond, P99: 99 * time.Millisecond,
		Min: time.Millisecond, Max: 100 * time.Millisecond, Mean: 50500 * time.Microsecond}
	if d != want {
		t.Fatalf("got %+v, want %+v", d, want)
	}
	if (Summarize(nil) != Dist{}) {
		t.Fatal("empty sample should give the zero Dist")
	}
	if got := Summarize(xs[:20]).P99; got != 100*time.Millisecond {
		t.Fatalf("20 samples: p99 %v, want the maximum", got)
	}
}
