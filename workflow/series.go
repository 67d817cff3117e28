package workflow

import (
	"slices"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// MaxSeriesSeconds bounds the per-second series a run keeps: the most
// recent hour, about 200 KiB, whatever the run's length.
const MaxSeriesSeconds = 3600

// SecondStats is one second of a run, for charts of throughput and latency
// over time. Its percentiles come from histograms with 2 significant digits
// (within 1 %), a quarter of the memory of the exact ones; they are for
// drawing, while totals and the exact, mergeable percentiles live in the
// step histograms.
type SecondStats struct {
	// Second is the offset from the run's start: the point covers
	// [Second, Second+1) s. Seconds with nothing in them are present, zero.
	Second int64
	// Completed and Failed count outcomes (every step's) known in this
	// second; Dropped counts open-model iterations due in it that found no
	// VU.
	Completed int64
	Failed    int64
	Dropped   int64
	// VUs is the most live VUs the runner's sampler saw in the second.
	VUs int
	// P50 and P99 are of the uncorrected latency of responses received in
	// the second; zero when there were none.
	P50 time.Duration
	P99 time.Duration
}

const (
	seriesDigits = 2
	// seriesGrace is how long after a second ends its point waits to be
	// published: a VU measures a response's second before taking its
	// shard's lock, so a sample may land slightly after the collector
	// passed. Samples later still (a VU descheduled for longer than this
	// between the two) are left out of the series; the totals count them.
	seriesGrace = 250 * time.Millisecond
	// seriesSampleInterval is how often the runner collects the series and
	// samples live VUs, with or without a Report callback.
	seriesSampleInterval = 250 * time.Millisecond
	// shardSeriesStock is how many per-second histograms each shard starts
	// with: the current second and the one the collector has not taken yet.
	shardSeriesStock = 2
)

func newSeriesHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, highestMicros, seriesDigits)
}

// shardSeries is a shard's per-second accumulators since the last collect,
// guarded by the shard's lock.
type shardSeries struct {
	secs []*secondAcc
	free []*hdrhistogram.Histogram
}

type secondAcc struct {
	sec       int64
	completed int64
	failed    int64
	latency   *hdrhistogram.Histogram
}

func newShardSeries() shardSeries {
	s := shardSeries{}
	for range shardSeriesStock {
		s.free = append(s.free, newSeriesHistogram())
	}
	return s
}

func (s *shardSeries) record(o outcome) {
	a := s.acc(o.sec)
	if o.failed {
		a.failed++
	} else {
		a.completed++
	}
	if o.timed {
		_ = a.latency.RecordValue(clampMicros(o.latency))
	}
}

func (s *shardSeries) acc(sec int64) *secondAcc {
	for i := len(s.secs) - 1; i >= 0; i-- { // the current second is last
		if s.secs[i].sec == sec {
			return s.secs[i]
		}
	}
	a := &secondAcc{sec: sec}
	if n := len(s.free); n > 0 {
		a.latency, s.free = s.free[n-1], s.free[:n-1]
	} else {
		a.latency = newSeriesHistogram() // only if the collector fell behind
	}
	s.secs = append(s.secs, a)
	return a
}

// seriesBuilder turns collected accumulators into published points; it is
// guarded by the recorder's snapMu.
type seriesBuilder struct {
	pending map[int64]*pendingSecond
	next    int64 // the first second not yet published
	points  []SecondStats
	// giveBack holds emptied histograms per shard, returned to that shard's
	// free list at the next collect.
	giveBack [][]*hdrhistogram.Histogram
	free     []*hdrhistogram.Histogram // for pending seconds
	// lastVUs is the newest second's sampled VUs: a second the sampler
	// never ran in (a starved machine) shows it rather than zero VUs, which
	// would draw the load as stopped.
	lastVUs int
}

type pendingSecond struct {
	completed, failed, dropped int64
	vus                        int
	sampled                    bool // vus was sampled in this second
	latency                    *hdrhistogram.Histogram
}

