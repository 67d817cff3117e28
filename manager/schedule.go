package manager

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"tempest/leadership"
	"tempest/wire"
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

// placePending tries to place every PENDING workflow of every unfinished
// job, oldest job first, so a queue drains in submission order as cores
// free up.
func (m *Manager) placePending(ctx context.Context, lt *leadership.Term) {
	m.mu.Lock()
	jobs := make([]*jobState, 0, len(m.jobs))
	for _, j := range m.jobs {
		if !j.rec.Status.Terminal() && j.rec.Confirmed && !j.submitting {
			jobs = append(jobs, j)
		}
	}
	slices.SortFunc(jobs, func(a, b *jobState) int {
		return cmp.Or(cmp.Compare(a.rec.CreatedAt, b.rec.CreatedAt), strings.Compare(a.rec.ID(), b.rec.ID()))
	})
	var pending []*workflowState
	for _, j := range jobs {
		for _, w := range j.wfs {
			if w.rec.Status == wire.WorkflowPending && !w.placing {
				pending = append(pending, w)
			}
		}
	}
	m.mu.Unlock()
	if len(pending) == 0 {
		return
	}
	for _, r := range m.placeAll(ctx, lt, pending) {
		if r.outcome == outcomeNoQuorum {
			// Quorum is lost for everyone alike; the next tick retries.
			return
		}
	}
}

// placeAll places workflows, at most MaxParallelPlacements at a time, and
// returns each one's result in order.
func (m *Manager) placeAll(ctx context.Context, lt *leadership.Term, wfs []*workflowState) []placeResult {
	results := make([]placeResult, len(wfs))
	sem := make(chan struct{}, m.cfg.MaxParallelPlacements)
	var wg sync.WaitGroup
	for i, w := range wfs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			results[i] = placeResult{outcome: outcomeSkipped, err: ctx.Err()}
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			results[i] = m.place(ctx, lt, w)
		})
	}
	wg.Wait()
	return results
}
