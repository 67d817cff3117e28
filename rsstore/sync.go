package rsstore

import (
	"bytes"
	"context"
	"errors"
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
	return s.sync(ctx, term, &syncReads{})
}

// syncReads is what one term's sync has read of each peer so far. Lead
// keeps it across the term's attempts: a peer's answer stays true for the
// term (having answered, the peer refuses older terms' groups, and this
// leader writes nothing before its sync is done), so an attempt that
// missed its majority because one page of one peer was late goes on from
// that page instead of reading every store again from the start. Read
// afresh every attempt, a store of a few pages on a loaded host never
// finished within a term.
type syncReads struct {
	peers map[string]*peerRead
	pages int // pages read over every attempt
	bytes int // their estimated size
}

// peerRead is one peer's store read so far: the checkpoints joined, the
// cursor of the next page, and a checkpoint whose parts are coming.
type peerRead struct {
	got    wire.RainstormSyncResponse
	after  []byte
	parts  ckpt.Joiner
	done   bool
	stored bool // got is in this store
}

func (r *syncReads) of(id string) *peerRead {
	if r.peers == nil {
		r.peers = map[string]*peerRead{}
	}
	p := r.peers[id]
	if p == nil {
		p = &peerRead{}
		r.peers[id] = p
	}
	return p
}

// read goes on reading peer id's store from where the last attempt
// stopped, page by page, each bounded by QuorumTimeout. It returns the
// number of pages and bytes read, and the error that stopped it.
func (s *Store) read(ctx context.Context, term uint64, id string, pr *peerRead) (pages, size int, err error) {
	for !pr.done {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.QuorumTimeout) // per page
		resp, err := s.host.Call(cctx, id, &wire.RainstormSyncRequest{Term: term, After: pr.after, Have: s.have()})
		cancel()
		if err != nil {
			return pages, size, err
		}
		r, ok := resp.(*wire.RainstormSyncResponse)
		if !ok {
			return pages, size, fmt.Errorf("answered %T", resp)
		}
		var cs []wire.RainstormCheckpoint
		for i := range r.Checkpoints {
			c, err := pr.parts.Add(&r.Checkpoints[i])
			if err != nil {
				// The peer's store changed under the cursor (it answered
				// a newer leader): read it again from the start.
				*pr = peerRead{}
				return pages, size, fmt.Errorf("checkpoints in parts do not join: %w", err)
			}
			if c != nil {
				cs = append(cs, *c)
			}
			size += ckpt.Size(&r.Checkpoints[i])
		}
		pages++
		pr.got.Checkpoints = append(pr.got.Checkpoints, cs...)
		pr.got.Headers = append(pr.got.Headers, r.Headers...)
		pr.got.Same = append(pr.got.Same, r.Same...)
		pr.after, pr.done = r.Next, !r.More
	}
	return pages, size, nil
}

func (s *Store) sync(ctx context.Context, term uint64, reads *syncReads) error {
	peers, quorum := s.host.Peers()
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	errs := make([]error, len(peers))
	for i, id := range peers {
		pr := reads.of(id)
		if pr.done {
			continue
		}
		wg.Go(func() {
			pages, size, err := s.read(ctx, term, id, pr)
			mu.Lock()
			reads.pages += pages
			reads.bytes += size
			mu.Unlock()
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", id, err)
			}
		})
	}
	wg.Wait()
	// By peer, so the merge goes in one order whatever order the
	// answers came in.
	var answered []string
	for _, id := range peers {
		if reads.of(id).done {
			answered = append(answered, id)
		}
	}
	if 1+len(answered) < quorum {
		return fmt.Errorf("%d of %d managers answered, %d needed: %w", 1+len(answered), len(peers)+1, quorum, errors.Join(errs...))
	}
	for _, id := range answered {
		pr := reads.of(id)
		if pr.stored {
			continue
		}
		cs := make([]*wire.RainstormCheckpoint, len(pr.got.Checkpoints))
		for i := range pr.got.Checkpoints {
			cs[i] = &pr.got.Checkpoints[i]
		}
		if err := s.store(cs, pr.got.Headers); err != nil {
			return err
		}
		pr.stored = true
	}
	s.peerHave = nil // this term knows nothing of the peers' stores yet
	if err := s.spread(ctx, term, answered, quorum, reads); err != nil {
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

// holdingOf is what a store's sync answer says it holds: the checkpoints
// it sent, and the versions it named the same as this store's.
func holdingOf(r *wire.RainstormSyncResponse) holding {
	h := holding{latest: map[wire.RainstormTask]ver{}, rows: map[rowsID]bool{}}
	for i := range r.Checkpoints {
		c := &r.Checkpoints[i]
		if len(c.Rows) > 0 {
			h.rows[rowsID{c.Task, ver{c.Version, rowsInc(c)}}] = true
		}
		if c.Incarnation != 0 {
			h.latest[c.Task] = verOf(c)
		}
	}
	for _, same := range r.Same {
		h.latest[same.Task] = ver{same.Version, same.Incarnation}
	}
	return h
}

// have names the version of each task's latest checkpoint this store
// holds, for a sync's request: a peer holding the same sends its name
// alone.
func (s *Store) have() []wire.RainstormHave {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]wire.RainstormHave, 0, len(s.tasks))
	for t, st := range s.tasks {
		if st.latest != nil {
			out = append(out, wire.RainstormHave{Task: t, Version: st.latest.Version, Incarnation: st.latest.Incarnation})
		}
	}
	return out
}

// lacking is what this store holds that h does not: a task's latest
// checkpoint (whole) or a rows record (rows only), in key order.
func (s *Store) lacking(h holding) []wire.RainstormCheckpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []wire.RainstormCheckpoint
	for _, t := range slices.SortedFunc(maps.Keys(s.tasks), func(a, b wire.RainstormTask) int {
		return bytes.Compare(taskKey(a), taskKey(b))
	}) {
		st := s.tasks[t]
		if st.latest != nil && h.latest[t] != verOf(st.latest) {
			c := *st.latest
			c.Groups = st.state.whole()
			out = append(out, c)
		}
		for _, v := range slices.SortedFunc(maps.Keys(st.rows), compareVer) {
			if !h.rows[rowsID{t, v}] {
				out = append(out, wire.RainstormCheckpoint{Task: t, Version: v.version, RowsOf: v.inc, Rows: st.rows[v].records()})
			}
		}
	}
	return out
}

// spread stores on a majority what this store holds: here (it is) and on
// the peers that answered the sync (with this store, a majority; a peer
// that did not is likely down, and waiting for it would hold the term's
// first answer), each sent only what it lacks, in messages of about
// syncPage bytes, in order. A peer that lacks nothing counts at once.
func (s *Store) spread(ctx context.Context, term uint64, peers []string, quorum int, reads *syncReads) error {
	stored := make([]bool, len(peers))
	var wg sync.WaitGroup
	for i, id := range peers {
		pr := reads.of(id)
		cs := s.lacking(holdingOf(&pr.got))
		if len(cs) == 0 {
			stored[i] = true
			continue
		}
		wg.Go(func() {
			ptrs := make([]*wire.RainstormCheckpoint, len(cs))
			for j := range cs {
				ptrs[j] = &cs[j]
			}
			// A whole state over a page goes in parts (ckpt.Split);
			// the peer joins them before it stores the state.
			for _, p := range ckpt.Paged(ptrs, syncPage) {
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
