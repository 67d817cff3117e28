package gate

import (
	"context"
	"sync"
	"sync/atomic"
)

// leaderTerm is one term of leadership. Fence tokens are term<<32 | seq, so
// every lease a later leader grants outranks every lease of an earlier one.
type leaderTerm struct {
	term   uint64
	seq    atomic.Uint64
	ctx    context.Context
	cancel context.CancelFunc
	synced chan struct{} // closed once the takeover is done
	wg     sync.WaitGroup
}

func (lt *leaderTerm) nextToken() uint64 { return lt.term<<32 | lt.seq.Add(1)&0xffffffff }

func (lt *leaderTerm) isSynced() bool {
	select {
	case <-lt.synced:
		return true
	default:
		return false
	}
}

// awaitLeader returns the current term once its takeover is done.
func (g *Gate) awaitLeader(ctx context.Context) (*leaderTerm, error) {
	lt := g.lead.Load()
	if lt == nil {
		return nil, g.notLeaderAPI()
	}
	select {
	case <-lt.synced:
		return lt, nil
	case <-lt.ctx.Done():
		return nil, g.notLeaderAPI()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (g *Gate) onBecomeLeader(term uint64) {
	ctx, cancel := context.WithCancel(g.life.Context())
	lt := &leaderTerm{term: term, ctx: ctx, cancel: cancel, synced: make(chan struct{})}
	g.lead.Store(lt)
	g.log.Info("leading the gates", "term", term)
	lt.wg.Add(1)
	if !g.spawn(func(context.Context) {
		defer lt.wg.Done()
		// No lease is issued, no job taken and no report answered before a
		// majority of gates has been read: until then this gate may lack a
		// job a majority acknowledged. A sync that fails is tried again for
		// as long as this term lasts, never skipped.
		if _, err := g.syncMajority(lt.ctx, "takeover"); err != nil {
			g.log.Info("lost the lead before a majority of gates was read; never served", "term", term)
			return
		}
		g.seedDatacenters(lt.ctx)
		g.takeOver(lt)
		close(lt.synced)
		g.log.Info("serving as gate leader", "term", term)
		g.tickLoop(lt)
	}) {
		lt.wg.Done()
	}
}

func (g *Gate) onLoseLeadership(term uint64) {
	lt := g.lead.Load()
	if lt == nil || lt.term != term {
		return
	}
	g.lead.Store(nil)
	lt.cancel()
	lt.wg.Wait()
	g.log.Info("no longer leading the gates", "term", term)
}
