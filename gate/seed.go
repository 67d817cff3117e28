package gate

import (
	"context"
	"sync"
	"sync/atomic"

	"tempest/wire"
)

// seedDatacenters asks every manager the datacenter table knows (from SWIM
// membership or an earlier heartbeat) for its heartbeat now, and records
// the answers. SWIM carries a given manager's heartbeat to a given gate
// only every few probe intervals (one member is probed per interval), so a
// gate that just took the lead may not have heard a datacenter's leader
// within HealthTimeout and would refuse a job with "0 are healthy" though
// every datacenter is fine. A new leader seeds its table before it serves,
// and a submit that finds too few healthy datacenters seeds it once more
// before refusing. Managers SWIM holds dead are not asked, and the asking
// ends (within DispatchTimeout) once every known datacenter has a healthy
// leader, so a dead manager does not hold a takeover up. It returns how
// many managers answered.
func (g *Gate) seedDatacenters(ctx context.Context) int {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.DispatchTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var answered atomic.Int32
	for _, m := range g.dcs.all() {
		if m.addr == "" || !m.alive {
			continue
		}
		wg.Go(func() {
			reply, err := g.tr.Call(ctx, m.addr, &wire.ManagerStatusRequest{RequesterID: g.cfg.ID})
			if err != nil {
				g.log.Debug("datacenter table: manager did not answer", "manager", m.id, "dc", m.dc, "err", err)
				return
			}
			hb, ok := reply.(*wire.ManagerHeartbeat)
			if !ok || hb.NodeID != m.id {
				g.log.Warn("datacenter table: unexpected answer to a status request", "manager", m.id, "type", reply.Type())
				return
			}
			g.dcs.answered(hb)
			answered.Add(1)
			if g.allHealthy() {
				cancel()
			}
		})
	}
	wg.Wait()
	n := int(answered.Load())
	g.log.Info("datacenter table seeded from the managers", "answered", n)
	return n
}

// allHealthy reports whether every datacenter the table knows is healthy.
func (g *Gate) allHealthy() bool {
	for _, h := range g.dcs.health(g.cfg.HealthTimeout) {
		if !h.Healthy {
			return false
		}
	}
	return true
}
