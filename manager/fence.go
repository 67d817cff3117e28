package manager

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
)

// Fence tokens are term<<32 | seq: the high half is the election term of the
// leader that issued the command, the low half counts dispatches within that
// term. Terms only grow and a term has one leader, so tokens from a newer
// leader are always larger than any token of an older one, and within a
// term each dispatch (first attempt or retry) gets a larger token than the
// last. A worker keeps the highest token per workflow and refuses older
// ones, so a superseded attempt or a deposed leader's command bounces.

// fenceToken builds a token from a term and a sequence number.
func fenceToken(term uint64, seq uint32) uint64 { return term<<32 | uint64(seq) }

// fenceTerm is the term a token was issued in.
func fenceTerm(token uint64) uint64 { return token >> 32 }

// errFenceExhausted: a term issued 2^32-1 tokens. A leader would need to
// stay in one term for billions of dispatches; stepping through an election
// is the honest answer, so placement stops rather than wrapping around.
var errFenceExhausted = errors.New("fence tokens of this term exhausted")

// leaderTerm is everything that lives exactly as long as one term of this
// manager's leadership: the fence sequence, the context that leader-only
// work runs under, and the barrier that holds new work until state sync is
// done.
type leaderTerm struct {
	term   uint64
	ctx    context.Context
	cancel context.CancelFunc
	seq    atomic.Uint64
	synced chan struct{} // closed when state sync has finished
	wg     sync.WaitGroup
}

func newLeaderTerm(parent context.Context, term uint64) *leaderTerm {
	ctx, cancel := context.WithCancel(parent)
	return &leaderTerm{term: term, ctx: ctx, cancel: cancel, synced: make(chan struct{})}
}

// nextFence returns a fresh token of this term.
func (lt *leaderTerm) nextFence() (uint64, error) {
	s := lt.seq.Add(1)
	if s > math.MaxUint32 {
		return 0, errFenceExhausted
	}
	return fenceToken(lt.term, uint32(s)), nil
}

func (lt *leaderTerm) isSynced() bool {
	select {
	case <-lt.synced:
		return true
	default:
		return false
	}
}
