package gate

import (
	"context"
	"errors"
	"fmt"

	"tempest/wire"
)

// The gate changes its job table in one way, as the manager does: update
// runs a change under Gate.mu with a txn that collects what the change did,
// and once the lock is released writes it and stores it on a majority of
// gates. Reads of a job wait while a change of it is being stored
// (awaitStored), so nobody sees a version a successor might not have.
// No lock is held across a store write
// or a network call, and no change forgets to version, wake, persist or
// replicate a record it touched.

// txn is one change to the job table, made under Gate.mu.
type txn struct {
	g *Gate
	// commits get a new version, wake their watchers, are written and
	// stored on a majority of gates (save): a change the leader made.
	commits   []*jobEntry
	committed map[*jobEntry]bool
	// stores are written as they are: records adopted from another gate,
	// and a new job's (or its withdrawal's) version, which the caller
	// stores on a majority itself (replicateQuorum).
	stores []*wire.GateJobRecord
	// forgets are deleted from the disk (already gone from memory).
	forgets []string
}

// commit marks j's record changed by this gate's leader.
func (tx *txn) commit(j *jobEntry) {
	if tx.committed[j] {
		return
	}
	if tx.committed == nil {
		tx.committed = map[*jobEntry]bool{}
	}
	tx.committed[j] = true
	tx.commits = append(tx.commits, j)
}

// commitForQuorum versions j's record now and writes it without storing
// it on the other gates; it returns the copy the caller stores on a
// majority itself (a new job and its withdrawal have their own answers).
func (tx *txn) commitForQuorum(j *jobEntry) *wire.GateJobRecord {
	rec := tx.g.commitLocked(j)
	tx.stores = append(tx.stores, rec)
	return rec
}

// store writes rec as it is.
func (tx *txn) store(rec *wire.GateJobRecord) { tx.stores = append(tx.stores, rec) }

// forget drops job id from memory now and from the disk after the lock.
func (tx *txn) forget(id string) {
	delete(tx.g.jobs, id)
	tx.forgets = append(tx.forgets, id)
}

// update applies f to the job table under the lock, then writes what f
// touched and stores the records it committed on a majority of gates. It
// returns the store's errors and, with code no_quorum, a commit that did
// not reach a majority: the caller must not act on that change as stored
// (the record stays unstored, jobEntry.storedVersion, and its next report
// or takeover round commits it again).
func (g *Gate) update(f func(tx *txn)) error {
	g.mu.Lock()
	tx := &txn{g: g}
	f(tx)
	saved := make([]*wire.GateJobRecord, 0, len(tx.commits))
	done := make(chan struct{})
	for _, j := range tx.commits {
		saved = append(saved, g.commitLocked(j))
		j.storing = done
	}
	g.mu.Unlock()

	var errs []error
	if len(tx.stores) > 0 {
		if err := g.store.put(tx.stores...); err != nil {
			errs = append(errs, fmt.Errorf("persist job records: %w", err))
		}
	}
	if len(tx.forgets) > 0 {
		if err := g.store.delete(tx.forgets...); err != nil {
			errs = append(errs, fmt.Errorf("delete job records: %w", err))
		}
	}
	if len(saved) > 0 {
		if err := g.save(g.life.Context(), saved...); err != nil {
			errs = append(errs, wire.Errorf(wire.CodeNoQuorum, "job records not on a majority of gates: %v", err))
		}
		g.mu.Lock()
		for _, j := range tx.commits {
			if j.storing == done {
				j.storing = nil
			}
		}
		g.mu.Unlock()
		close(done)
	}
	return errors.Join(errs...)
}

// awaitStored waits until no change of job id is being stored on the
// other gates, so a read never shows a version a successor might lack. A
// change that failed to reach a majority is shown once its round ended: a
// leader that cannot reach a majority loses the lead soon after.
func (g *Gate) awaitStored(ctx context.Context, id string) error {
	for {
		var storing chan struct{}
		g.view(func() {
			if j, ok := g.jobs[id]; ok {
				storing = j.storing
			}
		})
		if storing == nil {
			return nil
		}
		select {
		case <-storing:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// view runs f under the lock for a consistent read of the job table; f
// changes nothing (changes go through update).
func (g *Gate) view(f func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f()
}
