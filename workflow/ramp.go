package workflow

import (
	"math"
	"time"
)

// Stage is one leg of a ramp: over Duration, the target moves linearly from
// where the previous stage ended (or the starting value) to Target. Under
// the closed model targets are VU counts; under the open model they are
// iterations per second. A zero Duration jumps to Target at once.
type Stage struct {
	Duration time.Duration `cbor:"1,keyasint,omitempty"`
	Target   float64       `cbor:"2,keyasint,omitempty"`
}

// ramp is a piecewise-linear function of time since the run started: the
// shape of a load model. It ends at end; past the last stage, up to end, it
// holds the last target.
type ramp struct {
	segs []segment
	end  time.Duration
}

type segment struct {
	start, dur time.Duration
	from, to   float64
	// n0 is the ramp's integral up to start (iterations, when the values
	// are rates), so the open model can find the time of iteration k
	// without summing from the beginning.
	n0 float64
}

// newRamp builds the ramp that starts at from, follows stages, and lasts
// total or the stages' sum, whichever is longer.
func newRamp(from float64, stages []Stage, total time.Duration) ramp {
	var r ramp
	at, v, n := time.Duration(0), from, 0.0
	add := func(dur time.Duration, to float64) {
		r.segs = append(r.segs, segment{start: at, dur: dur, from: v, to: to, n0: n})
		n += (v + to) / 2 * dur.Seconds()
		at += dur
		v = to
	}
	for _, st := range stages {
		add(st.Duration, st.Target)
	}
	if total > at {
		add(total-at, v)
	}
	r.end = at
	return r
}

// seg returns the segment in force at e (the last one at or past the end).
// Zero-length segments are never in force: their jump has happened.
func (r *ramp) seg(e time.Duration) *segment {
	for i := range r.segs {
		s := &r.segs[i]
		if e < s.start+s.dur {
			return s
		}
	}
	return &r.segs[len(r.segs)-1]
}

// valueAt is the target at e.
func (r *ramp) valueAt(e time.Duration) float64 {
	if len(r.segs) == 0 {
		return 0
	}
	s := r.seg(e)
	if e >= s.start+s.dur {
		return s.to
	}
	return s.from + (s.to-s.from)*float64(e-s.start)/float64(s.dur)
}

// vusAt is the closed model's VU count at e: the ramp rounded to the
// nearest whole VU, so a ramp from 0 to 10 over 10 s adds its first VU at
// 0.5 s and its last at 9.5 s, symmetric with the ramp down.
func (r *ramp) vusAt(e time.Duration) int {
	return int(math.Round(r.valueAt(e)))
}

// minRampStep keeps a controller that lands exactly on a rounding boundary
// (where the count has not changed yet) from waking in a tight loop.
const minRampStep = time.Millisecond

// nextVUChange is the earliest time after e at which vusAt may differ from
// vusAt(e), or r.end: the closed model's controller sleeps until then
// rather than polling.
func (r *ramp) nextVUChange(e time.Duration) time.Duration {
	if e >= r.end || len(r.segs) == 0 {
		return r.end
	}
	s := r.seg(e)
	segEnd := s.start + s.dur
	if s.to == s.from {
		return max(segEnd, e+minRampStep)
	}
	n := math.Round(r.valueAt(e))
	threshold := n + 0.5 // rounding goes up at n+0.5 ...
	if s.to < s.from {
		threshold = n - 0.5 // ... and down just below n-0.5
	}
	frac := (threshold - s.from) / (s.to - s.from)
	next := s.start + time.Duration(frac*float64(s.dur))
	return min(max(next, e+minRampStep), segEnd, r.end)
}

// arrivals yields the open model's intended start times, as offsets from
// the run's start, in order: iteration k starts when the ramp's integral
// (iterations so far at the scheduled rate) reaches k, so iteration 0
// starts at once and a constant rate r over d schedules exactly r*d
// iterations when that is whole.
type arrivals struct {
	r   *ramp
	k   float64
	seg int
}

func (r *ramp) arrivals() *arrivals { return &arrivals{r: r} }

// next returns the next intended start, or false once it would be at or
// past the ramp's end.
func (a *arrivals) next() (time.Duration, bool) {
	for a.seg < len(a.r.segs) {
		s := &a.r.segs[a.seg]
		secs := s.dur.Seconds()
		total := (s.from + s.to) / 2 * secs
		delta := a.k - s.n0
		if delta >= total || secs == 0 {
			a.seg++
			continue
		}
		// Solve n0 + from*t + (to-from)/(2*secs)*t^2 = k for t in the
		// form that stays stable when the rate is flat or starts at 0.
		t := 2 * delta / (s.from + math.Sqrt(max(0, s.from*s.from+2*(s.to-s.from)*delta/secs)))
		if math.IsNaN(t) || t < 0 {
			t = 0
		}
		off := s.start + min(time.Duration(t*float64(time.Second)), s.dur)
		if off >= a.r.end {
			return 0, false
		}
		a.k++
		return off, true
	}
	return 0, false
}
