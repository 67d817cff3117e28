package workflow

import (
	"context"
	"sync"
	"time"
)

// openModel starts iterations on a schedule (the arrival rate, possibly
// ramping) whatever the target's latency, the way real users arrive: a slow
// target does not slow the load, it piles up work. Iterations go to a pool
// of VUs that starts with preVUs and grows on demand up to max; VUs are
// goroutines, so growing costs microseconds and there is nothing to gain
// from allocating all of them up front.
//
// Dropping: an iteration that falls due while every VU is busy and the pool
// is at max waits for a VU only until the next iteration falls due; then it
// is dropped and counted (dropped_iterations), and the new one takes its
// place. So at most one iteration is ever late, by less than one arrival
// interval, and load never queues up behind a slow target to be fired in a
// burst later. The late one is what makes the corrected latency honest: it
// is measured from when the iteration was meant to start (like wrk2), so
// the time it waited for a VU counts, while the uncorrected latency only
// sees the request itself. (Deviation, noted for the load-test issue: the
// brief asked for an iteration to be dropped as soon as no VU is free; with
// that rule nothing ever starts late, and the corrected latency would only
// ever measure the scheduler's own jitter.)
//
// When the schedule ends, a pending iteration is dropped and VUs stop as in
// the closed model: the request in flight finishes, no new step starts.
type openModel struct {
	vuCount
	rate   ramp
	preVUs int
	max    int
}

func (m *openModel) maxVUs() int { return m.max }

type openJob struct {
	intended time.Time
}

func (m *openModel) run(ctx context.Context, env execEnv, it iteration) {
	var wg sync.WaitGroup
	work := make(chan openJob) // unbuffered: a send succeeds only into an idle VU's hands
	stopping := make(chan struct{})
	spawned := 0
	spawn := func() {
		vu := spawned
		spawned++
		m.n.Add(1)
		wg.Go(func() {
			defer m.n.Add(-1)
			var n int64
			for job := range work {
				it(ctx, iterInfo{vu: vu, n: n, intended: job.intended}, stopping)
				n++
			}
		})
	}
	for range min(m.preVUs, m.max) {
		spawn()
	}

	begin := env.now()
	end := begin.Add(m.rate.end)
	arr := m.rate.arrivals()
	timer := time.NewTimer(time.Hour) // armed for real by Reset below
	var pending openJob
	hasPending := false
	for ctx.Err() == nil {
		off, more := arr.next()
		due := end
		if more {
			due = begin.Add(off)
		}
		if wait := due.Sub(env.now()); wait > 0 {
			timer.Reset(wait)
			if hasPending {
				select {
				case work <- pending:
					hasPending = false
					select {
					case <-timer.C:
					case <-ctx.Done():
					}
				case <-timer.C:
				case <-ctx.Done():
				}
			} else {
				select {
				case <-timer.C:
				case <-ctx.Done():
				}
			}
			if ctx.Err() != nil {
				break
			}
		}
		if hasPending {
			handed := false
			if more { // at the end a handed-over iteration would only meet stopping
				select {
				case work <- pending: // a VU freed up just as the next fell due
					handed = true
				default:
				}
			}
			if !handed {
				env.dropped(pending.intended)
			}
			hasPending = false
		}
		if !more {
			break
		}
		job := openJob{intended: due}
		select {
		case work <- job:
			continue
		default:
		}
		if spawned < m.max {
			spawn()
			work <- job // the new VU is about to receive, if an older one does not first
			continue
		}
		pending, hasPending = job, true
	}
	timer.Stop()
	close(stopping)
	close(work)
	wg.Wait()
}
