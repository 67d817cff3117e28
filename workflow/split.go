package workflow

import (
	"fmt"
	"math"

	"tempest/wire"
)

// MaxShards bounds how many workers one workflow may be split over.
const MaxShards = 64

// Splitter is implemented by workflow types whose load can be divided among
// workers (job file: shards: N). Split returns n params, one per shard,
// whose loads add up exactly to the original's; it refuses a split that
// would leave a shard with nothing to do.
type Splitter interface {
	Split(params []byte, n int) ([][]byte, error)
}

// share is shard i's part of total split n ways as evenly as integers
// allow: the first total%n shards get one more.
func share(total int64, n, i int) int64 {
	s := total / int64(n)
	if int64(i) < total%int64(n) {
		s++
	}
	return s
}

// Split implements Splitter: VUs, iterations, max_vus and closed-model stage
// targets are divided as integers (the first shards take the remainder),
// the open model's rate and rate targets as reals; every shard keeps the
// steps, durations and protocol, and numbers its VUs after the shards
// before it, so {{vu}} and per_vu data rows stay unique across shards.
func (t HTTPType) Split(params []byte, n int) ([][]byte, error) {
	if n < 1 || n > MaxShards {
		return nil, fmt.Errorf("must be between 1 and %d, got %d", MaxShards, n)
	}
	decoded, err := t.DecodeParams(params)
	if err != nil {
		return nil, err
	}
	p := decoded.(*HTTPParams)
	switch {
	case p.Model == OpenModel:
		if p.Rate == 0 && peakTarget(p.Stages) == 0 {
			return nil, fmt.Errorf("an open model without a rate cannot be split")
		}
	case len(p.Stages) > 0:
		if peak := max(float64(p.VUs), peakTarget(p.Stages)); peak < float64(n) {
			return nil, fmt.Errorf("%d is more than the %v VUs the stages reach at most; every shard needs a VU", n, peak)
		}
	default:
		if p.VUs < n {
			return nil, fmt.Errorf("%d is more than vus: %d; every shard needs a VU", n, p.VUs)
		}
		if p.Iterations > 0 && p.Iterations < int64(n) {
			return nil, fmt.Errorf("%d is more than iterations: %d; every shard needs an iteration", n, p.Iterations)
		}
	}
	out := make([][]byte, n)
	offset := 0
	for i := range n {
		s := *p
		s.VUOffset = p.VUOffset + offset
		s.VUs = int(share(int64(p.VUs), n, i))
		s.Iterations = share(p.Iterations, n, i)
		s.MaxVUs = int(share(int64(p.MaxVUs), n, i))
		s.Rate = p.Rate / float64(n)
		s.Stages = make([]Stage, len(p.Stages))
		for j, st := range p.Stages {
			s.Stages[j] = st
			if p.Model == OpenModel {
				s.Stages[j].Target = st.Target / float64(n)
			} else {
				s.Stages[j].Target = float64(share(int64(math.Round(st.Target)), n, i))
			}
		}
		if len(p.Stages) == 0 {
			s.Stages = nil
		}
		if p.Model == OpenModel && s.MaxVUs == 0 && p.MaxVUs > 0 {
			s.MaxVUs = 1
		}
		if err := s.Validate(); err != nil {
			return nil, fmt.Errorf("shard %d of %d: %w", i+1, n, err)
		}
		b, err := wire.Marshal(&s)
		if err != nil {
			return nil, fmt.Errorf("shard %d of %d: encode params: %w", i+1, n, err)
		}
		out[i] = b
		// The VU numbers this shard may use: its peak VU count.
		offset += shardPeakVUs(&s)
	}
	return out, nil
}

func peakTarget(stages []Stage) float64 {
	peak := 0.0
	for _, st := range stages {
		peak = max(peak, st.Target)
	}
	return peak
}

// shardPeakVUs is the most VUs a run of p can have at once.
func shardPeakVUs(p *HTTPParams) int {
	if p.Model == OpenModel {
		return p.openMaxVUs()
	}
	return max(p.VUs, int(peakTarget(p.Stages)))
}
