package store

import (
	"errors"
	"fmt"
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

// commitReq is a write waiting for the committer. A nil fn asks only that
// the lazy writes be committed (flushLazy).
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

// flushLazy gives the lazy writes a commit of their own when none came
// along within Options.LazyFlush.
func (s *Store) flushLazy() {
	if err := s.write(nil); err != nil && !errors.Is(err, ErrClosed) {
		s.opts.OnLazyError(err)
	}
}

// takeLazy takes the lazy writes waiting, disarming their flush.
func (s *Store) takeLazy() []func(*bolt.Tx) error {
	s.lazyMu.Lock()
	defer s.lazyMu.Unlock()
	lazy := s.lazy
	s.lazy = nil
	if s.flush != nil {
		s.flush.Stop()
		s.flush = nil
	}
	return lazy
}

// commit writes batch, with the lazy writes waiting, in one transaction. A
// write whose function fails gets that error alone (a lazy one, through
// OnLazyError), and the rest are committed again without it, so one bad
// write never fails its neighbours. With no writes at all (a flush that
// found them taken by an earlier commit) nothing is committed: an empty
// bbolt commit still syncs.
func (s *Store) commit(batch []*commitReq) {
	lazy := s.takeLazy()
	batch = slices.DeleteFunc(batch, func(r *commitReq) bool {
		if r.fn == nil {
			r.done <- nil
			return true
		}
		return false
	})
	for len(batch) > 0 || len(lazy) > 0 {
		failed, failedLazy := -1, -1
		var fnErr error
		err := s.db.Update(func(tx *bolt.Tx) error {
			for i, fn := range lazy {
				if err := fn(tx); err != nil {
					failedLazy, fnErr = i, err
					return err
				}
			}
			for i, r := range batch {
				if err := r.fn(tx); err != nil {
					failed, fnErr = i, err
					return err
				}
			}
			return nil
		})
		switch {
		case failedLazy >= 0:
			s.opts.OnLazyError(fmt.Errorf("store %s: lazy put: %w", s.path, fnErr))
			lazy = slices.Delete(lazy, failedLazy, failedLazy+1)
		case failed >= 0:
			batch[failed].done <- fnErr
			batch = slices.Delete(batch, failed, failed+1)
		default:
			if err != nil && len(lazy) > 0 {
				s.opts.OnLazyError(fmt.Errorf("store %s: lazy put: %w", s.path, err))
			}
			for _, r := range batch {
				r.done <- err // nil, or the commit's own error for everyone
			}
			return
		}
	}
}
