package manager

import (
	"context"

	"tempest/swim"
	"tempest/transport"
	"tempest/wire"
)

// handleStatusRequest answers a gate that asks for this manager's heartbeat
// now: a gate that just took the lead seeds its datacenter table this way
// rather than wait for SWIM to carry every manager's heartbeat to it, which
// takes a few probe intervals. The answer is what SWIM would carry, rebuilt
// for the occasion.
func (m *Manager) handleStatusRequest(_ context.Context, _ transport.Peer, _ *wire.ManagerStatusRequest) (wire.Message, error) {
	m.refreshHeartbeat()
	b := m.hb.Load()
	if b == nil {
		return nil, wire.Errorf(wire.CodeUnavailable, "manager %s has no heartbeat yet", m.cfg.ID)
	}
	hb, err := swim.DecodeManagerHeartbeat(*b)
	if err != nil {
		return nil, wire.Errorf(wire.CodeInternal, "manager %s: decode own heartbeat: %v", m.cfg.ID, err)
	}
	return hb, nil
}
