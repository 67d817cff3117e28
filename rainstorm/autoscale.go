package rainstorm

import (
	"fmt"
	"time"

	"tempest/workflow"
)

// Autoscale defaults.
const (
	DefaultScaleWindow   = 10 * time.Second
	DefaultScaleCooldown = 30 * time.Second
)

// Autoscale is a stage's `autoscale:` policy: it runs between Min and Max
// tasks, gains one when the offered load per task stays above High for
// Window, loses one when it stays below Low for Window, and changes no
// more often than every Cooldown.
//
// The load is the stage's offered records per second per task: what its
// tasks took in plus what its input backlog grew by, over the time
// between two reports. A stage's processed rate alone cannot rise past
// what its tasks manage, so with High above one task's capacity a
// saturated stage would read "fine" forever; the backlog's growth is the
// part of the demand it did not meet. When the stage keeps up, the
// backlog stays flat and the two signals agree.
type Autoscale struct {
	Min      int           `cbor:"1,keyasint"`
	Max      int           `cbor:"2,keyasint"`
	Low      float64       `cbor:"3,keyasint,omitempty"`
	High     float64       `cbor:"4,keyasint"`
	Window   time.Duration `cbor:"5,keyasint,omitempty"`
	Cooldown time.Duration `cbor:"6,keyasint,omitempty"`
}

func (a *Autoscale) window() time.Duration {
	if a.Window > 0 {
		return a.Window
	}
	return DefaultScaleWindow
}

func (a *Autoscale) cooldown() time.Duration {
	if a.Cooldown > 0 {
		return a.Cooldown
	}
	return DefaultScaleCooldown
}

// readAutoscale reads a stage's `autoscale:` mapping.
func readAutoscale(f *workflow.Fields) *Autoscale {
	a := &Autoscale{}
	f.Required("min", "max", "low", "high")
	if v, ok := f.Int("min"); ok {
		a.Min = int(v)
	}
	if v, ok := f.Int("max"); ok {
		a.Max = int(v)
	}
	if v, ok := f.Float("low"); ok {
		a.Low = v
	}
	if v, ok := f.Float("high"); ok {
		a.High = v
	}
	if v, ok := f.Duration("window"); ok {
		a.Window = v
	}
	if v, ok := f.Duration("cooldown"); ok {
		a.Cooldown = v
	}
	return a
}

// checkAutoscale adds the problems of stage st's policy under path (the
// stage's path in the job file).
func checkAutoscale(st *Stage, path string, add func(path, format string, args ...any)) {
	a := st.Autoscale
	if a == nil {
		return
	}
	p := path + ".autoscale"
	if st.Tasks != 0 {
		add(p, "give tasks or autoscale, not both (autoscale's min is the starting size)")
	}
	if a.Min < 1 || a.Min > MaxTasks {
		add(p+".min", "must be between 1 and %d, got %d", MaxTasks, a.Min)
	}
	if a.Max < 1 || a.Max > MaxTasks {
		add(p+".max", "must be between 1 and %d, got %d", MaxTasks, a.Max)
	}
	if a.Min > a.Max {
		add(p+".min", "must not be above max (%d > %d)", a.Min, a.Max)
	}
	if a.Low < 0 {
		add(p+".low", "must be 0 or more records/s per task, got %g", a.Low)
	}
	if a.Low >= a.High {
		add(p+".low", "must be below high (%g >= %g), or the stage would flap", a.Low, a.High)
	}
	if a.Window < 0 || a.Cooldown < 0 {
		add(p, "window and cooldown must not be negative")
	}
}

// ScaleSample is one report of a stage's load, as the manager leader
// gathers it from the stage's tasks and their upstream.
type ScaleSample struct {
	At    time.Time
	Tasks int // the stage's size in its current epoch
	// In is the records the stage's tasks have taken in, in all (their
	// durable counters summed); Backlog the records sent to the stage and
	// not yet taken in.
	In, Backlog uint64
	// Resizing: an earlier decision is not in force yet (its epoch has
	// not reached the stage): nothing is decided meanwhile.
	Resizing bool
}

// ScaleDecision is one change of a stage's size with what led to it.
type ScaleDecision struct {
	At       time.Time
	From, To int
	// PerTask is the offered records/s per task that crossed the
	// threshold, Processed and Backlog its parts over the last report.
	PerTask   float64
	Processed float64 // records/s taken in
	Growth    float64 // records/s the backlog grew by (negative: it shrank)
	Backlog   uint64
	Reason    string
}

