package workflow

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// iterInfo says which iteration a VU is running.
type iterInfo struct {
	vu int   // 0-based VU index
	n  int64 // the VU's own iteration count, 0-based
	// intended is when the open model scheduled the iteration; zero under
	// the closed model, where an iteration is due when the previous ends.
	intended time.Time
}

// iteration runs one pass over the steps. It returns early once ctx is done
// or stopping is closed (a nil stopping never closes).
type iteration func(ctx context.Context, it iterInfo, stopping <-chan struct{})

// execEnv is what an executor needs from the run beyond the iteration.
type execEnv struct {
	now func() time.Time
	// dropped is told about each open-model iteration that found no VU to
	// run it; called from the executor's scheduling goroutine only.
	dropped func(intended time.Time)
}

// executor is a load model: how many VUs run and when each starts an
// iteration. An iteration does not care who scheduled it, so the closed
// models (fixed VUs, ramping VUs) and the open one (arrival rate) share the
// runner's request path.
type executor interface {
	// run blocks until the model has finished or ctx has ended, and every
	// VU it started has returned.
	run(ctx context.Context, env execEnv, it iteration)
	// maxVUs is the most iterations that can be in flight at once, which
	// sizes the connection pool. VU indexes (iterInfo.vu) run from 0 to
	// maxVUs()-1, and at most one goroutine runs a given index at a time
	// (a VU's connection is kept by index).
	maxVUs() int
	// liveVUs is how many VU goroutines exist now, including ones finishing
	// their last iteration after a ramp-down.
	liveVUs() int
}

func newExecutor(p *HTTPParams) executor {
	switch {
	case p.Model == OpenModel:
		return &openModel{rate: newRamp(p.Rate, p.Stages, p.Duration), preVUs: p.VUs, max: p.openMaxVUs()}
	case len(p.Stages) > 0:
		peak := p.VUs
		for _, st := range p.Stages {
			peak = max(peak, int(st.Target))
		}
		return &rampingVUs{vus: newRamp(float64(p.VUs), p.Stages, p.Duration), peak: peak}
	default:
		return &closedModel{vus: p.VUs, iterations: p.Iterations, duration: p.Duration}
	}
}

// vuCount counts live VU goroutines for snapshots.
type vuCount struct{ n atomic.Int64 }

func (c *vuCount) liveVUs() int { return int(c.n.Load()) }

// closedModel runs a fixed number of VUs, each starting its next iteration
// as soon as the previous one ends, so throughput is set by the target's
// latency (the "closed" loop: a slow target slows the load). Exactly one of
// iterations and duration is set.
//
// With iterations, VU i runs iterations/vus passes, plus one for the first
// iterations%vus VUs: the total is exact and each VU's share is fixed up
// front, so no VU waits on a shared counter. With duration, VUs loop until
// it passes and then finish the request in flight but start no new one:
// every request that was sent gets its response counted, so the target's
// request count equals the runner's.
type closedModel struct {
	vuCount
	vus        int
	iterations int64
	duration   time.Duration
}

func (m *closedModel) maxVUs() int { return m.vus }

func (m *closedModel) run(ctx context.Context, _ execEnv, it iteration) {
	var wg sync.WaitGroup
	if m.iterations > 0 {
		base, extra := m.iterations/int64(m.vus), m.iterations%int64(m.vus)
		for vu := range m.vus {
			n := base
			if int64(vu) < extra {
				n++
			}
			if n == 0 {
				break // fewer iterations than VUs: the rest would be idle
			}
			m.n.Add(1)
			wg.Go(func() {
				defer m.n.Add(-1)
				for j := int64(0); j < n && ctx.Err() == nil; j++ {
					it(ctx, iterInfo{vu: vu, n: j}, nil)
				}
			})
		}
		wg.Wait()
		return
	}
	stopping := make(chan struct{})
	timer := time.AfterFunc(m.duration, func() { close(stopping) })
	for vu := range m.vus {
		m.n.Add(1)
		wg.Go(func() {
			defer m.n.Add(-1)
			for j := int64(0); ctx.Err() == nil; j++ {
				select {
				case <-stopping:
					return
				default:
				}
				it(ctx, iterInfo{vu: vu, n: j}, stopping)
			}
		})
	}
	wg.Wait()
	timer.Stop() // only matters when ctx ended the run first
}