func newSeriesBuilder(shards int) seriesBuilder {
	return seriesBuilder{pending: map[int64]*pendingSecond{}, giveBack: make([][]*hdrhistogram.Histogram, shards)}
}

func (b *seriesBuilder) pend(sec int64) *pendingSecond {
	p := b.pending[sec]
	if p == nil {
		p = &pendingSecond{}
		if n := len(b.free); n > 0 {
			p.latency, b.free = b.free[n-1], b.free[:n-1]
		} else {
			p.latency = newSeriesHistogram()
		}
		b.pending[sec] = p
	}
	return p
}

// collectSeries moves the shards' accumulators and the dropped counts into
// pending seconds, notes vus for the current second, and publishes the
// seconds that ended more than seriesGrace ago (all of them when final).
func (r *recorder) collectSeries(elapsed time.Duration, vus int, final bool) {
	nowSec := int64(max(elapsed, 0) / time.Second)
	r.snapMu.Lock()
	defer r.snapMu.Unlock()
	b := &r.series
	for i, s := range r.shards {
		s.mu.Lock()
		taken := s.secs.secs
		s.secs.secs = nil
		s.secs.free = append(s.secs.free, b.giveBack[i]...)
		b.giveBack[i] = b.giveBack[i][:0]
		s.mu.Unlock()
		for _, a := range taken {
			if a.sec >= b.next {
				p := b.pend(a.sec)
				p.completed += a.completed
				p.failed += a.failed
				_ = p.latency.Merge(a.latency) // same geometry: nothing can be dropped
			}
			a.latency.Reset()
			b.giveBack[i] = append(b.giveBack[i], a.latency)
		}
	}
	r.dropMu.Lock()
	for sec, n := range r.droppedBySec {
		if sec >= b.next {
			b.pend(sec).dropped += n
		}
	}
	clear(r.droppedBySec)
	r.dropMu.Unlock()
	if nowSec >= b.next {
		p := b.pend(nowSec)
		p.vus, p.sampled = max(p.vus, vus), true
	}

	upTo := int64((elapsed-seriesGrace)/time.Second) - 1
	if final {
		upTo = nowSec
		for sec := range b.pending {
			upTo = max(upTo, sec)
		}
	}
	b.publish(upTo)
}

// publish appends a point for every second from next through upTo.
func (b *seriesBuilder) publish(upTo int64) {
	for ; b.next <= upTo; b.next++ {
		pt := SecondStats{Second: b.next, VUs: b.lastVUs}
		if p := b.pending[b.next]; p != nil {
			pt.Completed, pt.Failed, pt.Dropped = p.completed, p.failed, p.dropped
			if p.sampled {
				pt.VUs, b.lastVUs = p.vus, p.vus
			}
			if p.latency.TotalCount() > 0 {
				pt.P50 = micros(p.latency.ValueAtPercentile(50))
				pt.P99 = micros(p.latency.ValueAtPercentile(99))
			}
			p.latency.Reset()
			b.free = append(b.free, p.latency)
			delete(b.pending, b.next)
		}
		if len(b.points) == 2*MaxSeriesSeconds {
			// Published slices share the backing array, so trimming copies
			// into a new one rather than shifting this one under readers.
			kept := make([]SecondStats, MaxSeriesSeconds, 2*MaxSeriesSeconds)
			copy(kept, b.points[MaxSeriesSeconds:])
			b.points = kept
		}
		b.points = append(b.points, pt)
	}
}

// published returns the newest MaxSeriesSeconds points. The slice is shared
// with later snapshots: points are never changed once published, and
// appends go past its capacity, so readers need no lock.
func (b *seriesBuilder) published() []SecondStats {
	pts := b.points[max(0, len(b.points)-MaxSeriesSeconds):]
	if len(pts) == 0 {
		return nil
	}
	return slices.Clip(pts)
}