func (d ScaleDecision) String() string {
	return fmt.Sprintf("%d → %d tasks: %s (offered %.0f records/s per task: %.0f/s taken in, backlog %d growing %.0f/s)",
		d.From, d.To, d.Reason, d.PerTask, d.Processed, d.Backlog, d.Growth)
}

// Scaler applies an Autoscale policy to a stage's samples. It is a pure
// function of the samples it is given: a new leader that starts one from
// the stage's current size decides as the old one would have, give or
// take the window it has not yet seen.
type Scaler struct {
	cfg               Autoscale
	last              *ScaleSample
	aboveSince        time.Time
	belowSince        time.Time
	lastChange        time.Time
	above, below      bool
	lastPerTask       float64
	lastProc, lastGro float64
}

// NewScaler returns a scaler for policy a. started is when the stage got
// its current size (the cooldown counts from it).
func NewScaler(a Autoscale, started time.Time) *Scaler {
	return &Scaler{cfg: a, lastChange: started}
}

// drained reports whether x's backlog is at most a window's worth of the
// stage's work at the low mark (Low per task for a whole window): a
// stage with more than that waiting is not under low, whatever its
// recent rates say, since draining what waits is above low by itself.
// Right after a leader change the rates are the least trustworthy: the
// pipeline stalled while the new leader synced, its backlog piled up,
// and what the stage is offered is read from reports that have not all
// reached the new leader yet, so a backlog draining fast against a flat
// count of what was offered reads as no load at all. A run below low
// starts only once the backlog is down to a window's worth, so a shrink
// needs a whole window of samples after that.
func (s *Scaler) drained(x ScaleSample) bool {
	return float64(x.Backlog) <= s.cfg.Low*float64(x.Tasks)*s.cfg.window().Seconds()
}

// Observe takes a sample and returns a decision when the policy calls for
// one.
func (s *Scaler) Observe(x ScaleSample) (ScaleDecision, bool) {
	prev := s.last
	s.last = &x
	if prev == nil || !x.At.After(prev.At) || x.Tasks < 1 {
		return ScaleDecision{}, false
	}
	if x.Resizing || x.Tasks != prev.Tasks {
		// The size is changing: measure afresh from the new one.
		s.above, s.below = false, false
		return ScaleDecision{}, false
	}
	if s.above && x.In+x.Backlog == prev.In+prev.Backlog && x.At.Sub(prev.At) < s.cfg.window() {
		// In a run above high, nothing more sent to the stage since
		// prev: its counters move with durable checkpoints, which a
		// loaded pipeline makes less often than it is sampled, so such a
		// sample says "no news", not "nothing offered" (read as a rate
		// of 0 it broke the run, and a stage fed in bursts of
		// checkpoints never grew). prev stays the base, so the next rate
		// spans both intervals; past a window of no news the rate is
		// read, and the run ends if the load has gone.
		s.last = prev
		return ScaleDecision{}, false
	}
	dt := x.At.Sub(prev.At).Seconds()
	proc := float64(x.In-min(prev.In, x.In)) / dt
	growth := (float64(x.Backlog) - float64(prev.Backlog)) / dt
	per := max(0, proc+growth) / float64(x.Tasks)
	s.lastPerTask, s.lastProc, s.lastGro = per, proc, growth

	switch {
	case per > s.cfg.High:
		if !s.above {
			s.above, s.aboveSince = true, prev.At
		}
		s.below = false
	case per < s.cfg.Low && s.drained(x):
		if !s.below {
			s.below, s.belowSince = true, prev.At
		}
		s.above = false
	default:
		s.above, s.below = false, false
	}
	if x.At.Sub(s.lastChange) < s.cfg.cooldown() {
		return ScaleDecision{}, false
	}
	d := ScaleDecision{At: x.At, From: x.Tasks, PerTask: per, Processed: proc, Growth: growth, Backlog: x.Backlog}
	switch {
	case s.above && x.At.Sub(s.aboveSince) >= s.cfg.window() && x.Tasks < s.cfg.Max:
		d.To = x.Tasks + 1
		d.Reason = fmt.Sprintf("above high (%g) for %s", s.cfg.High, x.At.Sub(s.aboveSince).Round(time.Second))
	case s.below && x.At.Sub(s.belowSince) >= s.cfg.window() && x.Tasks > s.cfg.Min:
		d.To = x.Tasks - 1
		d.Reason = fmt.Sprintf("below low (%g) for %s", s.cfg.Low, x.At.Sub(s.belowSince).Round(time.Second))
	default:
		return ScaleDecision{}, false
	}
	s.lastChange = x.At
	s.above, s.below = false, false
	return d, true
}
