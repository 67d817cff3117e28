package manager

import (
	"context"
	"time"

	"tempest/internal/lifecycle"
	"tempest/swim"
	"tempest/transport"
	"tempest/wire"
)

// The manager is a swim.StateEmbedder: its ManagerHeartbeat rides in the
// acks it sends, and the acks its own probes collect carry the workers'
// (and peers') heartbeats. Both methods run on memberlist's goroutines, so
// LocalState hands back bytes encoded ahead of time by heartbeatLoop and
// PeerState only decodes and stores.
//
// Worker heartbeats come two ways, and workerHeartbeat below is the one
// place both are merged: passively in SWIM acks (every manager, but only
// when its probe picks that worker) and actively, pushed by the worker to
// the leader over QUIC (worker.Config.HeartbeatPush), which keeps the
// leader's view fresh at any number of workers.

// LocalState implements swim.StateEmbedder.
func (m *Manager) LocalState() []byte {
	if b := m.hb.Load(); b != nil {
		return *b
	}
	return nil
}

// PeerState implements swim.StateEmbedder.
func (m *Manager) PeerState(node swim.NodeInfo, state []byte, _ time.Duration) {
	t, err := swim.StateType(state)
	if err != nil {
		return
	}
	switch t {
	case wire.TypeWorkerHeartbeat:
		hb, err := swim.DecodeWorkerHeartbeat(state)
		if err != nil || hb.NodeID != node.Name {
			return // a node may only speak for itself
		}
		m.workerHeartbeat(hb, node.Addr, false)
	case wire.TypeManagerHeartbeat:
		hb, err := swim.DecodeManagerHeartbeat(state)
		if err != nil || hb.NodeID != node.Name {
			return
		}
		m.managers.heartbeat(hb)
	}
}

// handleWorkerHeartbeat takes a heartbeat a worker pushed over QUIC. The
// sender's authenticated id is the only identity believed.
func (m *Manager) handleWorkerHeartbeat(_ context.Context, from transport.Peer, hb *wire.WorkerHeartbeat) (wire.Message, error) {
	if hb.NodeID != from.NodeID {
		return nil, wire.Errorf(wire.CodeRejected, "heartbeat of %q sent by %q: a node may only speak for itself", hb.NodeID, from.NodeID)
	}
	m.workerHeartbeat(hb, "", true)
	return nil, nil
}

// workerHeartbeat merges one worker heartbeat into the worker table.
// pushed says it came over QUIC rather than in a SWIM ack: such a heartbeat
// may have been in flight when SWIM declared the worker dead, so it never
// brings a dead worker back (SWIM, a registration or progress do).
func (m *Manager) workerHeartbeat(hb *wire.WorkerHeartbeat, swimAddr string, pushed bool) {
	if hb.Datacenter != "" && hb.Datacenter != m.cfg.Datacenter {
		return
	}
	if applied, grew := m.workers.mergeHeartbeat(hb, swimAddr, pushed); applied && grew {
		m.kick()
	}
}

// refreshHeartbeat rebuilds the embedded heartbeat. Rebuilds run one at a
// time, so the state they read and the versions they take go in the order
// they are stored: two at once could leave the older one embedded, a
// stepped-down leader still claiming to lead under a version that peers
// which saw the newer one reject.
func (m *Manager) refreshHeartbeat() {
	m.hbMu.Lock()
	defer m.hbMu.Unlock()
	st := m.elector.Status()
	workers, cores := m.workers.totals()
	_, total := m.workers.registeredCores()
	hb := &wire.ManagerHeartbeat{
		NodeID:         m.cfg.ID,
		Datacenter:     m.cfg.Datacenter,
		IsLeader:       m.leading() != nil,
		Term:           st.Term,
		WorkerCount:    workers,
		AvailableCores: cores,
		TotalCores:     total,
		Addr:           m.tr.Addr(),
		LeaderID:       st.Leader,
		Load:           int(m.loadReading().Level),
	}
	if m.keyring != nil {
		hb.SendKeyID = m.keyring.SendKeyID()
		hb.AcceptKeyIDs = m.keyring.AcceptedKeyIDs()
	}
	m.mu.Lock()
	for _, j := range m.jobs {
		if j.rec.Status.Terminal() {
			continue
		}
		hb.ActiveJobs++
		for _, w := range j.wfs {
			if w.rec.Status == wire.WorkflowAssigned || w.rec.Status == wire.WorkflowRunning {
				hb.ActiveWorkflows++
			}
		}
	}
	m.mu.Unlock()
	// Versions start from the wall clock so a restarted manager's
	// heartbeats are not taken for stale ones by peers that remember the
	// previous incarnation.
	if m.hbVer.Load() == 0 {
		m.hbVer.CompareAndSwap(0, uint64(m.clock.Now().UnixNano()))
	}
	hb.Version = m.hbVer.Add(1)
	b, err := swim.EncodeManagerHeartbeat(hb)
	if err != nil {
		m.log.Error("encode heartbeat", "err", err)
		return
	}
	m.hb.Store(&b)
}

// heartbeatLoop keeps the embedded heartbeat fresh and passes Lifeguard's
// local health score to the election, so a degraded manager neither
// campaigns nor keeps leading.
func (m *Manager) heartbeatLoop(ctx context.Context) {
	lifecycle.Every(ctx, m.cfg.HeartbeatInterval, func() {
		lhm := m.members.LocalHealth()
		r, healthier := m.gradeLoad(lhm)
		m.refreshHeartbeat()
		m.applyLoad(r, healthier, lhm)
	})
}
