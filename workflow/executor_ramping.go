package workflow

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// rampingVUs is the closed model with stages: the VU count follows a ramp
// (vusAt), VUs being started as it rises and retired as it falls. A retired
// VU finishes the iteration it is in and then exits, so no iteration is cut
// short by a ramp-down and every request it sent is counted. When the ramp
// ends, VUs stop as under a fixed duration: the request in flight finishes,
// no new step starts.
//
// One controller goroutine (the caller of run) owns the VU table; it wakes
// only when the rounded target can change (nextVUChange), so a long flat
// stage costs nothing.
type rampingVUs struct {
	vuCount
	vus  ramp
	peak int
}

func (m *rampingVUs) maxVUs() int { return max(m.peak, 1) }

// A VU's life, kept in an atomic so that the controller and the VU agree on
// whether a retiring VU has exited (then a rise starts a new goroutine for
// its index) or not (then a rise just takes the retirement back).
const (
	vuRunning int32 = iota
	vuRetiring
	vuExited
)

type rampVU struct {
	state atomic.Int32
	// next is the VU's next iteration number, handed from an exited
	// goroutine to the next one for the same index; the state transition
	// orders the two.
	next int64
}

func (m *rampingVUs) run(ctx context.Context, env execEnv, it iteration) {
	var wg sync.WaitGroup
	stopping := make(chan struct{})
	var table []*rampVU
	active := 0 // VUs 0..active-1 are wanted; the rest are retiring or exited

	start := func(i int, v *rampVU) {
		m.n.Add(1)
		wg.Go(func() {
			defer m.n.Add(-1)
			n := v.next
			for ctx.Err() == nil {
				select {
				case <-stopping:
					v.next = n
					v.state.Store(vuExited)
					return
				default:
				}
				if v.state.Load() == vuRetiring {
					v.next = n
					if v.state.CompareAndSwap(vuRetiring, vuExited) {
						return
					}
					// The controller took the retirement back.
				}
				it(ctx, iterInfo{vu: i, n: n}, stopping)
				n++
			}
			v.next = n
			v.state.Store(vuExited)
		})
	}
	set := func(want int) {
		for i := active; i < want; i++ {
			if i == len(table) {
				table = append(table, &rampVU{})
				start(i, table[i])
				continue
			}
			v := table[i]
			if v.state.CompareAndSwap(vuRetiring, vuRunning) {
				continue // still finishing an iteration: keep it
			}
			if v.state.Load() == vuExited {
				v.state.Store(vuRunning)
				start(i, v)
			}
		}
		for i := active - 1; i >= want; i-- {
			table[i].state.CompareAndSwap(vuRunning, vuRetiring)
		}
		active = want
	}

	begin := env.now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		e := env.now().Sub(begin)
		if e >= m.vus.end {
			break
		}
		set(m.vus.vusAt(e))
		timer.Reset(m.vus.nextVUChange(e) - e)
		select {
		case <-timer.C:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(stopping)
	wg.Wait()
}
