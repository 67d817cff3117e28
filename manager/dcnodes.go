package manager

import (
	"context"

	"tempest/transport"
	"tempest/wire"
)

// handleDatacenterNodes answers a gate's request for this datacenter's
// workers (`tempest cluster` through a gate). Only a leader that has synced
// answers: its worker table is the one placements read, where a follower's
// (SWIM acks only) or a new leader's before state sync may miss workers.
func (m *Manager) handleDatacenterNodes(_ context.Context, _ transport.Peer, _ *wire.DatacenterNodesRequest) (wire.Message, error) {
	lt := m.leading()
	if lt == nil {
		return nil, m.elector.NotLeaderError()
	}
	if !lt.Synced() {
		return nil, wire.Errorf(wire.CodeUnavailable, "leader of %s is still syncing its workers' state", m.cfg.Datacenter)
	}
	return &wire.DatacenterNodes{Datacenter: m.cfg.Datacenter, Workers: m.workerNodes()}, nil
}

// workerNodes is the worker table as operators see it, sorted by id. A
// worker not alive shows no free cores: whatever it last reported, no work
// can be placed there.
func (m *Manager) workerNodes() []wire.DatacenterNode {
	now := m.clock.Now()
	list := m.workers.list()
	out := make([]wire.DatacenterNode, 0, len(list))
	for _, wv := range list {
		n := wire.DatacenterNode{ID: wv.ID, State: string(wv.State), AvailableCores: wv.AvailableCores,
			TotalCores: wv.TotalCores, Addr: wv.Addr, SendKeyID: wv.SendKeyID, AcceptKeyIDs: wv.AcceptKeyIDs}
		if !wv.Alive {
			n.State, n.AvailableCores = "dead", 0
		}
		if !wv.HeartbeatAt.IsZero() {
			n.HeartbeatAgeMs = max(now.Sub(wv.HeartbeatAt).Milliseconds(), 0)
		}
		out = append(out, n)
	}
	return out
}
