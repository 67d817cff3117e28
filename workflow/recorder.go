package workflow

import (
	"maps"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// maxShards caps the recorder's shards: each holds a dense histogram per
// step (136 KiB each), and past a few shards lock contention is no longer
// what limits a load generator.
const maxShards = 4

// recorder counts outcomes per step. It is sharded so that VUs on different
// cores rarely share a lock: VU i records into shard i mod n, with n from
// the workflow's cores.
//
// Shards record latencies into dense histograms (an array increment per
// sample). A snapshot swaps each active dense histogram for an empty spare
// under the shard's lock, together with reading its counts, so the lock is
// held for a pointer swap whatever the histogram holds, and a step's
// histogram count always matches its counts. Outside the lock the swapped-out
// samples are folded into the step's cumulative (packed) histogram, and the
// emptied dense histogram becomes a spare for the next swap. The per-second
// series (series.go) is fed the same way.
//
// Lock order: snapMu, then one shard's mu at a time; dropMu is a leaf,
// never held with another.
type recorder struct {
	names  []string
	checks [][]string // per step, its checks' names
	shards []*recorderShard
	// corrected: the open model, which records a second latency per
	// response, measured from the iteration's intended start.
	corrected bool
	dropped   atomic.Int64
	// iterations counts passes over the steps that ran to their end.
	iterations atomic.Int64

	dropMu       sync.Mutex
	droppedBySec map[int64]int64 // since the last collect

	// snapMu serialises snapshots and series collection (the reporter's,
	// the sampler's, then Run's final ones), which own everything below.
	snapMu     sync.Mutex
	cumulative []*Histogram
	correctedH []*Histogram // nil under the closed model
	completed  []int64
	failed     []int64
	errors     []map[ErrorClass]int64
	statuses   []map[int]int64
	sent       []int64
	received   []int64
	checkCount [][]checkCount
	spares     []*hdrhistogram.Histogram
	scratch    *hdrhistogram.PackedHistogram
	series     seriesBuilder
}

type recorderShard struct {
	mu    sync.Mutex
	steps []stepCounts
	secs  shardSeries
	_     [64]byte // keep neighbouring shards' locks off one cache line
}

// stepCounts is what a shard recorded for a step since the last snapshot.
type stepCounts struct {
	completed int64
	failed    int64
	errors    map[ErrorClass]int64
	statuses  map[int]int64
	sent      int64
	received  int64
	checks    []checkCount // by the step's check index
	latency   *hdrhistogram.Histogram
	corrected *hdrhistogram.Histogram // nil under the closed model
}

// checkCount counts one check's verdicts.
type checkCount struct{ passed, failed int64 }

// outcome is one request's (or action's) result.
type outcome struct {
	failed  bool
	class   ErrorClass // when failed
	latency time.Duration
	timed   bool // latency is meaningful (a response arrived)
	// corrected is latency plus how late the iteration started against its
	// schedule (open model only; see httpRunner.iterate).
	corrected time.Duration
	// sec is the second of the run the outcome was known in, for the series.
	sec int64
	// status is the response's HTTP status (0: no response); received its
	// body bytes.
	status         int
	sent, received int64
	// checksRun and checksPassed are bitmasks over the step's checks (at
	// most maxChecks): which were judged on this response, and which of
	// those passed.
	checksRun, checksPassed uint32
}

// newRecorder records steps names; checks (nil: none) names each step's
// checks.
func newRecorder(names []string, checks [][]string, parallelism int, corrected bool) *recorder {
	if checks == nil {
		checks = make([][]string, len(names))
	}
	r := &recorder{
		names:        names,
		checks:       checks,
		checkCount:   make([][]checkCount, len(names)),
		corrected:    corrected,
		shards:       make([]*recorderShard, min(max(parallelism, 1), maxShards)),
		cumulative:   make([]*Histogram, len(names)),
		completed:    make([]int64, len(names)),
		failed:       make([]int64, len(names)),
		errors:       make([]map[ErrorClass]int64, len(names)),
		statuses:     make([]map[int]int64, len(names)),
		sent:         make([]int64, len(names)),
		received:     make([]int64, len(names)),
		scratch:      NewHistogram().h,
		droppedBySec: map[int64]int64{},
	}
	r.series = newSeriesBuilder(len(r.shards))
	for i := range r.cumulative {
		r.cumulative[i] = NewHistogram()
		r.checkCount[i] = make([]checkCount, len(checks[i]))
	}
	// One spare per histogram a swap takes: each is folded and given back
	// before the next swap, so shards never wait on an allocation.
	r.spares = append(r.spares, newDenseHistogram())
	if corrected {
		r.spares = append(r.spares, newDenseHistogram())
		r.correctedH = make([]*Histogram, len(names))
		for i := range r.correctedH {
			r.correctedH[i] = NewHistogram()
		}
	}
	for i := range r.shards {
		s := &recorderShard{steps: make([]stepCounts, len(names)), secs: newShardSeries()}
		for j := range s.steps {
			if n := len(checks[j]); n > 0 {
				s.steps[j].checks = make([]checkCount, n)
			}
			s.steps[j].latency = newDenseHistogram()
			if corrected {
				s.steps[j].corrected = newDenseHistogram()
			}
		}
		r.shards[i] = s
	}
	return r
}

func (r *recorder) shard(vu int) *recorderShard {
	return r.shards[vu%len(r.shards)]
}

func (s *recorderShard) record(step int, o outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &s.steps[step]
	if o.failed {
		c.failed++
		if c.errors == nil {
			c.errors = map[ErrorClass]int64{}
		}
		c.errors[o.class]++
	} else {
		c.completed++
	}
	// A timed outcome had a response, whose status counts even when it is
	// 0 (gRPC's OK).
	if o.status != 0 || o.timed {
		if c.statuses == nil {
			c.statuses = map[int]int64{}
		}
		c.statuses[o.status]++
	}
	c.sent += o.sent
	c.received += o.received
	for run := o.checksRun; run != 0; run &= run - 1 {
		k := bits.TrailingZeros32(run)
		if o.checksPassed&(1<<k) != 0 {
			c.checks[k].passed++
		} else {
			c.checks[k].failed++
		}
	}
	if o.timed {
		_ = c.latency.RecordValue(clampMicros(o.latency)) // in range by construction
		if c.corrected != nil {
			_ = c.corrected.RecordValue(clampMicros(o.corrected))
		}
	}
	s.secs.record(o)
}

// drop counts an open-model iteration that found no VU, in second sec.
func (r *recorder) drop(sec int64) {
	r.dropped.Add(1)
	r.dropMu.Lock()
	r.droppedBySec[sec]++
	r.dropMu.Unlock()
}

// snapshot moves what the shards recorded into the cumulative totals and
// returns a copy the caller owns (Series excepted: it is shared and
// read-only). Counts never decrease from one snapshot to the next:
// everything only accumulates.
func (r *recorder) snapshot(elapsed time.Duration) Snapshot {
	r.snapMu.Lock()
	defer r.snapMu.Unlock()
	// Read before the counts: an iteration counted here has had every
	// request counted, so a retry that runs what is left never skips one
	// the target did not get.
	iterations := r.iterations.Load()
	for _, s := range r.shards {
		for i := range r.names {
			s.mu.Lock()
			c := &s.steps[i]
			r.completed[i] += c.completed
			r.failed[i] += c.failed
			c.completed, c.failed = 0, 0
			for class, n := range c.errors {
				if r.errors[i] == nil {
					r.errors[i] = map[ErrorClass]int64{}
				}
				r.errors[i][class] += n
			}
			clear(c.errors)
			for code, n := range c.statuses {
				if r.statuses[i] == nil {
					r.statuses[i] = map[int]int64{}
				}
				r.statuses[i][code] += n
			}
			clear(c.statuses)
			r.sent[i] += c.sent
			r.received[i] += c.received
			c.sent, c.received = 0, 0
			for k := range c.checks {
				r.checkCount[i][k].passed += c.checks[k].passed
				r.checkCount[i][k].failed += c.checks[k].failed
				c.checks[k] = checkCount{}
			}
			// Both histograms move together, so in every snapshot the
			// corrected one holds exactly the samples the uncorrected does.
			var taken, takenCorrected *hdrhistogram.Histogram
			if c.latency.TotalCount() > 0 {
				taken, c.latency = c.latency, r.spare()
				if c.corrected != nil {
					takenCorrected, c.corrected = c.corrected, r.spare()
				}
			}
			s.mu.Unlock()
			if taken != nil {
				r.fold(r.cumulative[i], taken)
			}
			if takenCorrected != nil {
				r.fold(r.correctedH[i], takenCorrected)
			}
		}
	}
	snap := Snapshot{
		Elapsed:           elapsed,
		Steps:             make([]StepSnapshot, len(r.names)),
		DroppedIterations: r.dropped.Load(),
		Iterations:        iterations,
		Series:            r.series.published(),
	}
	for i, name := range r.names {
		snap.Steps[i] = StepSnapshot{
			Name:      name,
			Completed: r.completed[i],
			Failed:    r.failed[i],
			Errors:    maps.Clone(r.errors[i]),
			Statuses:  maps.Clone(r.statuses[i]),
			Sent:      r.sent[i],
			Received:  r.received[i],
			Latency:   r.cumulative[i].Clone(),
		}
		if r.corrected {
			snap.Steps[i].CorrectedLatency = r.correctedH[i].Clone()
		}
		for k, name := range r.checks[i] {
			cc := r.checkCount[i][k]
			snap.Steps[i].Checks = append(snap.Steps[i].Checks, CheckResult{Name: name, Passed: cc.passed, Failed: cc.failed})
		}
		snap.Completed += r.completed[i]
		snap.Failed += r.failed[i]
	}
	return snap
}

// spare returns an empty dense histogram. It is called with a shard's lock
// held and never allocates there in practice: newRecorder stocks one spare
// per histogram a swap takes, and fold returns it before the next swap.
func (r *recorder) spare() *hdrhistogram.Histogram {
	if n := len(r.spares); n > 0 {
		h := r.spares[n-1]
		r.spares = r.spares[:n-1]
		return h
	}
	return newDenseHistogram()
}

func (r *recorder) fold(into *Histogram, dense *hdrhistogram.Histogram) {
	into.mergeDense(dense, r.scratch)
	dense.Reset()
	r.spares = append(r.spares, dense)
}
