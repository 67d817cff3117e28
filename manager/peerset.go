package manager

import (
	"context"
	"maps"
	"slices"
	"sync"

	"tempest/leadership"
)

// peerSet is the manager group as one quorum decision sees it: the other
// voters, the majority of all voters, and the learners. It is built from
// the election's configuration in effect and never changed; a membership
// change swaps in a new one (groupView.set), so a change takes effect
// between two decisions, never in the middle of one.
//
// Learners (managers added at runtime, still SYNCING) are sent every write
// a voter is sent, so that they hold what the voters hold once promoted,
// but they never confirm a placement and their answers never count toward
// a majority.
type peerSet struct {
	epoch      uint64
	voters     map[string]string // the other voters: id -> QUIC address
	voterIDs   []string          // voters' keys, sorted
	quorum     int               // a majority of all voters, this manager included if it is one
	learners   map[string]string // the learners other than this manager
	learnerIDs []string          // learners' keys, sorted
	selfVoter  bool              // this manager votes
	selfLearn  bool              // this manager is a learner: SYNCING until promoted
}

func newPeerSet(self string, c *leadership.Configuration) *peerSet {
	p := &peerSet{epoch: c.Epoch, voters: map[string]string{}, learners: map[string]string{}, quorum: c.Quorum(),
		selfVoter: c.Has(self), selfLearn: c.HasLearner(self)}
	for _, mem := range c.Members {
		if mem.ID != self {
			p.voters[mem.ID] = mem.QUIC
		}
	}
	for _, mem := range c.Learners {
		if mem.ID != self {
			p.learners[mem.ID] = mem.QUIC
		}
	}
	p.voterIDs = slices.Sorted(maps.Keys(p.voters))
	p.learnerIDs = slices.Sorted(maps.Keys(p.learners))
	return p
}

// addr is a voter's or a learner's address, "" for anyone else.
func (p *peerSet) addr(id string) string {
	if a, ok := p.voters[id]; ok {
		return a
	}
	return p.learners[id]
}

// isPeer reports whether id is another manager of the group, voter or
// learner: both may send and receive replicated operations.
func (p *peerSet) isPeer(id string) bool { return p.addr(id) != "" }

// voterAddrs lists the other voters' addresses, in id order.
func (p *peerSet) voterAddrs() []string {
	out := make([]string, 0, len(p.voterIDs))
	for _, id := range p.voterIDs {
		out = append(out, p.voters[id])
	}
	return out
}

// groupView holds the current peerSet and counts, per set, the decisions
// still using it (hold). A learner's sync is answered only once no decision
// holds a set older than the one naming that learner (settled): every
// write made before the learner was in the set is then in the state the
// learner copies, and every write after it is also sent to the learner.
type groupView struct {
	mu       sync.Mutex
	cur      *peerSet
	inflight map[*peerSet]int
	drained  chan struct{} // closed and replaced whenever a count drops to zero
}

func newGroupView(p *peerSet) *groupView {
	return &groupView{cur: p, inflight: map[*peerSet]int{}, drained: make(chan struct{})}
}

// load is the current set, for a decision that writes nothing a learner
// must hold (a read, a confirmation round).
func (g *groupView) load() *peerSet {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cur
}

// hold is the current set for a decision that writes to the group; the
// decision calls release when its writes have been sent.
func (g *groupView) hold() (p *peerSet, release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p = g.cur
	g.inflight[p]++
	return p, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.inflight[p]--; g.inflight[p] == 0 {
			delete(g.inflight, p)
			close(g.drained)
			g.drained = make(chan struct{})
		}
	}
}

// set makes p the current set; it reports whether p is newer than the one
// it replaces (an older configuration is never put back).
func (g *groupView) set(p *peerSet) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cur != nil && p.epoch <= g.cur.epoch {
		return false
	}
	g.cur = p
	return true
}

// settled waits until no decision holds a set older than the current one,
// and returns the current set; or ctx's error.
func (g *groupView) settled(ctx context.Context) (*peerSet, error) {
	for {
		g.mu.Lock()
		cur, wait := g.cur, g.drained
		busy := false
		for p := range g.inflight {
			busy = busy || p.epoch < cur.epoch
		}
		g.mu.Unlock()
		if !busy {
			return cur, nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
