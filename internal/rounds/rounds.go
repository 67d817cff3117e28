// Package rounds groups concurrent calls into shared rounds, the way etcd's
// raft groups its appends or a store its commits: a call that finds fewer
// than inflight rounds on their way starts one at once, alone; calls that
// arrive while that many are in flight wait for the first of them to end and
// then go together, as one round. An idle caller adds no wait to a lone
// call; busy ones send one message for many.
//
// Roles use it wherever one message per item is the cost: a leader's
// quorum and commit rounds with its peers, its dispatches to one worker, a
// worker's progress reports to its leader. Each item in a round is still
// answered on its own; only the envelope (and what the receiver does once
// per message, such as a store commit) is shared.
package rounds

import (
	"context"
	"slices"
	"sync"
)

// Group groups concurrent calls into shared rounds of at most max calls,
// with at most inflight rounds running. A call arriving while fewer are
// running starts one at once; one arriving while inflight are running
// waits. The call whose round ends first takes the oldest waiting calls
// off the queue, as the next round, and hands them to the first of them,
// which runs it for all in the slot just freed. A waiting call is handed
// exactly one thing, its answer or a round to run, so a slot is never
// handed twice (and so never lost).
type Group[In, Out any] struct {
	max      int
	inflight int
	run      func(ctx context.Context, in []In) []Out

	mu      sync.Mutex
	queue   []*call[In, Out]
	running int
}

type call[In, Out any] struct {
	in  In
	out Out
	// turn receives nil once out is set, or the round (this call first)
	// this call is to run in the slot of the round that handed it over.
	turn chan []*call[In, Out]
}

// New returns a Group running run for each round. run must return one
// answer per call, in order, and bound its own time: a round carries many
// callers' work, so it runs without any one caller's cancellation.
// inflight and max are at least 1.
func New[In, Out any](inflight, limit int, run func(ctx context.Context, in []In) []Out) *Group[In, Out] {
	return &Group[In, Out]{max: max(limit, 1), inflight: max(inflight, 1), run: run}
}

// Do runs in within a round and returns its answer. The round runs under
// ctx's values without its cancellation: it carries other callers' work
// too, which one caller leaving must not fail; run bounds it, and a caller
// checks its own ctx on return. A waiting call goes in the round after the
// first one to end, unless more than max calls wait before it.
func (g *Group[In, Out]) Do(ctx context.Context, in In) Out {
	c := &call[In, Out]{in: in, turn: make(chan []*call[In, Out], 1)}
	batch := []*call[In, Out]{c}
	g.mu.Lock()
	if g.running < g.inflight {
		// A slot is free, so nothing waits: the queue is only ever filled
		// while every slot is taken, and a round that ends hands its slot
		// on rather than free it while calls wait.
		g.running++
		g.mu.Unlock()
	} else {
		g.queue = append(g.queue, c)
		g.mu.Unlock()
		if batch = <-c.turn; batch == nil {
			return c.out
		}
	}
	ins := make([]In, len(batch))
	for i, b := range batch {
		ins[i] = b.in
	}
	outs := g.run(context.WithoutCancel(ctx), ins)
	for i, b := range batch {
		b.out = outs[i]
		if b != c {
			b.turn <- nil
		}
	}

	g.mu.Lock()
	if len(g.queue) == 0 {
		g.running--
		g.mu.Unlock()
		return c.out
	}
	n := min(len(g.queue), g.max)
	next := slices.Clone(g.queue[:n])
	g.queue = slices.Delete(g.queue, 0, n)
	g.mu.Unlock()
	next[0].turn <- next
	return c.out
}

// Load reports how many rounds are running and how many calls wait.
func (g *Group[In, Out]) Load() (running, waiting int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running, len(g.queue)
}

// Waiting reports whether a call waiting for a round has an input match
// accepts.
func (g *Group[In, Out]) Waiting(match func(In) bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.queue {
		if match(c.in) {
			return true
		}
	}
	return false
}

// Keyed keeps one Group per key (a peer's address, say), so calls to one
// peer share rounds and calls to different peers never wait on each other.
// A key's Group is made on its first call and dropped once no call uses
// it, so keys that come and go (workers joining and leaving) leave nothing
// behind.
type Keyed[K comparable, In, Out any] struct {
	inflight, max int
	run           func(ctx context.Context, key K, in []In) []Out

	mu     sync.Mutex
	groups map[K]*keyedGroup[In, Out]
}

type keyedGroup[In, Out any] struct {
	*Group[In, Out]
	users int // calls holding this group; guarded by Keyed.mu
}

// NewKeyed returns a Keyed whose groups run run with their key.
func NewKeyed[K comparable, In, Out any](inflight, limit int, run func(ctx context.Context, key K, in []In) []Out) *Keyed[K, In, Out] {
	return &Keyed[K, In, Out]{inflight: inflight, max: limit, run: run, groups: make(map[K]*keyedGroup[In, Out])}
}

// Do runs in within a round of key's Group (Group.Do).
func (k *Keyed[K, In, Out]) Do(ctx context.Context, key K, in In) Out {
	k.mu.Lock()
	g, ok := k.groups[key]
	if !ok {
		g = &keyedGroup[In, Out]{Group: New(k.inflight, k.max, func(ctx context.Context, in []In) []Out {
			return k.run(ctx, key, in)
		})}
		k.groups[key] = g
	}
	g.users++
	k.mu.Unlock()

	out := g.Do(ctx, in)

	k.mu.Lock()
	// Every call counted in users is still inside Do until it decrements,
	// so the last one out sees the group idle and may drop it; a call
	// arriving later makes a fresh group.
	if g.users--; g.users == 0 {
		delete(k.groups, key)
	}
	k.mu.Unlock()
	return out
}

// Load reports how many rounds of key's group are running and how many
// calls wait (both zero when it has none).
func (k *Keyed[K, In, Out]) Load(key K) (running, waiting int) {
	k.mu.Lock()
	g := k.groups[key]
	k.mu.Unlock()
	if g == nil {
		return 0, 0
	}
	return g.Load()
}

// keys is how many groups are kept (for tests).
func (k *Keyed[K, In, Out]) keys() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.groups)
}
