package rsstore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

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
	peers  map[string]*peerRead
	pages  int // pages read over every attempt
	bytes  int // their estimated size
	deltas int // latest checkpoints read as deltas
	// What the spreads sent: latest checkpoints whole and as deltas, and
	// the time they took, over every attempt (a sync's duration is read
	// and spread, and the log tells them apart).
	spreadWhole, spreadDeltas int
	spreadTook                time.Duration
}

// peerRead is one peer's store read so far: the checkpoints and deltas
// joined, the cursor of the next page, and a checkpoint and a delta whose
// parts are coming (each kind's parts follow one another in the pages).
type peerRead struct {
	got    wire.RainstormSyncResponse
	after  []byte
	parts  ckpt.Joiner
	dparts ckpt.Joiner
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
// number of pages, bytes and deltas read, and the error that stopped it.
func (s *Store) read(ctx context.Context, term uint64, id string, pr *peerRead) (pages, size, deltas int, err error) {
	for !pr.done {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.QuorumTimeout) // per page
		resp, err := s.host.Call(cctx, id, &wire.RainstormSyncRequest{Term: term, After: pr.after, Have: s.have(), Deltas: true})
		cancel()
		if err != nil {
			return pages, size, deltas, err
		}
		r, ok := resp.(*wire.RainstormSyncResponse)
		if !ok {
			return pages, size, deltas, fmt.Errorf("answered %T", resp)
		}
		var cs []wire.RainstormCheckpoint
		for i := range r.Checkpoints {
			c, err := pr.parts.Add(&r.Checkpoints[i])
			if err != nil {
				// The peer's store changed under the cursor (it answered
				// a newer leader): read it again from the start.
				*pr = peerRead{}
				return pages, size, deltas, fmt.Errorf("checkpoints in parts do not join: %w", err)
			}
			if c != nil {
				cs = append(cs, *c)
			}
			size += ckpt.Size(&r.Checkpoints[i])
		}
		for i := range r.Deltas {
			d := &r.Deltas[i]
			c, err := pr.dparts.Add(&d.Checkpoint)
			if err != nil {
				*pr = peerRead{}
				return pages, size, deltas, fmt.Errorf("deltas in parts do not join: %w", err)
			}
			if c != nil {
				pr.got.Deltas = append(pr.got.Deltas, wire.RainstormDelta{BaseVersion: d.BaseVersion, BaseIncarnation: d.BaseIncarnation, Checkpoint: *c})
				deltas++
			}
			size += ckpt.Size(&d.Checkpoint)
		}
		pages++
		pr.got.Older = append(pr.got.Older, r.Older...)
		pr.got.Checkpoints = append(pr.got.Checkpoints, cs...)
		pr.got.Headers = append(pr.got.Headers, r.Headers...)
		pr.got.Same = append(pr.got.Same, r.Same...)
		pr.after, pr.done = r.Next, !r.More
	}
	return pages, size, deltas, nil
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
			pages, size, deltas, err := s.read(ctx, term, id, pr)
			mu.Lock()
			reads.pages += pages
			reads.bytes += size
			reads.deltas += deltas
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
	if err := s.merge(answered, reads); err != nil {
		return err
	}
	s.peerHave = nil // this term knows nothing of the peers' stores yet
	start := time.Now()
	err := s.spread(ctx, term, answered, quorum, reads)
	reads.spreadTook += time.Since(start)
	if err != nil {
		return err
	}
	s.setSynced(term)
	// The learners (and a voter promoted since peers was read) are read
	// and sent what they lack too, in their feeds: never waited for,
	// never counted.
	s.catchUpLearners(term, peers)
	return nil
}

// syncedDelta is a delta a peer answered a sync with, and which peer.
type syncedDelta struct {
	peer string
	d    *wire.RainstormDelta
}

