package workflow

import (
	"math"
	"testing"
	"time"
)

func TestRampValues(t *testing.T) {
	const s = time.Second
	r := newRamp(0, []Stage{{Duration: 10 * s, Target: 10}, {Duration: 5 * s, Target: 10}, {Duration: 0, Target: 4}, {Duration: 4 * s, Target: 0}}, 25*s)
	if r.end != 25*s {
		t.Fatalf("end %s, want 25s (duration holds past the stages)", r.end)
	}
	for _, tc := range []struct {
		at   time.Duration
		want float64
		vus  int
	}{
		{0, 0, 0},
		{500 * time.Millisecond, 0.5, 1}, // rounds half away from zero
		{499 * time.Millisecond, 0.499, 0},
		{5 * s, 5, 5},
		{10 * s, 10, 10},
		{14 * s, 10, 10},
		{15 * s, 4, 4}, // the zero-length stage has jumped
		{17 * s, 2, 2},
		{19 * s, 0, 0},
		{24 * s, 0, 0},
		{30 * s, 0, 0},
	} {
		if got := r.valueAt(tc.at); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("valueAt(%s) = %v, want %v", tc.at, got, tc.want)
		}
		if got := r.vusAt(tc.at); got != tc.vus {
			t.Errorf("vusAt(%s) = %d, want %d", tc.at, got, tc.vus)
		}
	}
}

// Walking the ramp with nextVUChange visits every VU count on the way, in
// order, and never lingers past a change by more than minRampStep.
func TestRampNextVUChange(t *testing.T) {
	const s = time.Second
	r := newRamp(2, []Stage{{Duration: 2 * s, Target: 6}, {Duration: s, Target: 6}, {Duration: 2 * s, Target: 0}}, 0)
	var seen []int
	wakes := 0
	for e := time.Duration(0); e < r.end; e = r.nextVUChange(e) {
		if n := r.vusAt(e); len(seen) == 0 || seen[len(seen)-1] != n {
			seen = append(seen, n)
		}
		if wakes++; wakes > 100 {
			t.Fatalf("more than 100 wake-ups for a ramp with 12 changes: stuck at %s", e)
		}
		// Just before the next change, the count is still the current one.
		if next := r.nextVUChange(e); next-minRampStep > e && r.vusAt(next-minRampStep) != r.vusAt(e) && next < r.end {
			t.Fatalf("count changed before %s (woken at %s)", next, e)
		}
	}
	want := []int{2, 3, 4, 5, 6, 5, 4, 3, 2, 1, 0}
	if len(seen) != len(want) {
		t.Fatalf("counts %v, want %v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("counts %v, want %v", seen, want)
		}
	}
}

func TestArrivals(t *testing.T) {
	const s = time.Second
	count := func(r ramp) (n int, offs []time.Duration) {
		a := r.arrivals()
		for {
			off, ok := a.next()
			if !ok {
				return n, offs
			}
			if len(offs) > 0 && off < offs[len(offs)-1] {
				t.Fatalf("arrival %d at %s before the previous at %s", n, off, offs[len(offs)-1])
			}
			offs = append(offs, off)
			n++
		}
	}
	for _, tc := range []struct {
		name string
		r    ramp
		want int
	}{
		{"constant", newRamp(200, nil, 3*s), 600},
		{"fractional", newRamp(0.5, nil, 10*s), 5},
		{"ramp up from zero", newRamp(0, []Stage{{Duration: 4 * s, Target: 100}}, 0), 200},
		{"ramp down to zero", newRamp(100, []Stage{{Duration: 4 * s, Target: 0}}, 0), 200},
		{"stages then hold", newRamp(10, []Stage{{Duration: 2 * s, Target: 30}, {Duration: 0, Target: 50}}, 4*s), 40 + 100},
		{"nothing", newRamp(0, []Stage{{Duration: 2 * s, Target: 0}}, 0), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, offs := count(tc.r)
			if n != tc.want {
				t.Fatalf("%d arrivals, want %d", n, tc.want)
			}
			if n > 0 && offs[0] != 0 {
				t.Fatalf("first arrival at %s, want 0", offs[0])
			}
		})
	}
	// A constant rate is evenly spaced.
	_, offs := count(newRamp(200, nil, s))
	for i, off := range offs {
		if want := time.Duration(i) * 5 * time.Millisecond; (off - want).Abs() > time.Microsecond {
			t.Fatalf("arrival %d at %s, want %s", i, off, want)
		}
	}
	// A linear ramp from 0 to 100/s over 4 s has its 50th arrival at 2 s:
	// the integral 100/8 * t^2 reaches 50 there.
	_, offs = count(newRamp(0, []Stage{{Duration: 4 * s, Target: 100}}, 0))
	if got := offs[50]; (got - 2*s).Abs() > time.Millisecond {
		t.Fatalf("arrival 50 at %s, want 2s", got)
	}
}
