package overload

import (
	"context"
	"log/slog"
	"sync"
	"testing"
)

// recElector records what a Yielder tells its election; its Handoff ends
// when the test releases it.
type recElector struct {
	mu       sync.Mutex
	lhm      []int
	handoffs int
	started  chan struct{}
	release  chan struct{}
}

func (e *recElector) SetLHM(lhm int) { e.mu.Lock(); e.lhm = append(e.lhm, lhm); e.mu.Unlock() }

func (e *recElector) Handoff(context.Context) (string, error) {
	e.mu.Lock()
	e.handoffs++
	e.mu.Unlock()
	e.started <- struct{}{}
	<-e.release
	return "peer", nil
}

func (e *recElector) last() (int, int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lhm[len(e.lhm)-1], e.handoffs
}

// A HIGH leader with a healthier peer hands over once per HIGH episode,
// shows its true score while the handoff is under way and the step-down
// score after it; a follower in the same state only steps down; without a
// healthier peer, or below HIGH, the true score is reported.
func TestYielderHandsOverOncePerEpisode(t *testing.T) {
	el := &recElector{started: make(chan struct{}, 2), release: make(chan struct{})}
	var wg sync.WaitGroup
	y := &Yielder{Elector: el, Log: slog.New(slog.DiscardHandler), Peer: "node",
		Spawn: func(f func(context.Context)) bool { wg.Go(func() { f(context.Background()) }); return true }}
	high, normal := Reading{Level: High}, Reading{Level: Normal}
	check := func(step string, wantLHM, wantHandoffs int) {
		t.Helper()
		if lhm, n := el.last(); lhm != wantLHM || n != wantHandoffs {
			t.Fatalf("%s: election sees %d after %d handoffs, want %d after %d", step, lhm, n, wantLHM, wantHandoffs)
		}
	}

	y.Apply(high, false, 3, true)
	check("HIGH, no healthier peer", 3, 0)
	y.Apply(high, true, 3, true)
	<-el.started // the handoff blocks until released
	check("handoff under way", 3, 1)
	y.Apply(high, true, 3, true)
	check("still under way", 3, 1)
	close(el.release)
	wg.Wait()
	check("handed over", StepDownLHM, 1)
	y.Apply(high, true, 3, false)
	check("HIGH follower with a healthier peer", StepDownLHM, 1)
	y.Apply(normal, true, 0, false)
	check("NORMAL again", 0, 1)
	y.Apply(high, true, 3, true)
	wg.Wait()
	check("a new HIGH episode", StepDownLHM, 2)
}
