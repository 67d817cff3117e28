package workflow

import (
	"testing"
	"time"
)

// The series keeps the newest MaxSeriesSeconds points however long the run,
// and a slice handed out earlier is never changed by later publishing.
func TestSeriesIsBounded(t *testing.T) {
	rec := newRecorder([]string{"a"}, nil, 2, false)
	shard := rec.shard(0)
	var early []SecondStats
	const seconds = 2*MaxSeriesSeconds + 500
	for sec := range int64(seconds) {
		shard.record(0, outcome{sec: sec, latency: time.Duration(sec+1) * time.Microsecond, timed: true})
		if sec%7 == 0 {
			rec.drop(sec)
		}
		rec.collectSeries(time.Duration(sec+2)*time.Second, 3, false)
		if sec == 100 {
			early = rec.snapshot(0).Series
		}
	}
	rec.collectSeries(seconds*time.Second, 0, true)
	got := rec.snapshot(0).Series
	if len(got) != MaxSeriesSeconds {
		t.Fatalf("%d points, want %d", len(got), MaxSeriesSeconds)
	}
	// The last points are the empty seconds the VU samples ran ahead into.
	first := got[len(got)-1].Second - MaxSeriesSeconds + 1
	for i, pt := range got {
		sec := first + int64(i)
		if pt.Second != sec {
			t.Fatalf("point %d is second %d, want %d", i, pt.Second, sec)
		}
		if sec >= seconds {
			continue
		}
		wantDropped := int64(0)
		if sec%7 == 0 {
			wantDropped = 1
		}
		if pt.Completed != 1 || pt.Dropped != wantDropped || pt.VUs != 3 || pt.P99 < time.Duration(sec+1)*time.Microsecond {
			t.Fatalf("second %d: %+v", sec, pt)
		}
	}
	for i, pt := range early {
		if pt.Second != int64(i) || pt.Completed != 1 {
			t.Fatalf("an early snapshot's point %d changed to %+v", i, pt)
		}
	}
}

// A second the VU sampler never ran in (the machine starved it) shows the
// last sampled VUs, not zero: a chart would otherwise draw the load as
// stopped in the seconds it was busiest.
func TestSeriesCarriesVUsOverUnsampledSeconds(t *testing.T) {
	rec := newRecorder([]string{"a"}, nil, 1, false)
	shard := rec.shard(0)
	for sec := range int64(4) {
		shard.record(0, outcome{sec: sec, latency: time.Millisecond, timed: true})
	}
	rec.collectSeries(500*time.Millisecond, 4, false) // second 0
	rec.collectSeries(3500*time.Millisecond, 6, true) // second 3; 1 and 2 unsampled
	got := rec.snapshot(0).Series
	want := []int{4, 4, 4, 6}
	if len(got) != len(want) {
		t.Fatalf("series %+v, want %d points", got, len(want))
	}
	for i, pt := range got {
		if pt.VUs != want[i] || pt.Completed != 1 {
			t.Errorf("second %d: %+v, want %d VUs and 1 completed", i, pt, want[i])
		}
	}
}
