package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"tempest/rainstorm"
	"tempest/transport"
	"tempest/wire"
)

// TestFinishedTaskSendsItsLastAcks: a task that ends right after its
// machine queued its last acks (runTask: the final checkpoint durable,
// the machine finished) sends them before its driver's goroutines stop.
// Dropped, they left the upstream sources to learn the task was done from
// their resend timers and the routes, most of a second after the output.
func TestFinishedTaskSendsItsLastAcks(t *testing.T) {
	hub := transport.NewHub()
	got := make(chan *wire.RainstormBatchAck, 8)
	up := hub.Node("up")
	up.Handle(wire.TypeRainstormBatchAck, func(_ context.Context, _ transport.Peer, msg wire.Message) (wire.Message, error) {
		got <- msg.(*wire.RainstormBatchAck)
		return nil, nil
	})
	w := &Worker{tr: hub.Node("me"), now: time.Now, log: testLogger(t)}
	d := &rsDriver{
		w: w, task: wire.RainstormTask{Job: "j", Workflow: "p", Stage: 1}, log: testLogger(t),
		out: make(chan rsOut, 8), kick: make(chan struct{}, 1),
		flush: make(chan struct{}), flushed: make(chan struct{}),
	}
	const upstream = 3
	var routes []wire.RainstormRoute
	var r rainstorm.Ready
	for i := range upstream {
		routes = append(routes, wire.RainstormRoute{Stage: 0, Index: i, Addr: "up", Node: "up", Incarnation: 1})
		r.Acks = append(r.Acks, &wire.RainstormBatchAck{From: d.task, To: i, UpTo: 7})
	}
	d.setRoutes(routes)

	ctx, cancel := context.WithCancel(context.Background())
	if _, err := d.apply(ctx, r); err != nil { // the machine's last Ready
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.sendLoop(ctx)
	}()
	// How runTask ends once the machine has finished: flush, then its
	// deferred cancel stops the loop.
	d.flushSends(ctx)
	cancel()
	wg.Wait()
	// The hub hands a message to its handler on a goroutine of its own:
	// what was sent arrives, what was dropped never does.
	deadline := time.After(10 * time.Second)
	for i := range upstream {
		select {
		case <-got:
		case <-deadline:
			t.Fatalf("%d of the %d last acks sent before the task ended", i, upstream)
		}
	}
}
