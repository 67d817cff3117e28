package leadership

import (
	"context"
	"maps"
	"slices"
	"sync"
)

// PeerSet is a role's group as one quorum decision sees it: the other
// voters, the majority of all voters, and the learners. It is built from
// the configuration in effect and never changed; a membership change swaps
// in a new one (PeerView.Set), so a change takes effect between two of a
// role's decisions, never in the middle of one.
//
// Learners (members added at runtime, still SYNCING) are sent every write
// a voter is sent, so that they hold what the voters hold once promoted,
// but they never confirm anything and their answers never count toward a
// majority.
type PeerSet struct {
	Epoch       uint64
	Voters      map[string]string // the other voters: id -> QUIC address
	VoterIDs    []string          // Voters' keys, sorted
	Quorum      int               // a majority of all voters, this node included if it is one
	Learners    map[string]string // the learners other than this node
	LearnerIDs  []string          // Learners' keys, sorted
	SelfVoter   bool              // this node votes
	SelfLearner bool              // this node is a learner: SYNCING until promoted
}

// NewPeerSet is c as node self sees it.
func NewPeerSet(self string, c *Configuration) *PeerSet {
	p := &PeerSet{Epoch: c.Epoch, Voters: map[string]string{}, Learners: map[string]string{}, Quorum: c.Quorum(),
		SelfVoter: c.Has(self), SelfLearner: c.HasLearner(self)}
	for _, mem := range c.Members {
		if mem.ID != self {
			p.Voters[mem.ID] = mem.QUIC
		}
	}
	for _, mem := range c.Learners {
		if mem.ID != self {
			p.Learners[mem.ID] = mem.QUIC
		}
	}
	p.VoterIDs = slices.Sorted(maps.Keys(p.Voters))
	p.LearnerIDs = slices.Sorted(maps.Keys(p.Learners))
	return p
}

// Addr is a voter's or a learner's address, "" for anyone else.
func (p *PeerSet) Addr(id string) string {
	if a, ok := p.Voters[id]; ok {
		return a
	}
	return p.Learners[id]
}

// IsPeer reports whether id is another member, voter or learner: both
// may send and receive a role's replicated operations.
func (p *PeerSet) IsPeer(id string) bool { return p.Addr(id) != "" }

// Targets lists every other member's id, voters first: where a write goes.
func (p *PeerSet) Targets() []string { return slices.Concat(p.VoterIDs, p.LearnerIDs) }

// VoterAddrs lists the other voters' addresses, in id order.
func (p *PeerSet) VoterAddrs() []string {
	out := make([]string, 0, len(p.VoterIDs))
	for _, id := range p.VoterIDs {
		out = append(out, p.Voters[id])
	}
	return out
}

// Addrs lists every other member's address, voters first.
func (p *PeerSet) Addrs() []string {
	out := p.VoterAddrs()
	for _, id := range p.LearnerIDs {
		out = append(out, p.Learners[id])
	}
	return out
}

// PeerView holds a role's current PeerSet and counts, per set, the
// decisions still using it (Hold). A learner's sync is answered only once
// no decision holds a set older than the one naming that learner
// (Settled): every write made before the learner was in the set is then in
// the state the learner copies, and every write after it is also sent to
// the learner.
type PeerView struct {
	mu       sync.Mutex
	cur      *PeerSet
	inflight map[*PeerSet]int
	drained  chan struct{} // closed and replaced whenever a count drops to zero
}

// NewPeerView starts a view at p.
func NewPeerView(p *PeerSet) *PeerView {
	return &PeerView{cur: p, inflight: map[*PeerSet]int{}, drained: make(chan struct{})}
}

// Load is the current set, for a decision that writes nothing a learner
// must hold (a read, a confirmation round).
func (g *PeerView) Load() *PeerSet {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cur
}

// Hold is the current set for a decision that writes to the group; the
// decision calls release once its writes have been sent.
func (g *PeerView) Hold() (p *PeerSet, release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p = g.cur
	g.inflight[p]++
	var once sync.Once
	return p, func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.inflight[p]--; g.inflight[p] == 0 {
				delete(g.inflight, p)
				close(g.drained)
				g.drained = make(chan struct{})
			}
		})
	}
}

// Set makes p the current set; it reports whether p is newer than the one
// it replaces (an older configuration is never put back).
func (g *PeerView) Set(p *PeerSet) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cur != nil && p.Epoch <= g.cur.Epoch {
		return false
	}
	g.cur = p
	return true
}

// Settled waits until no decision holds a set older than the current one,
// and returns the current set; or ctx's error.
func (g *PeerView) Settled(ctx context.Context) (*PeerSet, error) {
	for {
		g.mu.Lock()
		cur, wait := g.cur, g.drained
		busy := false
		for p := range g.inflight {
			busy = busy || p.Epoch < cur.Epoch
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
