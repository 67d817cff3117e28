package rainstorm

import (
	"math"
	"sort"
	"time"

	"tempest/workflow"
)

// maxRateStages bounds a generate source's rate stages.
const maxRateStages = 32

func readRateStages(f *workflow.Fields) []workflow.Stage {
	stages, _ := f.Objects("stages")
	var out []workflow.Stage
	for _, sf := range stages {
		sf.Required("duration", "target")
		var st workflow.Stage
		st.Duration, _ = sf.Duration("duration")
		st.Target, _ = sf.Float("target")
		out = append(out, st)
	}
	return out
}

func checkRateStages(g *Generate, add func(path, format string, args ...any)) {
	if len(g.Stages) == 0 {
		return
	}
	if g.Rate != 0 {
		add("source.generate.stages", "give rate or stages, not both")
	}
	if len(g.Stages) > maxRateStages {
		add("source.generate.stages", "must have at most %d stages, got %d", maxRateStages, len(g.Stages))
	}
	for i, st := range g.Stages {
		p := workflow.IndexPath("source.generate.stages", i)
		if st.Duration < 0 || st.Duration > 24*time.Hour {
			add(p+".duration", "must be between 0 and 24h, got %s", st.Duration)
		}
		if st.Target < 0 || math.IsNaN(st.Target) || math.IsInf(st.Target, 0) {
			add(p+".target", "must be a rate of 0 or more records/s, got %g", st.Target)
		}
	}
	if last := g.Stages[len(g.Stages)-1]; last.Target <= 0 {
		add(workflow.IndexPath("source.generate.stages", len(g.Stages)-1)+".target",
			"the last stage's rate holds until every record is made, so it must be above 0")
	}
}

// Paced reports whether the source is paced (a rate or rate stages).
func (g *Generate) Paced() bool { return g.Rate > 0 || len(g.Stages) > 0 }

// DueAt returns when record k is due, from the source's start: k/Rate for
// a constant rate; with stages, the time at which the ramp's integral
// (records made so far at the scheduled rate) reaches k. The schedule says
// when a record is made, never what it holds.
func (g *Generate) DueAt(k uint64) time.Duration {
	if len(g.Stages) == 0 {
		if g.Rate <= 0 {
			return 0
		}
		return time.Duration(float64(k) / g.Rate * float64(time.Second))
	}
	at, from, n := time.Duration(0), 0.0, 0.0
	want := float64(k)
	for _, st := range g.Stages {
		secs := st.Duration.Seconds()
		total := (from + st.Target) / 2 * secs
		if secs > 0 && n+total > want {
			// Solve n + from*t + (to-from)/(2*secs)*t² = k in the form
			// that stays stable for a flat ramp or one from 0.
			d := want - n
			t := 2 * d / (from + math.Sqrt(max(0, from*from+2*(st.Target-from)*d/secs)))
			if math.IsNaN(t) || t < 0 {
				t = 0
			}
			return at + min(time.Duration(t*float64(time.Second)), st.Duration)
		}
		at, from, n = at+st.Duration, st.Target, n+total
	}
	// Past the last stage its target holds (checked above 0).
	if from <= 0 {
		return at
	}
	return at + time.Duration((want-n)/from*float64(time.Second))
}

// DueBy returns how many records the schedule has due by t from the
// source's start (DueAt's inverse), at most Records: what a paced source
// is offered by then, whether or not its window let it read them.
func (g *Generate) DueBy(t time.Duration) uint64 {
	n := uint64(max(g.Records, 0))
	if !g.Paced() {
		return n
	}
	return uint64(sort.Search(int(n), func(k int) bool { return g.DueAt(uint64(k)) > t }))
}
