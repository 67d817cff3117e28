package gate

import (
	"context"
	"errors"

	"tempest/leadership"
	"tempest/transport"
	"tempest/wire"
)

// awaitLeader returns the current term once its takeover is done.
func (g *Gate) awaitLeader(ctx context.Context) (*leadership.Term, error) {
	lt, err := g.lead.AwaitServing(ctx)
	if errors.Is(err, leadership.ErrTermEnded) {
		return nil, g.notLeaderAPI()
	}
	return lt, err
}

// onBecomeLeader establishes a term. No lease is issued, no job taken and
// no report answered before a majority of gates has been read: until then
// this gate may lack a job a majority acknowledged. A sync that fails is
// tried again for as long as this term lasts, never skipped. Then the
// leases move to this term (takeOver), the term's barrier opens and the
// leader's clock runs (tickLoop).
func (g *Gate) onBecomeLeader(term uint64) {
	lt := g.lead.Establish(term)
	g.log.Info("leading the gates", "term", term)
	lt.Go(func(ctx context.Context) { g.apis.Announce(ctx, term, g.peerAddrs, g.tr.Send) })
	lt.Go(func(ctx context.Context) {
		if _, err := g.syncMajority(ctx, "takeover"); err != nil {
			g.log.Info("lost the lead before a majority of gates was read; never served", "term", term)
			return
		}
		g.seedDatacenters(ctx)
		g.takeOver(lt)
		lt.MarkSynced()
		g.log.Info("serving as gate leader", "term", term)
		g.tickLoop(lt)
	})
}

func (g *Gate) onLoseLeadership(term uint64) {
	if g.lead.Revoke(term) != nil {
		g.log.Info("no longer leading the gates", "term", term)
	}
}

// handleLeaderAPI learns a peer gate's API URL from the gate itself: the
// only source followers forward clients' requests to (api.Addresses).
func (g *Gate) handleLeaderAPI(_ context.Context, from transport.Peer, msg *wire.LeaderAPI) (wire.Message, error) {
	if !g.isPeer(from.NodeID) {
		return nil, wire.Errorf(wire.CodeRejected, "%s is not a configured gate", from.NodeID)
	}
	if err := g.apis.Learn(from.NodeID, msg.URL); err != nil {
		return nil, wire.Errorf(wire.CodeMalformed, "%v", err)
	}
	return nil, nil
}
