// Package lifecycle owns what a role (gate, manager, worker) runs in the background:
// its goroutines and its in-flight message handlers, so that Shutdown can
// stop new work, wait for the running work, and only then close what that
// work uses (the store, the transport).
package lifecycle

import (
	"context"
	"errors"
	"sync"
	"time"

	"tempest/transport"
	"tempest/wire"
)

// ErrNotRunnable is Start's answer after Shutdown began or a second time.
var ErrNotRunnable = errors.New("Run called twice or after Shutdown")

// Owner is the lifecycle of one role. The zero value is not usable; use New.
type Owner struct {
	ctx    context.Context // ends when closing begins; parent of all background work
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex // alone: nothing else is taken under it
	closing bool
	running bool
	serving bool          // Serve began
	served  chan struct{} // closed when Serve returns
	stopped chan struct{} // closed by the first Stop's finish
	closers []func() error
}

// New returns an Owner whose context is live until Close.
func New() *Owner {
	o := &Owner{served: make(chan struct{}), stopped: make(chan struct{})}
	o.ctx, o.cancel = context.WithCancel(context.Background())
	return o
}

// Context ends when Close begins.
func (o *Owner) Context() context.Context { return o.ctx }

// Go runs f on a goroutine the Owner waits for, with its context. It
// reports false (and runs nothing) once Close has begun.
func (o *Owner) Go(f func(ctx context.Context)) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closing {
		return false
	}
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		f(o.ctx)
	}()
	return true
}

// Start marks the role running (its Run began); a second call, or one after
// Close began, fails.
func (o *Owner) Start() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closing || o.running {
		return ErrNotRunnable
	}
	o.running = true
	return nil
}

// Serve is a role's Run, the same for the gate and the manager: it marks
// the role running (as Start), calls start (which starts the role's
// goroutines with Go) and waits until ctx ends or Close begins. Then it
// ends the context: background work stops, while handlers are still let in
// until the role's Shutdown, which releases the rest.
func (o *Owner) Serve(ctx context.Context, start func()) error {
	o.mu.Lock()
	if o.closing || o.running {
		o.mu.Unlock()
		return ErrNotRunnable
	}
	o.running, o.serving = true, true
	o.mu.Unlock()
	defer close(o.served)
	start()
	select {
	case <-ctx.Done():
	case <-o.ctx.Done():
	}
	o.cancel()
	return nil
}

// Stop is the first half of a role's Shutdown, the same in every role that
// Serves: refuse new work (Close), wait for Serve to return, call stop
// (what must end before the wait, such as the election), then wait for
// every goroutine and handler. The first caller gets first true and calls
// finish once it released the rest (SWIM, transport, stores); any later
// caller waits for that finish and gets false.
func (o *Owner) Stop(stop func()) (first bool, finish func()) {
	first, _ = o.Close()
	if !first {
		<-o.stopped
		return false, func() {}
	}
	o.mu.Lock()
	serving := o.serving
	o.mu.Unlock()
	if serving {
		<-o.served
	}
	if stop != nil {
		stop()
	}
	o.Wait()
	return true, func() { close(o.stopped) }
}

// Opened records close as what undoes something the role just opened (its
// store, its transport, its SWIM membership), for Release. Recording as
// each thing opens keeps one list for both ends: a New that fails half way
// and a Shutdown release exactly what was opened.
func (o *Owner) Opened(close func() error) {
	o.mu.Lock()
	o.closers = append(o.closers, close)
	o.mu.Unlock()
}

// Release runs the closes Opened recorded, the last opened first (what
// was opened later may use what was opened before it), each once, and
// returns every error. A role calls it once its goroutines and handlers
// are done (after Stop, or when New fails).
func (o *Owner) Release() error {
	o.mu.Lock()
	closers := o.closers
	o.closers = nil
	o.mu.Unlock()
	var errs []error
	for i := len(closers) - 1; i >= 0; i-- {
		errs = append(errs, closers[i]())
	}
	return errors.Join(errs...)
}

// Cancel ends the context without closing: background work stops, handlers
// are still accepted (Run returning while Shutdown has not been called).
func (o *Owner) Cancel() { o.cancel() }

// Close refuses new goroutines and handlers from now on and ends the
// context. first is false when Close had already begun; running reports
// whether Start had been called.
func (o *Owner) Close() (first, running bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	first, running = !o.closing, o.running
	o.closing = true
	o.cancel()
	return first, running
}

// Sleep waits d, or less if ctx ends first; it reports whether the whole d
// passed (false: stop).
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Every calls f every d until ctx ends: the periodic chores of a role
// (retention, health, heartbeats, garbage collection). A call runs to its
// end before the next tick counts; ticks missed meanwhile are dropped.
func Every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// Wait waits for every goroutine and handler the Owner let in.
func (o *Owner) Wait() { o.wg.Wait() }

// Handle registers f for message type t on tr, typed: a message of another
// type is refused as malformed, and once Close began every message is
// answered unavailable ("<role> shutting down"), so a handler never runs
// after what it uses was closed.
func Handle[T wire.Message](o *Owner, tr transport.Transport, role string, t wire.MsgType,
	f func(ctx context.Context, from transport.Peer, msg T) (wire.Message, error)) {
	tr.Handle(t, func(ctx context.Context, from transport.Peer, msg wire.Message) (wire.Message, error) {
		typed, ok := msg.(T)
		if !ok {
			return nil, wire.Errorf(wire.CodeMalformed, "unexpected %T for %s", msg, t)
		}
		o.mu.Lock()
		if o.closing {
			o.mu.Unlock()
			return nil, &wire.Error{Code: wire.CodeUnavailable, Message: role + " shutting down"}
		}
		o.wg.Add(1)
		o.mu.Unlock()
		defer o.wg.Done()
		return f(ctx, from, typed)
	})
}
