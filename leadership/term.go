package leadership

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
)

// A role (gate, manager) does some work only while it leads: it issues
// fence tokens, runs its leader loops, and serves leader-only requests once
// it has read what its predecessor left (the "synced before serving"
// barrier). All of that belongs to one term of leadership and must end with
// it. Term is that state, and Terms holds the current one, in the shape of
// the election's callbacks: OnBecomeLeader establishes a term,
// OnLoseLeadership revokes it.
//
// Election callbacks lag the election (they are delivered after the
// Machine's state changed), so a role that has just lost the lead may not
// have heard yet. Terms.Leading therefore checks the held term against the
// elector's own current view: a node that is no longer leader stops issuing
// commands before its callback arrives.

// Fence tokens are term<<32 | seq: the high half is the election term of the
// leader that issued the command, the low half counts commands within that
// term. Terms only grow and a term has one leader, so every token of a newer
// leader is larger than any token of an older one, and within a term each
// command gets a larger token than the last.

// Token builds a fence token from a term and a sequence number.
func Token(term uint64, seq uint32) uint64 { return term<<32 | uint64(seq) }

// TokenTerm is the term a fence token was issued in.
func TokenTerm(token uint64) uint64 { return token >> 32 }

// ErrTokensExhausted: a term issued 2^32-1 fence tokens. A leader would need
// to stay in one term for billions of commands; stepping through an election
// is the honest answer, so issuing stops rather than wrapping around (a
// wrapped token would be older than ones already issued, and receivers would
// refuse it, or worse, accept it in place of a newer one).
var ErrTokensExhausted = errors.New("fence tokens of this term exhausted")

// ErrTermEnded: the term ended (the node lost the lead, or is shutting
// down) before what was asked of it.
var ErrTermEnded = errors.New("leadership term ended")

// Spawn runs f on a goroutine its caller's owner waits for (a role's
// lifecycle.Owner.Go), with the owner's context; it reports false, running
// nothing, once the owner is shutting down.
type Spawn func(f func(ctx context.Context)) bool

// Term is one term of this node's leadership. Its zero value is not usable;
// Terms.Establish (or NewTerm) makes one.
type Term struct {
	n      uint64
	ctx    context.Context
	cancel context.CancelFunc
	seq    atomic.Uint64
	synced chan struct{}
	once   sync.Once
	spawn  Spawn

	mu    sync.Mutex // guards ended against wg.Add racing End's Wait
	ended bool
	wg    sync.WaitGroup
}

// NewTerm starts term n. Its context ends at End or with parent. Goroutines
// of the term run through spawn (nil: plain goroutines, which End still
// waits for).
func NewTerm(parent context.Context, n uint64, spawn Spawn) *Term {
	ctx, cancel := context.WithCancel(parent)
	return &Term{n: n, ctx: ctx, cancel: cancel, synced: make(chan struct{}), spawn: spawn}
}

// Number is the election term.
func (t *Term) Number() uint64 { return t.n }

// Context ends when the term does.
func (t *Term) Context() context.Context { return t.ctx }

// Ended reports whether the term is over.
func (t *Term) Ended() bool { return t.ctx.Err() != nil }

// NextToken returns a fresh fence token of this term, larger than every one
// it returned before; ErrTokensExhausted once the term's sequence is used up.
func (t *Term) NextToken() (uint64, error) {
	s := t.seq.Add(1)
	if s > math.MaxUint32 {
		// Later calls keep failing: the counter only grows.
		return 0, ErrTokensExhausted
	}
	return Token(t.n, uint32(s)), nil
}

// MarkSynced opens the barrier: the role has read what it needs to serve as
// leader. Calling it again does nothing.
func (t *Term) MarkSynced() { t.once.Do(func() { close(t.synced) }) }

// Synced reports whether the barrier is open.
func (t *Term) Synced() bool {
	select {
	case <-t.synced:
		return true
	default:
		return false
	}
}

// AwaitSynced waits for the barrier: nil once it is open, ErrTermEnded if
// the term ends first, ctx's error if ctx does. An ended term whose barrier
// was open still answers nil: the caller checks the term separately when it
// must.
func (t *Term) AwaitSynced(ctx context.Context) error {
	if t.Synced() {
		return nil
	}
	select {
	case <-t.synced:
		return nil
	case <-t.ctx.Done():
		return ErrTermEnded
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Go runs f with the term's context on a goroutine End waits for. It
// reports false, running nothing, once the term ended or the owner stopped
// taking work.
func (t *Term) Go(f func(ctx context.Context)) bool {
	t.mu.Lock()
	if t.ended {
		t.mu.Unlock()
		return false
	}
	t.wg.Add(1)
	t.mu.Unlock()
	run := func(context.Context) {
		defer t.wg.Done()
		f(t.ctx)
	}
	if t.spawn == nil {
		go run(t.ctx)
		return true
	}
	if !t.spawn(run) {
		t.wg.Done()
		return false
	}
	return true
}

// End ends the term: its context is cancelled and End returns once every
// goroutine started with Go has returned, so two terms never run leader
// work side by side in one process. It must not be called from one of
// those goroutines.
func (t *Term) End() {
	t.mu.Lock()
	t.ended = true
	t.mu.Unlock()
	t.cancel()
	t.wg.Wait()
}

// Terms holds a role's current term of leadership.
type Terms struct {
	parent  context.Context
	spawn   Spawn
	current func() uint64
	held    atomic.Pointer[Term]
}

// NewTerms returns an empty holder. Terms run under parent (the role's
// lifetime) and their goroutines through spawn; current reports the term
// the elector leads in now, zero when it does not lead (Elector.FenceToken).
func NewTerms(parent context.Context, spawn Spawn, current func() uint64) *Terms {
	return &Terms{parent: parent, spawn: spawn, current: current}
}

// Establish starts term n (from OnBecomeLeader) and holds it. A term still
// held is ended first.
func (s *Terms) Establish(n uint64) *Term {
	t := NewTerm(s.parent, n, s.spawn)
	if old := s.held.Swap(t); old != nil {
		old.End()
	}
	return t
}

// Revoke ends term n (from OnLoseLeadership) if it is the term held, and
// returns it (nil if another term, or none, is held: a late callback of an
// older term changes nothing).
func (s *Terms) Revoke(n uint64) *Term {
	t := s.held.Load()
	if t == nil || t.n != n || !s.held.CompareAndSwap(t, nil) {
		return nil
	}
	t.End()
	return t
}

// Held returns the term held, whatever the elector says now (nil when
// none): for what must see a term that is still being revoked.
func (s *Terms) Held() *Term { return s.held.Load() }

// Leading returns the held term if the elector still leads in it, nil
// otherwise.
func (s *Terms) Leading() *Term {
	t := s.held.Load()
	if t == nil || t.Ended() || s.current() != t.n {
		return nil
	}
	return t
}

// AwaitServing returns the leading term once its barrier is open;
// ErrTermEnded when this node does not lead or stops leading first, ctx's
// error if ctx ends first.
func (s *Terms) AwaitServing(ctx context.Context) (*Term, error) {
	t := s.Leading()
	if t == nil {
		return nil, ErrTermEnded
	}
	if err := t.AwaitSynced(ctx); err != nil {
		return nil, err
	}
	return t, nil
}