// merge stores what the peers answered that it has not stored yet: per
// task the newest latest checkpoint any of them holds, and every rows
// record. A delta goes on the state it was cut from only (its base
// checked as a replicated one's is): the newest of a task first, after
// which an older one is dropped (the newest wins anyway). One whose base
// this store no longer holds while it is still the newest (this store
// stored another peer's version between the pages of two attempts) is
// not stored: its peer is read again from the start, with this store's
// version now, and the attempt fails, to be retried.
func (s *Store) merge(answered []string, reads *syncReads) error {
	var (
		cs []*wire.RainstormCheckpoint
		ds []syncedDelta
		hs []wire.RainstormHeader
	)
	var merged []*peerRead
	for _, id := range answered {
		pr := reads.of(id)
		if pr.stored {
			continue
		}
		for i := range pr.got.Checkpoints {
			cs = append(cs, &pr.got.Checkpoints[i])
		}
		for i := range pr.got.Deltas {
			ds = append(ds, syncedDelta{id, &pr.got.Deltas[i]})
		}
		hs = append(hs, pr.got.Headers...)
		merged = append(merged, pr)
	}
	if len(merged) == 0 {
		return nil
	}
	stale, err := s.storeMerged(cs, ds, hs)
	if err != nil {
		return err
	}
	for _, pr := range merged {
		pr.stored = true
	}
	if len(stale) == 0 {
		return nil
	}
	for _, id := range stale {
		*reads.of(id) = peerRead{}
	}
	return fmt.Errorf("deltas of %v were cut on a version this store no longer holds: reading them again", stale)
}

