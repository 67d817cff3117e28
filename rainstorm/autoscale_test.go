package rainstorm

import (
	"errors"
	"strings"
	"testing"
	"time"

	"tempest/internal/jobfile"
	"tempest/workflow"
)

func TestParseAutoscaleAndRateStages(t *testing.T) {
	src := `name: scale
workflows:
  - name: g
    type: rainstorm
    source:
      generate:
        records: 100000
        keys: 50
        stages: [{duration: 20s, target: 1000}, {duration: 10s, target: 30000}, {duration: 20s, target: 500}]
    stages:
      - {name: work, op: filter, field: value, matches: "1$", autoscale: {min: 1, max: 6, low: 2000, high: 8000, window: 5s, cooldown: 15s}}
      - {name: count, op: count, key: key, tasks: 2}
`
	s, err := parseJob(t, src, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := s.Stages[0].Autoscale
	if a == nil || *a != (Autoscale{Min: 1, Max: 6, Low: 2000, High: 8000, Window: 5 * time.Second, Cooldown: 15 * time.Second}) {
		t.Fatalf("autoscale %+v", a)
	}
	if s.Stages[0].TaskCount() != 1 || s.Stages[1].TaskCount() != 2 {
		t.Fatalf("task counts %d %d", s.Stages[0].TaskCount(), s.Stages[1].TaskCount())
	}
	if g := s.Source.Generate; len(g.Stages) != 3 || g.Stages[1] != (workflow.Stage{Duration: 10 * time.Second, Target: 30000}) {
		t.Fatalf("rate stages %+v", g.Stages)
	}
}

// TestParseAutoscaleProblems: each refusal the issue names, at its line.
func TestParseAutoscaleProblems(t *testing.T) {
	head := "name: bad\nworkflows:\n  - name: p\n    type: rainstorm\n    source: {generate: {records: 10}}\n    stages:\n"
	for _, tc := range []struct {
		name, body string
		line       int
		want       string
	}{
		{"with tasks", "      - {name: a, op: count, key: key, tasks: 2,\n         autoscale: {min: 1, max: 4, low: 10, high: 20}}\n", 8, "stages[0].autoscale: give tasks or autoscale, not both"},
		{"min above max", "      - name: a\n        op: count\n        key: key\n        autoscale:\n          min: 5\n          max: 2\n          low: 1\n          high: 2\n", 11, "stages[0].autoscale.min: must not be above max (5 > 2)"},
		{"low not below high", "      - name: a\n        op: count\n        key: key\n        autoscale:\n          min: 1\n          max: 2\n          low: 900\n          high: 900\n", 13, "stages[0].autoscale.low: must be below high"},
		{"missing high", "      - {name: a, op: count, key: key, autoscale: {min: 1, max: 2, low: 1}}\n", 7, "high: is required"},
		{"unknown key", "      - {name: a, op: count, key: key, autoscale: {min: 1, max: 2, low: 1, high: 2, step: 3}}\n", 7, `unknown key "step"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseJob(t, head+tc.body, ParseOptions{})
			var je *jobfile.Error
			if !errors.As(err, &je) {
				t.Fatalf("error %v, want a *jobfile.Error", err)
			}
			for _, p := range je.Problems {
				if p.Line == tc.line && strings.Contains(p.String(), tc.want) {
					return
				}
			}
			t.Fatalf("problems:\n%v\nwant at line %d: %s", err, tc.line, tc.want)
		})
	}
	rate := "name: bad\nworkflows:\n  - name: p\n    type: rainstorm\n    source:\n      generate:\n        records: 10\n        rate: 5\n        stages:\n          - {duration: 1s, target: 0}\n    stages: [{name: a, op: count, key: key}]\n"
	_, err := parseJob(t, rate, ParseOptions{})
	if err == nil || !strings.Contains(err.Error(), "give rate or stages, not both") || !strings.Contains(err.Error(), "must be above 0") {
		t.Fatalf("rate and stages with a last target of 0: %v", err)
	}
}

func TestGenerateDueAtFollowsTheRamp(t *testing.T) {
	g := &Generate{Records: 1 << 20, Stages: []workflow.Stage{{Duration: 10 * time.Second, Target: 1000}, {Duration: 10 * time.Second, Target: 1000}, {Duration: 0, Target: 100}}}
	for _, tc := range []struct {
		k    uint64
		want time.Duration
	}{
		{0, 0},
		{5000, 10 * time.Second},  // a ramp 0 → 1000 over 10 s makes 5000
		{1250, 5 * time.Second},   // a quarter of them by halfway
		{10000, 15 * time.Second}, // then 1000/s flat
		{15000, 20 * time.Second},
		{15100, 21 * time.Second}, // then 100/s for ever
	} {
		if got := g.DueAt(tc.k); (got - tc.want).Abs() > time.Millisecond {
			t.Errorf("record %d due at %s, want %s", tc.k, got, tc.want)
		}
	}
	if got := (&Generate{Rate: 200}).DueAt(1000); got != 5*time.Second {
		t.Fatalf("constant rate: record 1000 due at %s", got)
	}
}

func TestScalerSustainedWindowAndCooldown(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := NewScaler(Autoscale{Min: 1, Max: 3, Low: 100, High: 1000, Window: 3 * time.Second, Cooldown: 5 * time.Second}, t0)
	var in uint64
	tasks := 1
	obs := func(sec int, rate float64, backlog uint64) (ScaleDecision, bool) {
		in += uint64(rate * float64(tasks))
		return s.Observe(ScaleSample{At: t0.Add(time.Duration(sec) * time.Second), Tasks: tasks, In: in, Backlog: backlog})
	}
	var decided []ScaleDecision
	for sec := 0; sec <= 40; sec++ {
		rate := 50.0 // per task
		switch {
		case sec >= 2 && sec < 4:
			rate = 5000 // a blip shorter than the window: ignored
		case sec >= 6 && sec < 25:
			rate = 5000
		}
		if d, ok := obs(sec, rate, 0); ok {
			decided = append(decided, d)
			tasks = d.To
		}
	}
	var got []string
	for _, d := range decided {
		got = append(got, d.At.Sub(t0).String()+":"+strings.Fields(d.String())[0]+"→"+strings.Fields(d.String())[2])
	}
	// The sample at second s covers (s-1, s]. High from 5 s: up at 8 s,
	// once a window (3 s) of high load; the next sample is the new size's
	// first, so up again at 13 s, the cooldown (5 s) after; never past
	// max. Low from 24 s: down at 27 s, and again a cooldown later.
	want := "[8s:1→2 13s:2→3 27s:3→2 32s:2→1]"
	if g := "[" + strings.Join(got, " ") + "]"; g != want {
		t.Fatalf("decisions %s, want %s", g, want)
	}
	for _, d := range decided {
		if d.Reason == "" || d.PerTask == 0 {
			t.Fatalf("decision without its inputs: %+v", d)
		}
	}
}

// TestScalerCountsTheBacklog: a saturated stage takes in no more than
// its capacity, under high; its growing backlog is what shows the demand.
func TestScalerCountsTheBacklog(t *testing.T) {
	t0 := time.Unix(0, 0)
	pol := Autoscale{Min: 1, Max: 4, Low: 100, High: 1000, Window: 2 * time.Second, Cooldown: time.Second}
	run := func(useBacklog bool) bool {
		s := NewScaler(pol, t0)
		var in, backlog uint64
		for sec := 0; sec <= 10; sec++ {
			in += 800 // its one task's capacity, under high
			if useBacklog {
				backlog += 1200 // the rest of 2000/s offered
			}
			if _, ok := s.Observe(ScaleSample{At: t0.Add(time.Duration(sec) * time.Second), Tasks: 1, In: in, Backlog: backlog}); ok {
				return true
			}
		}
		return false
	}
	if run(false) {
		t.Fatal("grew on a rate under high")
	}
	if !run(true) {
		t.Fatal("a saturated stage with a growing backlog did not grow")
	}
}

// TestScalerHoldsAShrinkOnABacklog: a new leader's scaler sees a stage of
// 3 tasks that stalled through the leader change draining a 60,000-record
// backlog at 3,000 records/s, while what it was offered reads flat (the
// source's reports have not reached the new leader): its rates say no
// load. It must not shrink while more than a window's worth at the low
// mark waits (1,000/s per task for 5 s: 15,000 records), and shrinks only
// after a whole window below low once the backlog is down to that.
func TestScalerHoldsAShrinkOnABacklog(t *testing.T) {
	t0 := time.Unix(0, 0)
	pol := Autoscale{Min: 1, Max: 4, Low: 1000, High: 5000, Window: 5 * time.Second, Cooldown: time.Second}
	s := NewScaler(pol, t0)
	const offered = 60_000
	var in uint64
	for sec := 0; sec <= 30; sec++ {
		backlog := offered - min(in, offered)
		d, ok := s.Observe(ScaleSample{At: t0.Add(time.Duration(sec) * time.Second), Tasks: 3, In: in, Backlog: backlog})
		if ok {
			// The backlog is 15,000 at 15 s; the window below low
			// that starts with that sample (covering 14–15 s) ends at
			// 19 s.
			if sec < 19 || d.To != 2 {
				t.Fatalf("at %ds, with %d records waiting: %s", sec, backlog, d)
			}
			return
		}
		in += 3000
	}
	t.Fatal("never shrank once the backlog was drained")
}

// TestScalerReadsBurstsOfCheckpoints: a stage's counters move with durable
// checkpoints; on a loaded machine those come every 2 s while the leader
// samples every second, so the samples alternate "twice the rate" and
// "nothing". A stage offered 3,000 records/s per task (high 1,000) must
// still grow, and an idle one (counters still) must still shrink.
func TestScalerReadsBurstsOfCheckpoints(t *testing.T) {
	t0 := time.Unix(0, 0)
	pol := Autoscale{Min: 1, Max: 4, Low: 100, High: 1000, Window: 3 * time.Second, Cooldown: time.Second}
	s := NewScaler(pol, t0)
	var sent uint64
	grewAt := -1
	for sec := 0; sec <= 20; sec++ {
		if sec%2 == 0 {
			sent += 2 * 3000 // two seconds' worth, at once
		}
		if d, ok := s.Observe(ScaleSample{At: t0.Add(time.Duration(sec) * time.Second), Tasks: 1, In: sent}); ok {
			if d.To != 2 {
				t.Fatalf("at %ds: %s, want a grow", sec, d)
			}
			grewAt = sec
			break
		}
	}
	if grewAt < 0 {
		t.Fatal("a stage offered 3x its high in bursts of checkpoints never grew")
	}

	s = NewScaler(pol, t0)
	for sec := 0; sec <= 20; sec++ {
		if d, ok := s.Observe(ScaleSample{At: t0.Add(time.Duration(sec) * time.Second), Tasks: 2, In: 5000}); ok {
			if d.To != 1 {
				t.Fatalf("at %ds: %s, want a shrink", sec, d)
			}
			return
		}
	}
	t.Fatal("an idle stage (counters still) never shrank")
}
