package manager

import (
	"context"
	"time"

	"tempest/api"
	"tempest/internal/lifecycle"
	"tempest/jobs"
	"tempest/wire"
)

// watchInterval is the least time between two statuses of one Watch
// stream; the terminal status is never held back by more than this.
const watchInterval = 100 * time.Millisecond

// watcher is one Watch stream. Changes only wake it; it then reads the job's
// current status itself, so a slow reader skips intermediate states instead
// of stalling the manager, and never misses the terminal one.
type watcher struct {
	notify chan struct{} // capacity 1
}

func (w *watcher) wake() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// Watch implements api.Backend: the job's status now, then one per change,
// closing after the terminal status, when ctx ends, or at Shutdown.
func (m *Manager) Watch(ctx context.Context, id string) (<-chan api.JobStatus, error) {
	w := &watcher{notify: make(chan struct{}, 1)}
	m.mu.Lock()
	j, ok := m.jobs[id]
	if ok {
		if j.watchers == nil {
			j.watchers = make(map[*watcher]struct{})
		}
		j.watchers[w] = struct{}{}
	}
	m.mu.Unlock()
	if !ok {
		return nil, wire.Errorf(wire.CodeNotFound, "job %s not found", id)
	}
	out := make(chan api.JobStatus)
	stop := func() {
		m.mu.Lock()
		delete(j.watchers, w)
		m.mu.Unlock()
	}
	started := m.spawn(func(mctx context.Context) {
		defer close(out)
		defer stop()
		var sent uint64
		first := true
		for {
			st, seq, ok := m.watchStatus(id)
			if !ok {
				return
			}
			if first || seq != sent {
				select {
				case out <- st:
				case <-ctx.Done():
					return
				case <-mctx.Done():
					return
				}
				first, sent = false, seq
				if st.Status.Terminal() {
					return
				}
				// Building a status decodes every step's histogram (once
				// per change, shared by the job's watchers); with many
				// workflows reporting ten times a second, pace each stream
				// so changes coalesce instead of piling up.
				if !lifecycle.Sleep(ctx, watchInterval) || mctx.Err() != nil {
					return
				}
				continue
			}
			select {
			case <-w.notify:
			case <-ctx.Done():
				return
			case <-mctx.Done():
				return
			}
		}
	})
	if !started {
		stop()
		return nil, &wire.Error{Code: wire.CodeUnavailable, Message: "manager shutting down"}
	}
	return out, nil
}

func (m *Manager) watchStatus(id string) (api.JobStatus, uint64, bool) {
	v, ok := m.viewJob(id)
	if !ok {
		return api.JobStatus{}, 0, false
	}
	// Every watcher of a job reads the same change: the first to read it
	// merges the workflows (decoding their histograms), the rest share
	// that. seq moves on every change a watcher sends for, so a shared
	// build is never older than what a watcher would have built itself.
	wss := v.statuses.Get(v.seq, func() []jobs.WorkflowStatus { return m.workflowStatuses(v, false) })
	return m.jobStatusOf(v, wss), v.seq, true
}
