package rsstore

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"tempest/rainstorm/ckpt"
	"tempest/wire"
)

// Sync merges a majority's stores into this one, as the leader of term,
// stores what the merge holds and some of them lacked on a majority, and
// then marks this store synced in term (Synced). Each peer that answers
// promises to refuse groups of older terms (HandleSync). Lead calls it
// before it commits anything.
//
// The merge may adopt a checkpoint only a minority holds (a group that
// missed its majority and was undone on its leader, but not on a peer it
// reached): answering a task's resend of it "already stored", or letting
// a task build on it, before a majority holds it would acknowledge what
// the next leader may never see. And a manager caught up by whole states
// lacks the rows of the versions it missed. So both go to every peer
// before this leader answers anyone.
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
			var parts ckpt.Joiner // a checkpoint larger than a page comes in parts
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
	var answered []string
	for i, r := range resps {
		if r != nil {
			answered = append(answered, peers[i])
		}
	}
	resps = slices.DeleteFunc(resps, func(r *wire.RainstormSyncResponse) bool { return r == nil })
	if 1+len(resps) < quorum {
		return fmt.Errorf("%d of %d managers answered, %d needed", 1+len(resps), len(peers)+1, quorum)
	}
	holders := []holding{s.holding()}
	for _, r := range resps {
		holders = append(holders, holdingOf(r.Checkpoints))
		cs := make([]*wire.RainstormCheckpoint, len(r.Checkpoints))
		for i := range r.Checkpoints {
			cs[i] = &r.Checkpoints[i]
		}
		if err := s.store(cs, r.Headers); err != nil {
			return err
		}
	}
	s.peerHave = nil // this term knows nothing of the peers' stores yet
	if err := s.spread(ctx, term, answered, quorum, s.lacking(holders)); err != nil {
		return err
	}
	s.setSynced(term)
	return nil
}

// holding is what one store holds: each task's latest checkpoint and
// each rows record.
type holding struct {
	latest map[wire.RainstormTask]ver
	rows   map[rowsID]bool
}

type rowsID struct {
	task wire.RainstormTask
	v    ver
}

func (s *Store) holding() holding {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := holding{latest: map[wire.RainstormTask]ver{}, rows: map[rowsID]bool{}}
	for t, st := range s.tasks {
		if st.latest != nil {
			h.latest[t] = verOf(st.latest)
		}
		for v := range st.rows {
			h.rows[rowsID{t, v}] = true
		}
	}
	return h
}

// holdingOf is what a store's sync answer says it holds.
func holdingOf(cs []wire.RainstormCheckpoint) holding {
	h := holding{latest: map[wire.RainstormTask]ver{}, rows: map[rowsID]bool{}}
	for i := range cs {
		c := &cs[i]
		if len(c.Rows) > 0 {
			h.rows[rowsID{c.Task, ver{c.Version, rowsInc(c)}}] = true
		}
		if c.Incarnation != 0 {
			h.latest[c.Task] = verOf(c)
		}
	}
	return h
}

// lacking is what this store holds that one of holders does not: a task's
// latest checkpoint (whole) or a rows record (rows only), in key order.
func (s *Store) lacking(holders []holding) []wire.RainstormCheckpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []wire.RainstormCheckpoint
	for _, t := range slices.SortedFunc(maps.Keys(s.tasks), func(a, b wire.RainstormTask) int {
		return bytes.Compare(taskKey(a), taskKey(b))
	}) {
		st := s.tasks[t]
		if st.latest != nil && slices.ContainsFunc(holders, func(h holding) bool { return h.latest[t] != verOf(st.latest) }) {
			out = append(out, *st.latest)
		}
		for _, v := range slices.SortedFunc(maps.Keys(st.rows), compareVer) {
			if slices.ContainsFunc(holders, func(h holding) bool { return !h.rows[rowsID{t, v}] }) {
				out = append(out, wire.RainstormCheckpoint{Task: t, Version: v.version, RowsOf: v.inc, Rows: st.rows[v]})
			}
		}
	}
	return out
}

// spread stores cs on a majority: here (they are) and on the peers that
// answered the sync (with this store, a majority; a peer that did not is
// likely down, and waiting for it would hold the term's first answer), in
// messages of about syncPage bytes, in order.
func (s *Store) spread(ctx context.Context, term uint64, peers []string, quorum int, cs []wire.RainstormCheckpoint) error {
	if len(cs) == 0 {
		return nil
	}
	ptrs := make([]*wire.RainstormCheckpoint, len(cs))
	for i := range cs {
		ptrs[i] = &cs[i]
	}
	// A whole state over a page goes in parts (ckpt.Split); the
	// peer joins them before it stores the state.
	pages := ckpt.Paged(ptrs, syncPage)
	stored := make([]bool, len(peers))
	var wg sync.WaitGroup
	for i, id := range peers {
		wg.Go(func() {
			for _, p := range pages {
				cctx, cancel := context.WithTimeout(ctx, s.cfg.QuorumTimeout)
				resp, err := s.host.Call(cctx, id, &wire.RainstormReplicate{Term: term, Checkpoints: derefs(p)})
				cancel()
				if _, ok := resp.(*wire.RainstormReplicateAck); err != nil || !ok {
					s.host.Logger().Debug("rainstorm: store what a peer lacks", "peer", id, "err", err)
					return
				}
			}
			stored[i] = true
		})
	}
	wg.Wait()
	if n := 1 + len(slices.DeleteFunc(stored, func(ok bool) bool { return !ok })); n < quorum {
		return fmt.Errorf("what the sync read is on %d managers, %d needed", n, quorum)
	}
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
