package target

import (
	"sync/atomic"
	"time"
)

// dice makes the per-request random choices (error or not, how much
// jitter). It is counter-based rather than a shared generator: each request
// takes the next sequence number with one atomic add and hashes it with the
// seed (SplitMix64). That needs no lock and no per-goroutine state, and it
// makes the outcome a function of (seed, n): among the first N requests
// that roll, the number of errors is the same every run, however the
// requests interleave across connections.
type dice struct {
	seed uint64
	seq  atomic.Uint64
	// errBelow is ErrorRate scaled to 53 bits: a roll fails when its top 53
	// bits are below it. 0 never fails; 1<<53 always does.
	errBelow uint64
	jitter   uint64 // nanoseconds; 0 means none
}

func newDice(seed uint64, errorRate float64, jitter time.Duration) *dice {
	return &dice{
		seed:     seed,
		errBelow: uint64(errorRate * (1 << 53)),
		jitter:   uint64(jitter),
	}
}

// needed reports whether rolls are random at all; with ErrorRate 0 or 1 and
// no jitter, requests skip the sequence counter.
func (d *dice) needed() bool {
	return d.jitter > 0 || (d.errBelow > 0 && d.errBelow < 1<<53)
}

// roll returns the choices for the next request.
func (d *dice) roll() (fail bool, jitter time.Duration) {
	if !d.needed() {
		return d.errBelow != 0, 0
	}
	return d.outcome(d.seq.Add(1))
}

// outcome is the choice for the n-th roll. Errors and jitter use
// neighbouring outputs of the sequence so they are independent.
func (d *dice) outcome(n uint64) (fail bool, jitter time.Duration) {
	fail = splitmix64(d.seed, 2*n)>>11 < d.errBelow
	if d.jitter > 0 {
		jitter = time.Duration(splitmix64(d.seed, 2*n+1) % d.jitter)
	}
	return fail, jitter
}

// splitmix64 returns the i-th output of the SplitMix64 generator started at
// seed (Steele, Lea, Flood 2014): random access into a well-mixed stream.
func splitmix64(seed, i uint64) uint64 {
	z := seed + i*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
