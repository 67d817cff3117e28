package manager

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"tempest/leadership"
)

// scheduleLoop places PENDING workflows (queued jobs, retries) for as long as
// term lt lasts: at once when kicked (a worker registered or joined, a
// heartbeat showed more free cores, a workflow ended, a retry was queued),
// and on every heartbeat interval as a safety net for a missed kick.
func (m *Manager) scheduleLoop(ctx context.Context, lt *leadership.Term) {
	t := time.NewTicker(m.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		m.confirmPending(ctx, lt)
		m.placePending(ctx, lt)
		select {
		case <-ctx.Done():
			return
		case <-m.kickCh:
		case <-t.C:
		}
	}
}

// placePending places the PENDING workflows of every unfinished job, in
// the order the round's plan gives (gang.go): replacement tasks of running
// pipelines first, then oldest job first, each pipeline whole or not at
// all, so a queue drains in submission order as cores free up.
func (m *Manager) placePending(ctx context.Context, lt *leadership.Term) {
	var plan []placement
	m.update(func(tx *txn) {
		plan = m.planLocked(tx, m.queueLocked(nil), nil)
	})
	if len(plan) == 0 {
		return
	}
	results := m.placeAll(ctx, ctx, lt, plan)
	m.unplacePartial(ctx, lt, plan, results)
	for _, r := range results {
		if r.outcome == outcomeNoQuorum {
			// Quorum is lost for everyone alike; the next tick retries.
			return
		}
	}
}

// queueLocked is the jobs whose pending work may be placed, oldest first:
// unfinished, confirmed, and not being placed by their Submit call, except
// with (that call's own job).
func (m *Manager) queueLocked(with *jobState) []*jobState {
	jobs := make([]*jobState, 0, len(m.jobs))
	for _, j := range m.jobs {
		if !j.rec.Status.Terminal() && j.rec.Confirmed && (!j.submitting || j == with) {
			jobs = append(jobs, j)
		}
	}
	slices.SortFunc(jobs, func(a, b *jobState) int {
		return cmp.Or(cmp.Compare(a.rec.CreatedAt, b.rec.CreatedAt), strings.Compare(a.rec.ID(), b.rec.ID()))
	})
	return jobs
}

// placeAll places a plan's workflows, at most MaxParallelPlacements at a
// time, and returns each one's result in order. Those with cores reserved
// (a pipeline's tasks) are placed under keep, which a submission makes
// outlast its caller: half a pipeline placed would hold its cores for
// nothing.
func (m *Manager) placeAll(ctx, keep context.Context, lt *leadership.Term, plan []placement) []placeResult {
	results := make([]placeResult, len(plan))
	sem := make(chan struct{}, m.cfg.MaxParallelPlacements)
	var wg sync.WaitGroup
	for i, p := range plan {
		pctx := ctx
		if p.on.ID != "" {
			pctx = keep
		}
		select {
		case sem <- struct{}{}:
		case <-pctx.Done():
			m.release(p)
			results[i] = placeResult{outcome: outcomeSkipped, err: pctx.Err()}
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			results[i] = m.place(pctx, lt, p)
		})
	}
	wg.Wait()
	return results
}

// release gives back a planned placement that will not be made: its claim
// and its reserved cores.
func (m *Manager) release(p placement) {
	m.mu.Lock()
	p.w.placing, p.w.target = false, ""
	m.mu.Unlock()
	if p.on.ID != "" {
		m.workers.unreserve(p.on.ID, p.cores)
	}
}
