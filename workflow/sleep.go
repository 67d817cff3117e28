package workflow

import (
	"context"
	"fmt"
	"strings"
	"time"

	"tempest/wire"
)

// MaxRunDuration bounds how long a workflow may be asked to run (sleep's
// duration, http's duration). Longer runs are better split into jobs.
const MaxRunDuration = 24 * time.Hour

// SleepType is the `sleep` workflow: hold the cores for a duration, then
// count one completed action. It is a test utility for scheduling, cancel
// and timeout paths, with no load of its own.
type SleepType struct{}

// SleepParams are sleep's params.
type SleepParams struct {
	Duration time.Duration `cbor:"1,keyasint"`
}

// Validate checks 0 < duration <= MaxRunDuration.
func (p *SleepParams) Validate() error {
	var errs FieldErrors
	checkRunDuration(&errs, "duration", p.Duration)
	return errs.err()
}

// PlannedDuration implements Planner.
func (p *SleepParams) PlannedDuration() time.Duration { return p.Duration }

func checkRunDuration(errs *FieldErrors, path string, d time.Duration) {
	switch {
	case d <= 0:
		errs.add(path, "must be greater than 0, got %s", fmtDuration(d))
	case d > MaxRunDuration:
		errs.add(path, "must be at most %s, got %s", fmtDuration(MaxRunDuration), fmtDuration(d))
	}
}

// fmtDuration prints 24h rather than 24h0m0s.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Name implements Type.
func (SleepType) Name() string { return "sleep" }

// ParseParams reads `duration` (required).
func (SleepType) ParseParams(f *Fields) []byte {
	f.Required("duration")
	var p SleepParams
	if d, ok := f.Duration("duration"); ok {
		p.Duration = d
	}
	return f.Encode(&p)
}

// DecodeParams implements Type; the result is a *SleepParams.
func (SleepType) DecodeParams(data []byte) (Params, error) {
	p, err := decodeParams[SleepParams](data)
	if err != nil {
		return nil, err // not a typed nil inside the interface
	}
	return p, nil
}

// New implements Type.
func (SleepType) New(spec wire.WorkflowSpec) (Runner, error) {
	p, err := decodeParams[SleepParams](spec.Params)
	if err != nil {
		return nil, err
	}
	return &sleepRunner{duration: p.Duration}, nil
}

type sleepRunner struct {
	duration time.Duration
}

// sleepStep is the name of sleep's only step.
const sleepStep = "sleep"

func (r *sleepRunner) Run(ctx context.Context, env Env) (Result, error) {
	env = env.withDefaults()
	start := env.Now()
	snap := func(completed int64) Snapshot {
		elapsed := env.Now().Sub(start)
		st := StepSnapshot{Name: sleepStep, Completed: completed, Latency: NewHistogram()}
		if completed > 0 {
			st.Latency.Record(elapsed)
		}
		return Snapshot{Elapsed: elapsed, Completed: completed, Steps: []StepSnapshot{st}}
	}
	// Periodic reports carry only elapsed time, which is what a manager
	// watching a long sleep wants to see move.
	rep := startReporter(env, func() Snapshot { return snap(0) })

	t := time.NewTimer(r.duration)
	defer t.Stop()
	var err error
	select {
	case <-t.C:
	case <-ctx.Done():
		err = fmt.Errorf("sleep stopped after %s of %s: %w", fmtDuration(env.Now().Sub(start).Round(time.Millisecond)), fmtDuration(r.duration), stopCause(ctx))
	}
	rep.stop()
	var final Snapshot
	if err == nil {
		final = snap(1)
	} else {
		final = snap(0)
	}
	if env.Report != nil {
		env.Report(final)
	}
	env.Logger.Debug("sleep workflow finished", "duration", r.duration, "elapsed", final.Elapsed, "err", err)
	return Result{final}, err
}
