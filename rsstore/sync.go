package rsstore

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"tempest/rainstorm"
	"tempest/wire"
)

// Sync merges a majority's stores into this one, as the leader of term,
// and then marks this store synced in term (Synced). Each peer that
// answers promises to refuse groups of older terms (HandleSync). Lead
// calls it before it commits anything.
func (s *Store) Sync(ctx context.Context, term uint64) error {
	peers, quorum := s.host.Peers()
	var wg sync.WaitGroup
	// By peer, so the merge goes in one order whatever order the
	// answers came in.
	resps := make([]*wire.RainstormSyncResponse, len(peers))
	for i, id := range peers {
		wg.Go(func() {
			all := &wire.RainstormSyncResponse{}
			var after []byte
			var parts rainstorm.Joiner // a checkpoint larger than a page comes in parts
			for {
				cctx, cancel := context.WithTimeout(ctx, s.cfg.QuorumTimeout) // per page
				resp, err := s.host.Call(cctx, id, &wire.RainstormSyncRequest{Term: term, After: after})
				cancel()
				r, ok := resp.(*wire.RainstormSyncResponse)
				if err != nil || !ok {
					s.host.Logger().Debug("rainstorm: read a peer's checkpoints", "peer", id, "err", err)
					return
				}
				for i := range r.Checkpoints {
					c, err := parts.Add(&r.Checkpoints[i])
					if err != nil {
						s.host.Logger().Warn("rainstorm: a peer's checkpoints in parts do not join", "peer", id, "err", err)
						return
					}
					if c != nil {
						all.Checkpoints = append(all.Checkpoints, *c)
					}
				}
				all.Headers = append(all.Headers, r.Headers...)
				if !r.More {
					break
				}
				after = r.Next
			}
			resps[i] = all
		})
	}
	wg.Wait()
	resps = slices.DeleteFunc(resps, func(r *wire.RainstormSyncResponse) bool { return r == nil })
	if 1+len(resps) < quorum {
		return fmt.Errorf("%d of %d managers answered, %d needed", 1+len(resps), len(peers)+1, quorum)
	}
	for _, r := range resps {
		cs := make([]*wire.RainstormCheckpoint, len(r.Checkpoints))
		for i := range r.Checkpoints {
			cs[i] = &r.Checkpoints[i]
		}
		if err := s.store(cs, r.Headers); err != nil {
			return err
		}
	}
	s.peerHave = nil // this term knows nothing of the peers' stores yet
	s.setSynced(term)
	return nil
}

// Synced reports whether this store has read a majority's stores as the
// leader of term.
func (s *Store) Synced(term uint64) bool { return s.syncedTerm.Load() == term }

// SyncedChan returns a channel closed at the next completed Sync; check
// Synced after taking it.
func (s *Store) SyncedChan() <-chan struct{} {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if s.syncedCh == nil {
		s.syncedCh = make(chan struct{})
	}
	return s.syncedCh
}

// setSynced records that this manager, leading in term, has read a
// majority's checkpoints, and wakes those waiting for it.
func (s *Store) setSynced(term uint64) {
	s.syncedTerm.Store(term)
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if s.syncedCh != nil {
		close(s.syncedCh)
		s.syncedCh = nil
	}
}
