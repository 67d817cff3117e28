package manager

import "context"

// leading returns the current leader term if this manager leads now, nil
// otherwise. Election callbacks lag the election, so the term is checked
// against the elector's own view: a manager that has just lost leadership
// stops issuing commands before OnLoseLeadership reaches it.
func (m *Manager) leading() *leaderTerm {
	lt := m.lead.Load()
	if lt == nil || m.elector.FenceToken() != lt.term {
		return nil
	}
	return lt
}

func (m *Manager) onBecomeLeader(term uint64) {
	lt := newLeaderTerm(m.life.Context(), term)
	m.lead.Store(lt)
	m.log.Info("leading", "term", term)
	m.refreshHeartbeat()
	m.spawnLeader(lt, func(ctx context.Context) { m.rsLead(ctx, lt) })
	m.spawnLeader(lt, func(ctx context.Context) {
		out := m.syncState(ctx, lt)
		close(lt.synced)
		m.spawnLeader(lt, m.repairBlobs)
		m.resume(ctx, lt, out)
		m.scheduleLoop(ctx, lt)
	})
}

func (m *Manager) onLoseLeadership(term uint64) {
	lt := m.lead.Load()
	if lt == nil || lt.term != term {
		return
	}
	m.lead.Store(nil)
	lt.cancel()
	// Leader-only work ends before the next term can begin here, so two
	// terms never place work side by side in one process.
	lt.wg.Wait()
	m.log.Info("no longer leading", "term", term)
	m.refreshHeartbeat()
}

func (m *Manager) onLeaderChange(leader string, term uint64) {
	m.log.Info("leader changed", "leader", leader, "term", term)
	m.refreshHeartbeat()
}

// spawnLeader runs f for as long as term lt lasts (and the manager runs).
func (m *Manager) spawnLeader(lt *leaderTerm, f func(ctx context.Context)) {
	lt.wg.Add(1)
	if !m.spawn(func(context.Context) {
		defer lt.wg.Done()
		f(lt.ctx)
	}) {
		lt.wg.Done()
	}
}