// storeMerged persists then applies, in one write, the deltas ds (each on
// the stored state it names as its base) and the whole checkpoints cs,
// and returns the peers whose delta was newer than anything merged but
// not on this store's version. Under wmu.
func (s *Store) storeMerged(cs []*wire.RainstormCheckpoint, ds []syncedDelta, hs []wire.RainstormHeader) (stale []string, err error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	// Newest first by (incarnation, version), the order newer takes.
	slices.SortStableFunc(ds, func(a, b syncedDelta) int {
		ca, cb := &a.d.Checkpoint, &b.d.Checkpoint
		return -cmp.Or(cmp.Compare(ca.Incarnation, cb.Incarnation), cmp.Compare(ca.Version, cb.Version))
	})
	cur := map[wire.RainstormTask]snap{}
	last := func(t wire.RainstormTask) snap {
		prev, ok := cur[t]
		if !ok {
			prev.head, prev.state = s.head(t)
		}
		return prev
	}
	changes := make([]change, 0, len(cs)+len(ds))
	var unmatched []syncedDelta
	for _, sd := range ds {
		c := &sd.d.Checkpoint
		prev := last(c.Task)
		if !newer(prev.head, c) {
			continue // a newer one is merged
		}
		if verOf(prev.head) != (ver{sd.d.BaseVersion, sd.d.BaseIncarnation}) {
			unmatched = append(unmatched, sd)
			continue
		}
		ch := deltaChange(prev, c)
		changes = append(changes, ch)
		cur[c.Task] = snap{ch.next, ch.nextState}
	}
	for _, c := range cs {
		changes = append(changes, s.wholeChange(cur, c))
	}
	for _, sd := range unmatched {
		if newer(last(sd.d.Checkpoint.Task).head, &sd.d.Checkpoint) && !slices.Contains(stale, sd.peer) {
			stale = append(stale, sd.peer)
		}
	}
	hs = s.newest(hs)
	if err := s.persist(changes, hs); err != nil {
		return nil, err
	}
	s.apply(changes, hs)
	return stale, nil
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
	for i := range r.Deltas {
		h.latest[r.Deltas[i].Checkpoint.Task] = verOf(&r.Deltas[i].Checkpoint)
	}
	for _, named := range slices.Concat(r.Same, r.Older) {
		h.latest[named.Task] = ver{named.Version, named.Incarnation}
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

// lacking is what this store holds that h does not, in key order: a
// task's latest checkpoint — as a delta on the version h names where this
// store's history reaches back to it (deltaFrom), else whole — and each
// rows record h lacks. Only references are taken under mu; the parts are
// cut from them outside it (sendRecords), so a spread neither holds the
// store's lock while a state is made whole nor costs more than it sends.
func (s *Store) lacking(h holding) []syncRecord {
	out := s.lackingRefs(h)
	for i := range out {
		r := &out[i]
		if v, holds := h.latest[r.head.Task]; holds && !r.rows {
			if head, state, ok := deltaFrom(r.head, r.state, r.hist, v); ok {
				r.head, r.state, r.delta, r.base = head, state, true, v
			}
		}
	}
	return out
}

// lackingRefs is lacking's records, every latest checkpoint whole.
func (s *Store) lackingRefs(h holding) []syncRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []syncRecord
	for _, t := range slices.SortedFunc(maps.Keys(s.tasks), func(a, b wire.RainstormTask) int {
		return bytes.Compare(taskKey(a), taskKey(b))
	}) {
		st := s.tasks[t]
		if v, holds := h.latest[t]; st.latest != nil && (!holds || v != verOf(st.latest)) {
			out = append(out, wholeRecord(st))
		}
		for _, v := range slices.SortedFunc(maps.Keys(st.rows), compareVer) {
			if !h.rows[rowsID{t, v}] {
				out = append(out, syncRecord{rows: true, v: v, flat: st.rows[v],
					head: &wire.RainstormCheckpoint{Task: t, Version: v.version, RowsOf: v.inc}})
			}
		}
	}
	return out
}

// wholeRecord is st's latest checkpoint to send whole (its history kept
// to cut a delta from). Under mu.
func wholeRecord(st *stored) syncRecord {
	head := *st.latest
	head.Groups = nil
	return syncRecord{head: &head, state: st.state, v: verOf(st.latest), hist: st.hist}
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
		recs := s.lacking(holdingOf(&pr.got))
		if len(recs) == 0 {
			stored[i] = true
			continue
		}
		for _, r := range recs {
			switch {
			case r.delta:
				reads.spreadDeltas++
			case !r.rows:
				reads.spreadWhole++
			}
		}
		wg.Go(func() {
			if err := s.fill(ctx, term, id, recs); err != nil {
				s.host.Logger().Debug("rainstorm: store what a peer lacks", "peer", id, "err", err)
				return
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

// fill sends peer id recs, what it lacks of this store (lacking), and the
// whole state of each task whose delta base it names missing: it does not
// hold the base its sync answer named (a delta it could not apply), so it
// gets what needs no base.
func (s *Store) fill(ctx context.Context, term uint64, id string, recs []syncRecord) error {
	missing, err := s.sendRecords(ctx, term, id, recs)
	if err != nil || len(missing) == 0 {
		return err
	}
	s.mu.Lock()
	var whole []syncRecord
	for _, t := range missing {
		if st := s.tasks[t]; st != nil && st.latest != nil {
			whole = append(whole, wholeRecord(st))
		}
	}
	s.mu.Unlock()
	_, err = s.sendRecords(ctx, term, id, whole)
	return err
}

// sendRecords sends recs to peer id in RainstormReplicate messages of
// about syncPage bytes, in order, each record cut into parts from its
// state's B-tree as a sync page is (nextPart), a delta record as a delta
// on its base. A message holds deltas or whole checkpoints, never both,
// since the peer joins each message's checkpoints before its deltas and
// a task's parts must reach it in order. It returns the tasks whose delta
// base the peer named missing.
func (s *Store) sendRecords(ctx context.Context, term uint64, id string, recs []syncRecord) ([]wire.RainstormTask, error) {
	var (
		missing []wire.RainstormTask
		msg     = &wire.RainstormReplicate{Term: term}
		size    int
	)
	flush := func() error {
		if len(msg.Checkpoints)+len(msg.Deltas) == 0 {
			return nil
		}
		resp, err := s.call(ctx, id, msg)
		if err != nil {
			return err
		}
		ack, ok := resp.(*wire.RainstormReplicateAck)
		if !ok {
			return fmt.Errorf("answered %T", resp)
		}
		missing = append(missing, ack.Missing...)
		msg, size = &wire.RainstormReplicate{Term: term}, 0
		return nil
	}
	for _, r := range recs {
		head := r.head
		if r.rows {
			h := *head
			h.Rows = r.flat.records()
			head = &h
		}
		for at := (partCut{}); ; {
			if other := len(msg.Deltas) > 0 && !r.delta || len(msg.Checkpoints) > 0 && r.delta; other || (size > 0 && syncPage-size < syncPage/8) {
				if err := flush(); err != nil {
					return nil, err
				}
			}
			p, next, more := nextPart(head, r.state, at, syncPage-size)
			size += ckpt.Size(p)
			if r.delta {
				msg.Deltas = append(msg.Deltas, wire.RainstormDelta{BaseVersion: r.base.version, BaseIncarnation: r.base.inc, Checkpoint: *p})
			} else {
				msg.Checkpoints = append(msg.Checkpoints, *p)
			}
			if !more {
				break
			}
			if err := flush(); err != nil { // the part filled the message
				return nil, err
			}
			at = next
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return missing, nil
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
