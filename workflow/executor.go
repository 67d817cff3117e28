package workflow

import (
	"context"
	"sync"
	"time"
)

// iteration runs one pass over the steps for VU vu. It returns early once
// ctx is done or stopping is closed (a nil stopping never closes).
type iteration func(ctx context.Context, vu int, stopping <-chan struct{})

// executor is a load model: how many VUs run and when each starts an
// iteration. The closed model is the only one so far. The load-test issue
// adds open (arrival-rate) models, which start iterations on a schedule and
// draw VUs from a pool up to max_vus; they fit behind this interface because
// an iteration does not care who scheduled it.
type executor interface {
	// run blocks until the model has finished or ctx has ended, and every
	// VU it started has returned.
	run(ctx context.Context, it iteration)
	// maxVUs is the most iterations that can be in flight at once, which
	// sizes the connection pool.
	maxVUs() int
}

func newExecutor(p *HTTPParams) executor {
	return &closedModel{vus: p.VUs, iterations: p.Iterations, duration: p.Duration}
}

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
	vus        int
	iterations int64
	duration   time.Duration
}

func (m *closedModel) maxVUs() int { return m.vus }

func (m *closedModel) run(ctx context.Context, it iteration) {
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
			wg.Go(func() {
				for j := int64(0); j < n && ctx.Err() == nil; j++ {
					it(ctx, vu, nil)
				}
			})
		}
		wg.Wait()
		return
	}
	stopping := make(chan struct{})
	timer := time.AfterFunc(m.duration, func() { close(stopping) })
	for vu := range m.vus {
		wg.Go(func() {
			for ctx.Err() == nil {
				select {
				case <-stopping:
					return
				default:
				}
				it(ctx, vu, stopping)
			}
		})
	}
	wg.Wait()
	timer.Stop() // only matters when ctx ended the run first
}
