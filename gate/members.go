package gate

import (
	"context"

	"tempest/api"
	"tempest/leadership"
	"tempest/swim"
	"tempest/transport"
)

// Gate membership changes at runtime, as the manager's: learners and
// removal are leadership.RoleMembership's, with a copy of the leader's
// records (fetchRecords) as its Copy.

// onMembersChange is the elector's OnMembersChange.
func (g *Gate) onMembersChange(c *leadership.Configuration) { g.ms.OnMembersChange(c) }

// onRemoved is the elector's OnRemoved.
func (g *Gate) onRemoved(reason string) { g.ms.OnRemoved(reason) }

// copyFromLeader is the gate's learner copy: every record the leader holds.
func (g *Gate) copyFromLeader(ctx context.Context, lead, addr string) (int, error) {
	_, n, err := g.fetchRecords(ctx, lead, addr, syncCursor{})
	return n, err
}

// learnerSyncGate is the leader's side of a learner's sync
// (RoleMembership.ServeLearner).
func (g *Gate) learnerSyncGate(ctx context.Context, from transport.Peer) error {
	return g.ms.ServeLearner(ctx, from.NodeID, g.lead.Leading() != nil, func() error { return g.elector.NotLeaderError() })
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
