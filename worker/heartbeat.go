package worker

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"tempest/internal/lifecycle"
	"tempest/swim"
	"tempest/wire"
)

// Heartbeat is the worker's state as SWIM probers see it.
func (w *Worker) Heartbeat() wire.WorkerHeartbeat {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.heartbeatLocked()
}

func (w *Worker) heartbeatLocked() wire.WorkerHeartbeat {
	hb := wire.WorkerHeartbeat{
		NodeID:         w.cfg.ID,
		State:          w.stateLocked(),
		TotalCores:     w.cores.Total(),
		AvailableCores: w.cores.Available(),
		QueueDepth:     len(w.execs),
		CPUPercent:     w.cpuPct,
		MemoryPercent:  w.memPct,
		Version:        w.version,
		Datacenter:     w.cfg.Datacenter,
	}
	if w.tr != nil {
		hb.Addr = w.tr.Addr()
	}
	if w.keyring != nil {
		// Read at every encode, and ReloadSecrets bumps, so the ids shown
		// in `tempest cluster` follow a rotation pass within a probe round.
		hb.SendKeyID = w.keyring.SendKeyID()
		hb.AcceptKeyIDs = w.keyring.AcceptedKeyIDs()
	}
	if len(w.execs) > 0 {
		hb.ActiveWorkflows = make(map[string]string, len(w.execs))
		for id, e := range w.execs {
			hb.ActiveWorkflows[id] = string(e.latest.Status)
		}
	}
	return hb
}

// stateLocked is the state the worker reports: the lifecycle overrides the
// health monitor's verdict.
func (w *Worker) stateLocked() wire.WorkerState {
	switch {
	case !w.running || w.stopping:
		return wire.WorkerOffline
	case w.draining:
		return wire.WorkerDraining
	}
	return w.health.state
}

// encodeHeartbeat encodes hb for SWIM acks. An ack payload is capped at
// swim.MaxStateSize, so with many workflows the per-workflow map is cut to
// the first ids that fit: the counts that matter to a scheduler (cores,
// queue depth, state) always travel, and the full list is in state sync.
func encodeHeartbeat(hb wire.WorkerHeartbeat) []byte {
	b, err := swim.EncodeWorkerHeartbeat(&hb)
	if err == nil || !errors.Is(err, swim.ErrStateTooLarge) {
		return b
	}
	all := hb.ActiveWorkflows
	ids := sortedKeys(all)
	for n := len(ids) / 2; ; n /= 2 {
		hb.ActiveWorkflows = make(map[string]string, n)
		for _, id := range ids[:n] {
			hb.ActiveWorkflows[id] = all[id]
		}
		if b, err = swim.EncodeWorkerHeartbeat(&hb); err == nil || n == 0 {
			return b
		}
	}
}

// embedder is the worker's swim.StateEmbedder. Both methods run on
// memberlist's goroutines and must not block: LocalState hands back bytes
// encoded since the last change (or just before it, when the worker's lock
// is busy), PeerState decodes and records.
type embedder struct{ w *Worker }

// LocalState implements swim.StateEmbedder. It never waits for the
// worker's lock: a stale payload is re-encoded only when the lock is free,
// and otherwise the previous one goes out (the next ack or push refreshes it).
func (m embedder) LocalState() []byte {
	if w := m.w; w.hbStale.Load() && w.mu.TryLock() {
		w.refreshHeartbeatLocked()
		w.mu.Unlock()
	}
	if b := m.w.heartbeat.Load(); b != nil {
		return *b
	}
	return nil
}

// PeerState implements swim.StateEmbedder: a manager's heartbeat tells the
// worker who leads its datacenter (and at which term), and where each
// manager listens.
func (m embedder) PeerState(node swim.NodeInfo, state []byte, _ time.Duration) {
	if t, err := swim.StateType(state); err != nil || t != wire.TypeManagerHeartbeat {
		return // another worker's heartbeat, or garbage
	}
	hb, err := swim.DecodeManagerHeartbeat(state)
	if err != nil || hb.NodeID != node.Name { // a node may only speak for itself
		m.w.log.Debug("undecodable or misattributed manager heartbeat", "from", node.Name, "err", err)
		return
	}
	m.w.managerHeartbeat(hb)
}

func (w *Worker) managerHeartbeat(hb *wire.ManagerHeartbeat) {
	if hb.Datacenter != w.cfg.Datacenter || !w.managerClock.ShouldAccept(hb.NodeID, hb.Version) {
		return
	}
	w.leader.learn(hb.NodeID, hb.Addr)
	switch {
	case hb.IsLeader:
		var changed bool
		if hb.Addr != "" {
			changed = w.leader.set(hb.NodeID, hb.Addr, hb.Term)
		} else { // its address from SWIM meta, if known
			changed, _ = w.leader.setByID(hb.NodeID, hb.Term)
		}
		if changed {
			w.log.Info("leader changed (manager heartbeat)", "leader", hb.NodeID, "term", hb.Term)
		}
	case hb.LeaderID != "":
		// A follower naming the leader: worth taking only when the worker
		// knows of none, since the leader's own heartbeat is better.
		if _, addr := w.leader.current(); addr == "" {
			if changed, _ := w.leader.setByID(hb.LeaderID, hb.Term); changed {
				w.log.Info("leader learnt (follower heartbeat)", "leader", hb.LeaderID, "term", hb.Term)
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// pushLoop is the active heartbeat channel. SWIM acks stay the passive one
// that every manager reads, but a manager collects a worker's ack only when
// its own probe picks that worker, about once per (members × probe
// interval): at a hundred workers the leader's view of one was over a
// minute old. So the worker also sends its heartbeat to the manager leader
// over QUIC, one-way, every HeartbeatPush, at once when the leader
// changes, and early (at most every HeartbeatPush/4) when something a
// scheduler places by changes: state, free cores or queue depth.
func (w *Worker) pushLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.HeartbeatPush)
	defer t.Stop()
	minGap := w.cfg.HeartbeatPush / 4
	var last time.Time
	var sent wire.WorkerHeartbeat
	for {
		w.mu.Lock()
		changed := w.changed
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.leader.changedCh():
		case <-changed:
			if !placementChanged(sent, w.Heartbeat()) {
				continue
			}
			if wait := minGap - time.Since(last); wait > 0 && !lifecycle.Sleep(ctx, wait) {
				return
			}
		}
		last = time.Now()
		if hb, ok := w.pushHeartbeat(ctx); ok {
			sent = hb
		}
	}
}

// placementChanged reports whether b differs from a in what a scheduler
// places by.
func placementChanged(a, b wire.WorkerHeartbeat) bool {
	return a.State != b.State || a.AvailableCores != b.AvailableCores || a.TotalCores != b.TotalCores || a.QueueDepth != b.QueueDepth
}

// pushHeartbeat sends the current heartbeat to the leader, if one is known.
func (w *Worker) pushHeartbeat(ctx context.Context) (wire.WorkerHeartbeat, bool) {
	_, addr := w.leader.current()
	if addr == "" {
		return wire.WorkerHeartbeat{}, false // registration finds one; SWIM acks carry on meanwhile
	}
	w.mu.Lock()
	hb := w.heartbeatLocked()
	w.refreshHeartbeatLocked() // bounds how stale an ack's payload gets while the lock is busy
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
	defer cancel()
	if err := w.tr.Send(ctx, addr, &hb); err != nil {
		w.log.Debug("heartbeat push failed", "leader_addr", addr, "err", err)
		return wire.WorkerHeartbeat{}, false
	}
	return hb, true
}
