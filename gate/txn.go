package gate

import (
	"errors"
	"fmt"

	"tempest/wire"
)

// The gate changes its job table in one way, as the manager does: update
// runs a change under Gate.mu with a txn that collects what the change did,
// and once the lock is released writes it and sends it to the other gates.
// No lock is held across a store write
// or a network call, and no change forgets to version, wake, persist or
// replicate a record it touched.

// txn is one change to the job table, made under Gate.mu.
type txn struct {
	g *Gate
	// commits get a new version, wake their watchers, are written and then
	// sent one way to the other gates (save): a change the leader made.
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

// commitForQuorum versions j's record now and writes it without the
// one-way send; it returns the copy the caller stores on a majority of
// gates.
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

// update applies f to the job table under the lock, then writes and sends
// what f touched. It returns the store's
// error for the records written as they are and the deletions (a committed
// record's write error is logged by save: the change stands either way,
// and the next change of the record writes it again).
func (g *Gate) update(f func(tx *txn)) error {
	g.mu.Lock()
	tx := &txn{g: g}
	f(tx)
	saved := make([]*wire.GateJobRecord, 0, len(tx.commits))
	for _, j := range tx.commits {
		saved = append(saved, g.commitLocked(j))
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
	g.save(saved...)
	return errors.Join(errs...)
}

// view runs f under the lock for a consistent read of the job table; f
// changes nothing (changes go through update).
func (g *Gate) view(f func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f()
}
