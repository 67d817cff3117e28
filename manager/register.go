package manager

import (
	"context"
	"fmt"
	"time"

	"tempest/transport"
	"tempest/wire"
)

// handleRegistration serves WorkerRegistration, which a worker sends
// itself. Every manager accepts one and records the worker; the answer
// names the leader so the worker reports there. The manager relays it to
// its peers (RelayWorkerRegistration), so that every manager can reach
// every worker (state sync after a leader change) without waiting for SWIM
// gossip. The leader adopts the workflows the worker reports running: that
// is how running work survives a worker re-homing after its manager died
// (docs/datacenter.md).
func (m *Manager) handleRegistration(ctx context.Context, from transport.Peer, reg *wire.WorkerRegistration) (wire.Message, error) {
	if reg.NodeID != from.NodeID {
		return &wire.RegistrationAck{Error: "registration must come from the worker itself"}, nil
	}
	if err := m.ensureWatched(ctx, reg); err != nil {
		m.log.Warn("registration refused: SWIM cannot watch the worker", "worker", reg.NodeID, "err", err)
		return &wire.RegistrationAck{Error: err.Error()}, nil
	}
	return m.register(from, reg, false), nil
}

// registrationJoinTimeout bounds the join a registration may wait for.
const registrationJoinTimeout = 3 * time.Second

// ensureWatched makes sure SWIM watches a worker before it registers, since
// SWIM is what notices a worker die. A worker can register over QUIC before
// its own join reaches any seed (it started before the managers' SWIM
// listeners, and its next try is half a second or more away); given work
// then and killed, it would have been the one node no failure detector
// knew, and its work would wait for ever. So the manager it registers with
// joins the worker's SWIM address itself, which makes it a member for
// every node by gossip, and refuses the registration when that fails (the
// worker retries). A registration without a SWIM address (a peer that does
// not announce one) is taken as it always was.
func (m *Manager) ensureWatched(ctx context.Context, reg *wire.WorkerRegistration) error {
	if reg.SwimAddr == "" {
		return nil
	}
	if _, ok := m.members.Member(reg.NodeID); ok {
		return nil
	}
	jctx, cancel := context.WithTimeout(ctx, registrationJoinTimeout)
	defer cancel()
	if _, err := m.members.Join(jctx, []string{reg.SwimAddr}); err != nil {
		return fmt.Errorf("worker %s is not a SWIM member and its SWIM address %s did not answer: %w", reg.NodeID, reg.SwimAddr, err)
	}
	return nil
}

// handleRelayedRegistration records a registration a peer manager heard
// from the worker; it is not relayed again.
func (m *Manager) handleRelayedRegistration(_ context.Context, from transport.Peer, op *wire.RelayWorkerRegistration) (wire.Message, error) {
	if !m.isPeer(from.NodeID) {
		return nil, wire.Errorf(wire.CodeRejected, "relayed registrations are only accepted from peer managers")
	}
	return m.register(from, &op.Registration, true), nil
}

// register records a worker's registration, heard from the worker itself
// or relayed by a peer.
func (m *Manager) register(from transport.Peer, reg *wire.WorkerRegistration, relayed bool) *wire.RegistrationAck {
	if reg.Datacenter != "" && reg.Datacenter != m.cfg.Datacenter {
		return &wire.RegistrationAck{Error: "worker of datacenter " + reg.Datacenter + " registered with a manager of " + m.cfg.Datacenter}
	}
	if reg.Addr == "" || reg.TotalCores < 1 {
		return &wire.RegistrationAck{Error: "registration needs an address and at least one core"}
	}
	m.workers.register(reg)
	via := "worker"
	if relayed {
		via = from.NodeID
	}
	m.log.Info("worker registered", "worker", reg.NodeID, "addr", reg.Addr, "cores", reg.TotalCores,
		"active_workflows", len(reg.ActiveWorkflows), "via", via)

	if !relayed {
		relay := &wire.RelayWorkerRegistration{Registration: *reg}
		m.spawn(func(ctx context.Context) { m.sendToPeers(ctx, relay) })
	}
	if m.leading() != nil {
		var stop []cancelTarget
		for i := range reg.ActiveWorkflows {
			p := reg.ActiveWorkflows[i]
			if m.applyProgress(&p, reg.NodeID) {
				// Superseded, ended, or of a job no majority holds: it must
				// not keep running just because it reports no progress.
				stop = append(stop, cancelTarget{worker: reg.NodeID, jobID: p.JobID, workflowID: p.WorkflowID, fence: p.FenceToken})
			}
		}
		if len(stop) > 0 {
			m.spawn(func(ctx context.Context) { m.cancelOnWorkers(ctx, stop, "stopped by the leader at registration") })
		}
	}
	m.kick()

	leader, addr := m.elector.Leader()
	ack := &wire.RegistrationAck{Accepted: true, Leader: leader, LeaderAddr: addr, Term: m.elector.Status().Term}
	// The group as it is now, not as the config file had it: a worker
	// learns here the managers added since it started.
	for _, mem := range m.elector.Members().Members {
		ack.Managers = append(ack.Managers, mem.QUIC)
	}
	return ack
}
