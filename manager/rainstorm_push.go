package manager

import (
	"context"
	"time"

	"tempest/leadership"
	"tempest/wire"
)

// rsPushTimeout bounds one route-change hint to a worker.
const rsPushTimeout = 2 * time.Second

// rsRoutesChanged tells every worker running a task of the pipelines these
// opens belong to that the routes changed. A task that opened under a new
// incarnation replaced one that died: its upstream tasks should resend to
// it now, not when their resend timer runs out, so that recovery takes
// failure detection and placement, not that timer too. Workers take it as
// a hint and ask for the routes (wire.RainstormRoutesChanged).
func (m *Manager) rsRoutesChanged(lt *leadership.Term, opens []*wire.RainstormOpen) {
	opened := map[[2]string][]wire.RainstormTask{}
	var pipes [][2]string
	for _, o := range opens {
		k := [2]string{o.Task.Job, o.Task.Workflow}
		if _, ok := opened[k]; !ok {
			pipes = append(pipes, k)
		}
		opened[k] = append(opened[k], wire.RainstormTask{Stage: o.Task.Stage, Index: o.Task.Index})
	}
	lt.Go(func(ctx context.Context) {
		for _, p := range pipes {
			addrs := map[string]bool{}
			for _, r := range m.rsRoutes(p[0], p[1]) {
				if r.Addr != "" {
					addrs[r.Addr] = true
				}
			}
			for addr := range addrs {
				cctx, cancel := context.WithTimeout(ctx, rsPushTimeout)
				if err := m.tr.Send(cctx, addr, &wire.RainstormRoutesChanged{Job: p[0], Workflow: p[1], Opened: opened[p]}); err != nil {
					m.log.Debug("route change not told", "job_id", p[0], "workflow", p[1], "addr", addr, "err", err)
				}
				cancel()
			}
		}
	})
}
