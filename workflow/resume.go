package workflow

import (
	"fmt"
	"math"
	"time"

	"tempest/wire"
)

// Done is how much of a workflow's load earlier, lost attempts ran, by
// their last reports.
type Done struct {
	Elapsed    time.Duration
	Iterations int64
}

// Resumer is implemented by workflow types whose load a retry continues
// rather than repeats: the requests a lost attempt sent reached the target,
// so running them again would load it twice and report half of it. Rest
// returns params for what is left after done, and left=false when nothing
// is (the retry has no work, and the workflow is complete with what the
// lost attempts did).
type Resumer interface {
	Rest(params []byte, done Done) (rest []byte, left bool, err error)
}

// Rest implements Resumer. An iterations budget loses the iterations done;
// a duration, stages and their hold lose the time run: the stages that
// ended are dropped and the one in force starts where the lost attempt
// was (its VUs rounded to the nearest under the closed model). Data rows,
// {{iteration}} and setup steps start over, as in any new run.
func (t HTTPType) Rest(params []byte, done Done) ([]byte, bool, error) {
	decoded, err := t.DecodeParams(params)
	if err != nil {
		return nil, false, err
	}
	p := decoded.(*HTTPParams)
	if done.Elapsed < 0 || done.Iterations < 0 {
		return nil, false, fmt.Errorf("resume: negative progress (elapsed %s, iterations %d)", done.Elapsed, done.Iterations)
	}
	if p.Iterations > 0 {
		p.Iterations -= done.Iterations
		if p.Iterations <= 0 {
			return nil, false, nil
		}
		return encodeRest(p)
	}
	if len(p.Stages) == 0 {
		p.Duration -= done.Elapsed
		if p.Duration <= 0 {
			return nil, false, nil
		}
		return encodeRest(p)
	}
	if !p.skipStages(done.Elapsed) {
		return nil, false, nil
	}
	return encodeRest(p)
}

// skipStages moves p's ramp on by e: the stages that ended by then are
// dropped, the one in force is shortened and starts from its value at e,
// and a hold past the stages (Duration) is shortened too. It reports false
// when nothing of the ramp is left.
func (p *HTTPParams) skipStages(e time.Duration) bool {
	var total time.Duration
	for _, st := range p.Stages {
		total += st.Duration
	}
	end := max(total, p.Duration)
	if e >= end {
		return false
	}
	if p.Duration > 0 {
		p.Duration -= e
	}
	from := p.start()
	for len(p.Stages) > 0 && e >= p.Stages[0].Duration {
		e -= p.Stages[0].Duration
		from = p.Stages[0].Target
		p.Stages = p.Stages[1:]
	}
	if len(p.Stages) > 0 && e > 0 {
		st := &p.Stages[0]
		from += (st.Target - from) * (float64(e) / float64(st.Duration))
		st.Duration -= e
	}
	p.setStart(from)
	if len(p.Stages) == 0 {
		// Only the hold at the last target is left: a steady load.
		p.Stages = nil
		if p.Model != OpenModel && p.VUs == 0 {
			return false
		}
	}
	return true
}

func (p *HTTPParams) start() float64 {
	if p.Model == OpenModel {
		return p.Rate
	}
	return float64(p.VUs)
}

func (p *HTTPParams) setStart(v float64) {
	if p.Model == OpenModel {
		p.Rate = v
		return
	}
	p.VUs = int(math.Round(v))
}

func encodeRest(p *HTTPParams) ([]byte, bool, error) {
	if err := p.Validate(); err != nil {
		return nil, false, fmt.Errorf("resume: the rest of the load is not a valid workflow: %w", err)
	}
	b, err := wire.Marshal(p)
	if err != nil {
		return nil, false, fmt.Errorf("resume: encode params: %w", err)
	}
	return b, true, nil
}
