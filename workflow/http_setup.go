package workflow

import (
	"context"
	"fmt"
	"time"
)

// Setup steps (job file: setup:, a list of steps like steps:) run once per
// run before the first iteration, on the run's own worker: a workflow split
// into shards runs them once per shard. The alternative, one worker running
// them for the whole job and handing its captures to the others, would need
// a round of messages between the leader and every worker before any load,
// and a shard re-dispatched after its worker died would have to fetch the
// values again from somewhere; per shard, a shard is self-contained, which
// is what re-dispatch relies on. A target sees one setup per shard, which
// the job file states (shards: N).
//
// What setup steps capture every VU of the run reads, for the whole run,
// as {{name}}; load steps may not capture the same names. Setup requests
// are counted and timed under their own step names (so the target's count
// still equals the engine's), with VU number 0 and no data-file row. A
// setup step that fails — a request that fails by its expect_status or
// expect_body, a capture that finds nothing, a value it needs missing —
// fails the run with that step's reason before any VU starts.

// validateSetup checks what only setup steps must satisfy; the rest is
// checked with every step.
func (p *HTTPParams) validateSetup(errs *FieldErrors) {
	if len(p.Setup) > 0 && len(p.Setup)+len(p.Steps) > MaxHTTPSteps {
		errs.add("setup", "setup and steps together must have at most %d steps, got %d", MaxHTTPSteps, len(p.Setup)+len(p.Steps))
	}
	for i, st := range p.Setup {
		path := IndexPath("setup", i)
		if st.CaptureScope != ScopeIteration {
			errs.add(JoinPath(path, "capture_scope"), "does not apply to setup steps, whose captures last the run")
		}
		fields := map[string]string{"url": st.URL, "body": st.Body}
		for k, v := range st.Headers {
			fields[JoinPath("headers", k)] = v
		}
		for field, src := range fields {
			if t, err := parseTemplate(src); err == nil && t.usesData() {
				errs.add(JoinPath(path, field), "setup steps run once, before any VU, and read no data-file row; {{data.<column>}} is for steps")
			}
		}
	}
}

// setup runs the setup steps on VU slot 0's connection and flow, then
// leaves that VU as new, keeping only the captured values, which seed every
// VU's. It returns the reason the run fails when a step does not succeed.
func (r *httpRunner) setup(ctx context.Context, shard *recorderShard, now func() time.Time, secOf func(time.Time) int64) error {
	fl := &r.flows[0]
	vars := tmplVars{vu: 0, captured: fl.startIteration(r.slotVU, nil)}
	rec := iterRecorder{shard: shard, secOf: secOf, now: now}
	for i := range r.nSetup {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("setup step %q: %w", r.steps[i].name, stopCause(ctx))
		}
		st := &r.steps[i]
		if missing, ok := fl.missing(st.needs); !ok {
			// Validate allows only earlier setup captures, so an earlier
			// step failed first; kept for safety.
			o := outcome{failed: true, class: ErrorSkipped, sec: secOf(now())}
			shard.record(i, o)
			return fmt.Errorf("setup step %q: {{%s}} was not captured", st.name, r.slotName(missing))
		}
		o, err := r.do(ctx, 0, i, vars, now, &rec)
		rec.record(i, o)
		if o.failed {
			return fmt.Errorf("setup step %q failed (%s): %w", st.name, o.class, err)
		}
		if st.thinkTime > 0 && !think(ctx, nil, st.thinkTime) {
			return fmt.Errorf("setup step %q: %w", st.name, stopCause(ctx))
		}
	}
	if fl.vars != nil {
		r.seed = &vuVars{values: fl.vars.values, have: fl.vars.have}
	}
	r.flows[0] = vuFlow{}
	return nil
}
