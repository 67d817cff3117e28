package worker

import (
	"context"
	"net"
	"time"

	"tempest/swim"
	"tempest/wire"
)

// Joining the seeds is retried with backoff between these bounds: managers
// may start after their workers, and a worker outside SWIM gets no work.
const (
	joinBackoffBase = 500 * time.Millisecond
	joinBackoffMax  = 15 * time.Second
)

// leaveTimeout bounds how long a draining worker waits for its leave to be
// gossiped: several gossip rounds in every profile, and a peer that misses it
// sees the worker dead a little later instead, which managers handle alike.
const leaveTimeout = 2 * time.Second

func (w *Worker) swimConfig(quicAddr string) swim.Config {
	c, _ := w.cfg.SwimConfig(w.cfg.SwimBind, w.keyring, w.base) // checked by Validate
	c.Meta = swim.NodeMeta{Role: wire.RoleWorker, Datacenter: w.cfg.Datacenter}
	if _, _, err := net.SplitHostPort(quicAddr); err == nil {
		c.Meta.QUICAddr = quicAddr // an in-memory test transport has no host:port
	}
	c.Embedder = embedder{w}
	c.Events = swim.EventHandler{OnJoin: w.memberSeen, OnUpdate: w.memberSeen, OnDead: w.memberGone}
	return c
}

// memberSeen learns where a manager of this datacenter listens.
func (w *Worker) memberSeen(n swim.NodeInfo) {
	if n.Meta.Role == wire.RoleManager && n.Meta.Datacenter == w.cfg.Datacenter {
		w.leader.learn(n.Name, n.Meta.QUICAddr)
	}
}

// memberGone fails over when the leader manager dies or leaves (docs/datacenter.md):
// register with another manager, reporting the active workflows.
func (w *Worker) memberGone(n swim.NodeInfo) {
	if n.Meta.Role != wire.RoleManager {
		return
	}
	w.managerClock.Forget(n.Name)
	if w.leader.lost(n.Meta.QUICAddr) {
		w.log.Warn("leader manager gone; registering with another", "manager", n.Name, "addr", n.Meta.QUICAddr, "state", n.State)
		w.requestRegistration(n.Meta.QUICAddr)
	}
}

// joinLoop joins the SWIM seeds, retrying until one answers, and contacts
// again any that stops being a live member (swim.Node.KeepJoined).
func (w *Worker) joinLoop(ctx context.Context, m Membership) {
	if len(w.cfg.Join) == 0 {
		w.log.Warn("no SWIM seeds configured (join): managers will not see this worker's heartbeats")
		return
	}
	m.KeepJoined(ctx, w.cfg.Join, joinBackoffBase, joinBackoffMax, "SWIM cluster", w.log)
}
