package worker

import (
	"slices"
	"time"

	"tempest/wire"
)

// FenceTable keeps the highest fence token seen per workflow, so that a
// dispatch or cancel from a deposed leader (an older term, hence a smaller
// token) is refused with wire.ErrStaleFence instead of acted on.
//
// Memory stays bounded: entries of workflows that finished more than the
// retention ago are dropped, and the table remembers the highest token it
// ever dropped as a floor below which every token is refused. The floor is
// sound because managers issue tokens as term<<32|seq (docs/datacenter.md):
// tokens grow across all workflows and leaders, so a token at or below one
// issued for a workflow that finished a retention ago was issued at least
// that long ago too, and is stale whichever workflow it names. Within the
// retention a finished workflow keeps its own entry, so a repeated dispatch
// of it is refused precisely.
//
// Not safe for concurrent use; the Worker guards it with its mutex.
type FenceTable struct {
	entries    map[string]fenceEntry
	floor      uint64
	retention  time.Duration
	maxEntries int
}

type fenceEntry struct {
	token    uint64
	finished time.Time // zero while the workflow runs here
}

// defaultMaxFenceEntries caps finished entries kept inside the retention:
// a burst of tiny workflows must not grow the table without bound. Running
// workflows are bounded by the cores and never evicted.
const defaultMaxFenceEntries = 100_000

// NewFenceTable returns an empty table that forgets finished workflows after
// retention.
func NewFenceTable(retention time.Duration) *FenceTable {
	return &FenceTable{entries: make(map[string]fenceEntry), retention: retention, maxEntries: defaultMaxFenceEntries}
}

// CheckDispatch reports whether a dispatch of workflowID with token may run.
// It refuses a token older than the one seen for the workflow, a repeat of
// the token of a run that already finished here, and any token at or below
// the floor. A repeat of the token of a run still in progress is allowed:
// it is the same dispatch delivered twice, and the caller answers it from
// the running workflow.
func (f *FenceTable) CheckDispatch(workflowID string, token uint64) error {
	if token == 0 {
		return errNoFence("dispatch", workflowID)
	}
	if token <= f.floor {
		return wire.Errorf(wire.CodeStaleFence, "workflow %s: fence token %d is at or below %d, the newest token of workflows finished long ago", workflowID, token, f.floor)
	}
	e, ok := f.entries[workflowID]
	switch {
	case !ok:
		return nil
	case token < e.token:
		return wire.Errorf(wire.CodeStaleFence, "workflow %s: fence token %d is older than %d", workflowID, token, e.token)
	case token == e.token && !e.finished.IsZero():
		return wire.Errorf(wire.CodeStaleFence, "workflow %s: already ran here with fence token %d", workflowID, token)
	}
	return nil
}

// CheckCancel reports whether a cancel carrying token may stop workflowID:
// it must not be older than the dispatch it would stop.
func (f *FenceTable) CheckCancel(workflowID string, token uint64) error {
	if token == 0 {
		return errNoFence("cancel", workflowID)
	}
	if e, ok := f.entries[workflowID]; ok && token < e.token {
		return wire.Errorf(wire.CodeStaleFence, "workflow %s: cancel fence token %d is older than %d", workflowID, token, e.token)
	}
	return nil
}

// errNoFence refuses an unfenced command. Every leader-issued command
// carries a token (term<<32|seq, never 0), so 0 means a sender that does
// not fence at all; acting on it would defeat fencing for everyone.
func errNoFence(what, workflowID string) error {
	return wire.Errorf(wire.CodeRejected, "%s of workflow %s carries no fence token", what, workflowID)
}

// Start records that workflowID runs here under token (or, for a running
// workflow re-dispatched by a newer leader, now answers to token).
func (f *FenceTable) Start(workflowID string, token uint64) {
	e := f.entries[workflowID]
	e.token = max(e.token, token)
	e.finished = time.Time{}
	f.entries[workflowID] = e
	f.enforceCap()
}

// Finish records that workflowID stopped running at now; its token is kept
// for the retention.
func (f *FenceTable) Finish(workflowID string, now time.Time) {
	if e, ok := f.entries[workflowID]; ok {
		e.finished = now
		f.entries[workflowID] = e
	}
}

// Tombstone records a cancel for a workflow not running here, so that its
// dispatch, if it arrives after the cancel (messages can overtake each
// other), is refused as stale.
func (f *FenceTable) Tombstone(workflowID string, token uint64, now time.Time) {
	if _, ok := f.entries[workflowID]; ok || token <= f.floor {
		return
	}
	f.entries[workflowID] = fenceEntry{token: token, finished: now}
	f.enforceCap()
}

// Token returns the highest token seen for workflowID.
func (f *FenceTable) Token(workflowID string) (uint64, bool) {
	e, ok := f.entries[workflowID]
	return e.token, ok
}

// Sweep drops entries of workflows finished more than the retention before
// now, raising the floor to their tokens, and returns how many it dropped.
func (f *FenceTable) Sweep(now time.Time) int {
	n := 0
	for id, e := range f.entries {
		if !e.finished.IsZero() && now.Sub(e.finished) > f.retention {
			f.forget(id, e)
			n++
		}
	}
	return n
}

// Len is the number of workflows remembered.
func (f *FenceTable) Len() int { return len(f.entries) }

// Floor is the token at or below which every dispatch is refused.
func (f *FenceTable) Floor() uint64 { return f.floor }

func (f *FenceTable) forget(id string, e fenceEntry) {
	f.floor = max(f.floor, e.token)
	delete(f.entries, id)
}

// enforceCap evicts the oldest finished entries when over the cap, down to
// nine tenths of it so that the scan is paid once per many insertions. It only
// runs under a flood of finished workflows the sweep has not caught up with.
func (f *FenceTable) enforceCap() {
	if len(f.entries) <= f.maxEntries {
		return
	}
	type aged struct {
		id string
		e  fenceEntry
	}
	var finished []aged
	for id, e := range f.entries {
		if !e.finished.IsZero() {
			finished = append(finished, aged{id, e})
		}
	}
	slices.SortFunc(finished, func(a, b aged) int { return a.e.finished.Compare(b.e.finished) })
	drop := min(len(f.entries)-f.maxEntries*9/10, len(finished))
	for _, a := range finished[:drop] {
		f.forget(a.id, a.e)
	}
}
