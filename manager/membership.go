package manager

import (
	"context"
	"errors"
	"fmt"

	"tempest/swim"
	"tempest/wire"
)

// Membership is the part of a swim.Node the manager reads and steers.
// Production uses the swim.Node the manager starts itself; tests pass a fake
// and deliver membership events through Manager.SwimEvents.
type Membership interface {
	Members() []swim.NodeInfo
	Member(name string) (swim.NodeInfo, bool)
	LocalHealth() int
	UpdateMeta(swim.NodeMeta) error
	SetKeys(keys [][]byte) error
	// Join contacts the SWIM addresses and merges their view (a worker
	// registering before its own join got through, ensureWatched).
	Join(ctx context.Context, addrs []string) (int, error)
}

// SwimEvents returns the membership callbacks the manager needs. The manager
// installs them on the swim.Node it creates; with an injected Membership the
// caller delivers them (tests inject a worker's death this way).
func (m *Manager) SwimEvents() swim.EventHandler {
	return swim.EventHandler{
		OnJoin:   m.onNodeAlive,
		OnUpdate: m.onNodeAlive,
		OnDead:   m.onNodeDead,
	}
}

func (m *Manager) onNodeAlive(n swim.NodeInfo) {
	if n.Meta.Datacenter != "" && n.Meta.Datacenter != m.cfg.Datacenter {
		return
	}
	switch n.Meta.Role {
	case wire.RoleWorker:
		if m.workers.join(n.Name, n.Meta.QUICAddr, n.Addr) {
			m.log.Info("worker alive", "worker", n.Name, "addr", n.Meta.QUICAddr)
		}
		m.kick()
	case wire.RoleManager:
		m.managers.alive(n.Name, true)
	}
}

// disconnecter is what a transport offers to drop its connection to an
// address (transport.QUIC.Disconnect).
type disconnecter interface{ Disconnect(addr string) }

func (m *Manager) onNodeDead(n swim.NodeInfo) {
	// A node restarted on the same address does not know our connection
	// to its old process: the first call on it would fail with its outcome
	// unknown (a dispatch would cost an attempt and exclude the worker).
	// So the connection goes with the death, and the next call redials.
	if d, ok := m.tr.(disconnecter); ok {
		addr := n.Meta.QUICAddr
		if wv, known := m.workers.get(n.Name); addr == "" && known {
			addr = wv.Addr
		}
		if addr != "" {
			d.Disconnect(addr)
		}
	}
	switch n.Meta.Role {
	case wire.RoleManager:
		m.managers.alive(n.Name, false)
		m.log.Warn("peer manager gone", "manager", n.Name, "left", n.Left())
	default:
		// A node whose meta we never learnt may still be a registered
		// worker, so anything that is not a manager is looked up as one.
		if !m.workers.dead(n.Name) {
			return
		}
		m.log.Warn("worker gone", "worker", n.Name, "left", n.Left())
		m.update(func(tx *txn) { m.stopsEndedWithLocked(tx, n.Name) })
		m.workerLost(n.Name, "worker "+n.Name+" is "+n.State.String())
	}
}

// SetAPIAddr publishes the URL of this manager's API server ("http://host:port")
// once it is known (after the server binds a ":0" port), so followers can
// send clients to the leader.
func (m *Manager) SetAPIAddr(url string) error {
	m.apis.SetSelf(url)
	if err := m.members.UpdateMeta(m.nodeMeta()); err != nil {
		return fmt.Errorf("publish api address %s: %w", url, err)
	}
	return nil
}

// ReloadSecrets replaces the cluster secrets (SIGHUP during a rotation): the
// keyring the transport seals with and the SWIM gossip keys.
func (m *Manager) ReloadSecrets(current, previous string) error {
	if m.keyring == nil {
		return errors.New("manager has no keyring")
	}
	if err := m.keyring.Reload(current, previous); err != nil {
		return err
	}
	if err := m.members.SetKeys(m.keyring.MemberlistKeys()); err != nil && !errors.Is(err, swim.ErrNoEncryption) {
		return fmt.Errorf("swim keys: %w", err)
	}
	if m.gateMembers != nil {
		if err := m.gateMembers.SetKeys(m.keyring.MemberlistKeys()); err != nil && !errors.Is(err, swim.ErrNoEncryption) {
			return fmt.Errorf("gate swim keys: %w", err)
		}
	}
	// The heartbeat carries the key ids: rebuild it now rather than at the
	// next tick, so a rotation pass shows on this manager at its next ack.
	m.refreshHeartbeat()
	m.log.Info("secrets reloaded", "send_key", fmt.Sprintf("%08x", m.keyring.SendKeyID()))
	return nil
}

func (m *Manager) nodeMeta() swim.NodeMeta {
	meta := swim.NodeMeta{Role: wire.RoleManager, Datacenter: m.cfg.Datacenter, QUICAddr: m.tr.Addr()}
	if u := m.apis.Self(); u != "" {
		meta.Tags = map[string]string{"api": u}
	}
	return meta
}

func (m *Manager) joinLoop(ctx context.Context) {
	m.ownMembers.KeepJoined(ctx, m.cfg.Join, m.cfg.HeartbeatInterval, 30*m.cfg.HeartbeatInterval, "swim cluster", m.log)
}
