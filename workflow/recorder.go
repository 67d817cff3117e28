package workflow

import (
	"maps"
	"sync"
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
// emptied dense histogram becomes the spare for the next swap.
//
// Lock order: snapMu, then one shard's mu at a time.
type recorder struct {
	names  []string
	shards []*recorderShard

	// snapMu serialises snapshots (the reporter's, then Run's final one),
	// which own everything below.
	snapMu     sync.Mutex
	cumulative []*Histogram
	completed  []int64
	failed     []int64
	errors     []map[ErrorClass]int64
	spare      *hdrhistogram.Histogram
	scratch    *hdrhistogram.PackedHistogram
}

type recorderShard struct {
	mu    sync.Mutex
	steps []stepCounts
	_     [64]byte // keep neighbouring shards' locks off one cache line
}

// stepCounts is what a shard recorded for a step since the last snapshot.
type stepCounts struct {
	completed int64
	failed    int64
	errors    map[ErrorClass]int64
	latency   *hdrhistogram.Histogram
}

// outcome is one request's (or action's) result.
type outcome struct {
	failed  bool
	class   ErrorClass // when failed
	latency time.Duration
	timed   bool // latency is meaningful (a response arrived)
}

func newRecorder(names []string, parallelism int) *recorder {
	r := &recorder{
		names:      names,
		shards:     make([]*recorderShard, min(max(parallelism, 1), maxShards)),
		cumulative: make([]*Histogram, len(names)),
		completed:  make([]int64, len(names)),
		failed:     make([]int64, len(names)),
		errors:     make([]map[ErrorClass]int64, len(names)),
		spare:      newDenseHistogram(),
		scratch:    NewHistogram().h,
	}
	for i := range r.cumulative {
		r.cumulative[i] = NewHistogram()
	}
	for i := range r.shards {
		s := &recorderShard{steps: make([]stepCounts, len(names))}
		for j := range s.steps {
			s.steps[j].latency = newDenseHistogram()
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
	if o.timed {
		_ = c.latency.RecordValue(clampMicros(o.latency)) // in range by construction
	}
}

// snapshot moves what the shards recorded into the cumulative totals and
// returns a copy the caller owns. Counts never decrease from one snapshot to
// the next: everything only accumulates.
func (r *recorder) snapshot(elapsed time.Duration) Snapshot {
	r.snapMu.Lock()
	defer r.snapMu.Unlock()
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
			var taken *hdrhistogram.Histogram
			if c.latency.TotalCount() > 0 {
				taken, c.latency, r.spare = c.latency, r.spare, nil
			}
			s.mu.Unlock()
			if taken != nil {
				r.cumulative[i].mergeDense(taken, r.scratch)
				taken.Reset()
				r.spare = taken
			}
		}
	}
	snap := Snapshot{Elapsed: elapsed, Steps: make([]StepSnapshot, len(r.names))}
	for i, name := range r.names {
		snap.Steps[i] = StepSnapshot{
			Name:      name,
			Completed: r.completed[i],
			Failed:    r.failed[i],
			Errors:    maps.Clone(r.errors[i]),
			Latency:   r.cumulative[i].Clone(),
		}
		snap.Completed += r.completed[i]
		snap.Failed += r.failed[i]
	}
	return snap
}
