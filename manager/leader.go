package manager

import (
	"context"

	"tempest/leadership"
	"tempest/transport"
	"tempest/wire"
)

// A manager's fence tokens (leadership.Token) stamp every dispatch, first
// attempt or retry. A worker keeps the highest token per workflow and
// refuses older ones, so a superseded attempt or a deposed leader's command
// bounces.

// leading returns the current leader term if this manager leads now, nil
// otherwise (leadership.Terms checks the elector's own view, which is ahead
// of the callbacks).
func (m *Manager) leading() *leadership.Term { return m.terms.Leading() }

// onBecomeLeader establishes a term: the RainStorm checkpoint leader, and
// the state sync that opens the term's barrier and then resumes work and
// runs the scheduler.
func (m *Manager) onBecomeLeader(term uint64) {
	m.leadSince.Store(m.clock.Now().UnixNano())
	lt := m.terms.Establish(term)
	m.log.Info("leading", "term", term)
	m.refreshHeartbeat()
	lt.Go(func(ctx context.Context) { m.rs.Lead(ctx, lt.Number()) })
	lt.Go(func(ctx context.Context) { m.apis.Announce(ctx, term, m.peerAddrs, m.tr.Send) })
	lt.Go(func(ctx context.Context) {
		out := m.syncState(ctx, lt)
		lt.MarkSynced()
		lt.Go(m.repairBlobs)
		lt.Go(func(ctx context.Context) { m.rsScaleLoop(ctx, lt) })
		m.resume(ctx, lt, out)
		m.scheduleLoop(ctx, lt)
	})
}

// onLoseLeadership revokes the term: leader-only work ends before the next
// term can begin here, so two terms never place work side by side in one
// process.
func (m *Manager) onLoseLeadership(term uint64) {
	if m.terms.Revoke(term) == nil {
		return
	}
	m.log.Info("no longer leading", "term", term)
	m.update(m.forgetSettlingLocked)
	m.refreshHeartbeat()
}

func (m *Manager) onLeaderChange(leader string, term uint64) {
	m.log.Info("leader changed", "leader", leader, "term", term)
	m.refreshHeartbeat()
}

// handleLeaderAPI learns a peer manager's API URL from the peer itself:
// the only source followers forward clients' requests to (api.Addresses).
func (m *Manager) handleLeaderAPI(_ context.Context, from transport.Peer, msg *wire.LeaderAPI) (wire.Message, error) {
	if !m.isPeer(from.NodeID) {
		return nil, wire.Errorf(wire.CodeRejected, "%s is not a manager of this datacenter", from.NodeID)
	}
	if err := m.apis.Learn(from.NodeID, msg.URL); err != nil {
		return nil, wire.Errorf(wire.CodeMalformed, "%v", err)
	}
	return nil, nil
}
