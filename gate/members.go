package gate

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"tempest/api"
	"tempest/internal/lifecycle"
	"tempest/leadership"
	"tempest/swim"
	"tempest/transport"
	"tempest/wire"
)

// Gate membership changes at runtime: the gate's side of the election's
// configuration, as the manager's (manager/members.go, docs/leadership.md).
// A gate added to the group is a learner, SYNCING: it copies the leader's
// records, then reports synced and the leader promotes it; meanwhile it is
// sent every record the voters are sent and counts for nothing. A removed
// gate stops, saying why.

// membership is the gate's runtime membership state.
type membership struct {
	mu      sync.Mutex
	syncing bool  // a learner sync loop runs
	exitErr error // why the gate stops by itself (removed)
}

// onMembersChange is the elector's OnMembersChange.
func (g *Gate) onMembersChange(c *leadership.Configuration) {
	p := leadership.NewPeerSet(g.cfg.ID, c)
	if !g.group.Set(p) {
		return
	}
	g.log.Info("gate group changed", "epoch", c.Epoch, "members", c.String(), "quorum", c.Quorum(),
		"voter", p.SelfVoter, "syncing", p.SelfLearner)
	switch {
	case p.SelfLearner:
		g.startLearnerSync()
	case p.SelfVoter:
	default:
		g.removed(fmt.Errorf("removed from the gate group at configuration epoch %d (%s)", c.Epoch, c), true)
	}
}

// onRemoved is the elector's OnRemoved.
func (g *Gate) onRemoved(reason string) { g.refusedAsRemoved(reason, true) }

func (g *Gate) refusedAsRemoved(reason string, settle bool) {
	g.removed(fmt.Errorf("this gate is no longer a member of its group and will not rejoin with its old configuration: %s; "+
		"to bring it back, `tempest members add` it and start it with an empty data dir", reason), settle)
}

// removed stops the gate: Run returns err. Unless it never took part
// (settle false), it first waits, at most an election timeout, for another
// gate to lead, so a change that removed the leader completes.
func (g *Gate) removed(err error, settle bool) {
	g.ms.mu.Lock()
	first := g.ms.exitErr == nil
	if first {
		g.ms.exitErr = err
	}
	g.ms.mu.Unlock()
	if !first {
		return
	}
	g.log.Error("gate stopping: removed from its group", "err", err)
	if !settle || !g.spawn(func(ctx context.Context) {
		wctx, cancel := context.WithTimeout(ctx, g.seat.ElectionTimeout())
		defer cancel()
		for wctx.Err() == nil {
			if lead, _ := g.elector.Leader(); lead != "" && lead != g.cfg.ID {
				break
			}
			lifecycle.Sleep(wctx, g.cfg.TickInterval)
		}
		g.life.Cancel()
	}) {
		g.life.Cancel()
	}
}

func (g *Gate) exitError() error {
	g.ms.mu.Lock()
	defer g.ms.mu.Unlock()
	return g.ms.exitErr
}

func (g *Gate) startLearnerSync() {
	g.ms.mu.Lock()
	defer g.ms.mu.Unlock()
	if g.ms.syncing {
		return
	}
	g.ms.syncing = true
	g.elector.SetSynced(false)
	if !g.spawn(g.syncAsLearner) {
		g.ms.syncing = false
	}
}

// syncAsLearner reads every record of the leader, which answers a learner
// only once the records it began replicating before the learner was in its
// group have been sent (learnerSyncGate); later ones are sent here too.
func (g *Gate) syncAsLearner(ctx context.Context) {
	defer func() {
		g.ms.mu.Lock()
		g.ms.syncing = false
		g.ms.mu.Unlock()
	}()
	backoff := g.cfg.TickInterval
	for round := 0; ctx.Err() == nil; round++ {
		if !g.group.Load().SelfLearner {
			return
		}
		lead, addr := g.elector.Leader()
		err := errors.New("no leader known yet")
		if lead != "" && lead != g.cfg.ID && addr != "" {
			var n int
			if _, n, err = g.fetchRecords(ctx, lead, addr, syncCursor{}); err == nil {
				g.elector.SetSynced(true)
				g.log.Info("synced from the leader as a learner; waiting to be promoted", "leader", lead, "adopted", n)
				return
			}
		}
		if round > 0 {
			g.log.Warn("learner sync: not synced yet; trying again", "leader", lead, "round", round, "err", err)
		}
		if !lifecycle.Sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, syncRetryMax)
	}
}

// learnerSyncGate is the leader's side of a learner's sync (see the
// manager's): nil for a voter, a wait for the older writes for a learner.
func (g *Gate) learnerSyncGate(ctx context.Context, from transport.Peer) error {
	p := g.group.Load()
	if _, learner := p.Learners[from.NodeID]; !learner {
		if p.IsPeer(from.NodeID) {
			return nil
		}
		if g.lead.Leading() != nil {
			return wire.Errorf(wire.CodeUnavailable, "%s is not yet in this leader's configuration (epoch %d)", from.NodeID, p.Epoch)
		}
		return wire.Errorf(wire.CodeRejected, "gate state is only shared with configured gates")
	}
	if g.lead.Leading() == nil {
		return g.elector.NotLeaderError()
	}
	if _, err := g.group.Settled(ctx); err != nil {
		return wire.Errorf(wire.CodeUnavailable, "records begun before %s joined are still being sent: %v", from.NodeID, err)
	}
	return nil
}

// AddMember implements api.MembersBackend for the gate group.
func (g *Gate) AddMember(ctx context.Context, mc api.MemberChange) (*api.GroupView, error) {
	if _, err := g.elector.AddLearner(ctx, leadership.Member{ID: mc.ID, QUIC: mc.Addr}); err != nil {
		return nil, g.changeError(err)
	}
	return g.groupView(), nil
}

// RemoveMember implements api.MembersBackend for the gate group.
func (g *Gate) RemoveMember(ctx context.Context, id string) (*api.GroupView, error) {
	if _, err := g.elector.RemoveMember(ctx, id); err != nil {
		return nil, g.changeError(err)
	}
	return g.groupView(), nil
}

func (g *Gate) changeError(err error) error {
	return leadership.ChangeError(err, func() error { return g.notLeaderAPI() }, g.seat.ElectionTimeout())
}

// groupView is the gate group as this gate has it, each member with its
// state (see api.GroupView).
func (g *Gate) groupView() *api.GroupView {
	c := g.elector.Members()
	lead, _ := g.elector.Leader()
	members := leadership.MemberViews(c, func(mem leadership.Member, voter bool) api.MemberView {
		return api.MemberView{ID: mem.ID, Addr: mem.QUIC, Voter: voter}
	})
	reachable := func(id string) bool {
		if id == g.cfg.ID || g.members == nil {
			return true // without SWIM there is nothing to tell by
		}
		info, ok := g.members.Member(id)
		return ok && info.State == swim.StateAlive
	}
	return api.NewGroupView("gates", c.Epoch, c.Quorum(), lead, members, reachable)
}
