package store

import (
	"errors"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// Group commit. One goroutine owns every write transaction: it takes the
// first queued write, gathers whatever else queued meanwhile (while the
// previous commit was fsyncing), and commits them together. Unlike
// bolt.DB.Batch there is no timer: a lone writer commits at once (bbolt's
// batch delay cost ~2 ms per commit on the submit path, measured in
// bench/provision), and under load batches grow by themselves because
// writers queue during each fsync.

// ErrClosed is returned by writes after Close.
var ErrClosed = errors.New("store closed")

const (
	// commitQueue bounds writes waiting for the committer; past it,
	// writers block, which is the backpressure a full disk should apply.
	commitQueue = 1024
	// maxCommitBatch bounds one transaction so a flood cannot build a
	// commit too large to fsync promptly.
	maxCommitBatch = 256
)

type commitReq struct {
	fn   func(*bolt.Tx) error
	done chan error
}

// write runs fn in a group commit and returns once it is durable (or failed).
// fn may run more than once if another write in its batch fails, so it must
// be safe to repeat.
func (s *Store) write(fn func(*bolt.Tx) error) error {
	req := &commitReq{fn: fn, done: make(chan error, 1)}
	// Holding the read lock across the send is what lets Close close the
	// channel safely: it waits for every sender to finish first.
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	s.reqs <- req
	s.mu.RUnlock()
	return <-req.done
}

// commitLoop runs until Close closes reqs, committing what is queued.
func (s *Store) commitLoop() {
	defer s.wg.Done()
	for req := range s.reqs {
		batch := []*commitReq{req}
	gather:
		for len(batch) < maxCommitBatch {
			select {
			case r, ok := <-s.reqs:
				if !ok {
					break gather
				}
				batch = append(batch, r)
			default:
				break gather
			}
		}
		s.commit(batch)
	}
}

// commit writes batch in one transaction. A write whose function fails gets
// that error alone, and the rest are committed again without it, so one bad
// write never fails its neighbours.
func (s *Store) commit(batch []*commitReq) {
	for len(batch) > 0 {
		failed := -1
		var fnErr error
		err := s.db.Update(func(tx *bolt.Tx) error {
			for i, r := range batch {
				if err := r.fn(tx); err != nil {
					failed, fnErr = i, err
					return err
				}
			}
			return nil
		})
		if failed < 0 {
			for _, r := range batch {
				r.done <- err // nil, or the commit's own error for everyone
			}
			return
		}
		batch[failed].done <- fnErr
		batch = slices.Delete(batch, failed, failed+1)
	}
}
