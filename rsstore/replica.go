package rsstore

import (
	"bytes"
	"fmt"
	"slices"
	"sync"

	"tempest/rainstorm/ckpt"
	"tempest/wire"
)

// HandleReplicate stores a leader's group on a peer: whole states as they
// are, deltas composed with the state they follow. A delta whose base is
// not the stored state (this peer missed a group) is not stored; its task
// is named missing, and the leader sends the whole state. The sender must
// be a manager of the group (the caller checks); a group of a term older
// than a sync this store answered, or one Host.StaleReason refuses, is
// refused with a stale fence.
func (s *Store) HandleReplicate(from string, msg *wire.RainstormReplicate) (*wire.RainstormReplicateAck, error) {
	stored, missing, err := s.storeReplicated(msg, func() string { return s.host.StaleReason(from, msg.Term) })
	if err != nil {
		return nil, fmt.Errorf("store replicated checkpoints: %w", err)
	}
	return &wire.RainstormReplicateAck{Stored: stored, Missing: missing}, nil
}

func (s *Store) storeReplicated(msg *wire.RainstormReplicate, stale func() string) (stored int, missing []wire.RainstormTask, err error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if msg.Term < s.promised {
		return 0, nil, &wire.Error{Code: wire.CodeStaleFence, Message: fmt.Sprintf("stale term %d: a leader of term %d read this store", msg.Term, s.promised)}
	}
	if reason := stale(); reason != "" {
		return 0, nil, &wire.Error{Code: wire.CodeStaleFence, Message: reason}
	}
	s.deposed(msg.Term)
	changes := make([]change, 0, len(msg.Checkpoints)+len(msg.Deltas))
	cur := map[wire.RainstormTask]snap{}
	for i := range msg.Checkpoints {
		c, err := s.joinPart(&msg.Checkpoints[i])
		if err != nil {
			return 0, nil, err
		}
		if c == nil {
			continue // more parts follow
		}
		changes = append(changes, s.wholeChange(cur, c))
	}
	for i := range msg.Deltas {
		d := &msg.Deltas[i]
		c, err := s.joinPart(&d.Checkpoint)
		if err != nil {
			return 0, nil, err
		}
		if c == nil {
			continue // more parts follow
		}
		prev, ok := cur[c.Task]
		if !ok {
			prev.head, prev.state = s.head(c.Task)
		}
		switch have := verOf(prev.head); {
		case have == verOf(c):
			stored++ // a repeat of what is stored
			continue
		case have != ver{d.BaseVersion, d.BaseIncarnation}:
			missing = append(missing, c.Task)
			continue
		}
		ch := deltaChange(prev, c)
		changes = append(changes, ch)
		cur[c.Task] = snap{ch.next, ch.nextState}
	}
	hs := s.newest(msg.Headers)
	if err := s.persist(changes, hs); err != nil {
		return 0, nil, err
	}
	s.apply(changes, hs)
	return stored + len(changes), missing, nil
}

// deltaChange is the change that makes c, a delta on prev, its task's
// latest: c's batches composed with prev's, its keys put in prev's state.
func deltaChange(prev snap, c *wire.RainstormCheckpoint) change {
	return change{prev: prev.head, next: compose(prev.head, c), prevState: prev.state, nextState: prev.state.with(c.Groups),
		delta: c.Groups, replay: c}
}

// joinPart returns c when it is a whole checkpoint, else adds it to its
// task's parts and returns the whole checkpoint once c is its last part
// (nil before). A part that does not follow its task's parts so far
// refuses the message: the leader then counts this peer out of the round.
// Under wmu.
func (s *Store) joinPart(c *wire.RainstormCheckpoint) (*wire.RainstormCheckpoint, error) {
	if c.Part == 0 && !c.More {
		return c, nil
	}
	if s.parts == nil {
		s.parts = map[wire.RainstormTask]*ckpt.Joiner{}
	}
	j := s.parts[c.Task]
	if j == nil {
		j = &ckpt.Joiner{}
		s.parts[c.Task] = j
	}
	whole, err := j.Add(c)
	if err != nil || whole != nil {
		delete(s.parts, c.Task)
	}
	if err != nil {
		return nil, fmt.Errorf("task %d.%d: %w", c.Task.Stage, c.Task.Index, err)
	}
	return whole, nil
}

// HandleSync answers a new leader's sync (one page of it): from now on no
// group of an older term is stored here, and the page follows every group
// stored before. The sender must be a manager of the group (the caller
// checks).
func (s *Store) HandleSync(msg *wire.RainstormSyncRequest) *wire.RainstormSyncResponse {
	return s.promise(msg.Term, msg.Jobs, msg.After, syncAsk{have: msg.Have, deltas: msg.Deltas})
}

// syncAsk is what a sync page's reader holds and takes: the version of
// each task's latest checkpoint it holds, and whether it takes deltas.
type syncAsk struct {
	have   []wire.RainstormHave
	deltas bool
}

func (s *Store) promise(term uint64, jobs []string, after []byte, ask syncAsk) *wire.RainstormSyncResponse {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if term > s.promised {
		s.promised = term
		s.parts = nil // an older leader's unfinished checkpoints never finish
	}
	s.deposed(term)
	return s.snapshot(jobs, after, ask)
}

// deposed records that a leader of term wrote to or read this store: if
// this manager synced in an older term, it answers no task from now on,
// though its elector may not know yet that it no longer leads. What it
// holds now may come from the new leader's groups, which it cannot know
// reached a majority, so "already stored" would not mean durable. Under
// wmu.
func (s *Store) deposed(term uint64) {
	if synced := s.syncedTerm.Load(); synced != 0 && synced < term {
		s.syncedTerm.Store(0)
	}
}

// syncPage is about how many bytes of records one sync page carries (and
// a part of a checkpoint split for a sync). Each page must be read and
// answered within QuorumTimeout, and its cost is mostly encoding and
// decoding its entries: a 4 MiB page of a count's state (some 200k
// entries) outlasted the 2 s on a loaded host with the race detector, and
// since a breaker's one trial call was always such a page, the bulk
// breaker towards each peer stayed open and the new leader never synced.
// Small pages cost a few more round trips; a sync keeps each page it read.
const syncPage = 1 << 20

// snapshot is one page of everything stored for jobs (all when empty):
// each task's latest checkpoint and every version's rows, in key order
// from the cursor after (nil: the start; see syncCursor), up to about
// syncPage bytes, and the headers with the first page. A latest
// checkpoint of the version the reader holds (ask.have) is named in Same
// instead: a (version, incarnation) is one state wherever it is stored,
// as a replicated group's repeat takes it to be. A reader that takes
// deltas gets a latest checkpoint newer than its own as a delta on its
// own where this store's history reaches back to it (deltaFrom), and one
// older than its own named in Older (it holds the newer: the merge would
// drop this one). A record larger than what is left of the page goes in
// parts (nextPart), and the cursor can stop between them. Only the
// records' references are taken under mu: a state is an immutable
// snapshot, so the page is cut from it while the committer goes on, and a
// page costs its own entries, not the state.
func (s *Store) snapshot(jobs []string, after []byte, ask syncAsk) *wire.RainstormSyncResponse {
	out := &wire.RainstormSyncResponse{}
	held := make(map[wire.RainstormTask]ver, len(ask.have))
	for _, h := range ask.have {
		held[h.Task] = ver{h.Version, h.Incarnation}
	}
	var from *syncCursor
	if after != nil {
		c, err := decodeCursor(after)
		if err != nil {
			s.host.Logger().Warn("rainstorm: sync page asked from a cursor this store cannot read; answering from the start", "err", err)
		}
		from = c
	}
	var fromKey []byte
	if from != nil {
		fromKey = from.key()
	}
	recs := s.records(jobs, fromKey)
	size := 0
	for _, r := range recs {
		if from != nil && bytes.Compare(r.key, fromKey) < 0 {
			continue
		}
		v, holds := held[r.head.Task]
		if !r.rows && holds {
			switch {
			case v == r.v:
				out.Same = append(out.Same, wire.RainstormHave{Task: r.head.Task, Version: v.version, Incarnation: v.inc})
				size += 64
				continue
			case ask.deltas && newer(r.head, &wire.RainstormCheckpoint{Version: v.version, Incarnation: v.inc}):
				out.Older = append(out.Older, wire.RainstormHave{Task: r.head.Task, Version: r.v.version, Incarnation: r.v.inc})
				size += 64
				continue
			case ask.deltas:
				if head, state, ok := deltaFrom(r.head, r.state, r.hist, v); ok {
					r.head, r.state, r.delta, r.base = head, state, true, v
				}
			}
		}
		at := partCut{}
		if from != nil && bytes.Equal(r.key, fromKey) && r.v == (ver{from.Version, from.Inc}) && r.delta == from.Delta && r.base == from.Base {
			at = from.Cut
		} // else a newer latest than the one being cut, or one cut on another base: from part 0
		cursor := func(cut partCut) []byte {
			c := syncCursor{Task: r.head.Task, Rows: r.rows, Version: r.v.version, Inc: r.v.inc, Delta: r.delta, Base: r.base, Cut: cut}
			return c.encode()
		}
		if size > 0 && syncPage-size < syncPage/8 {
			out.More, out.Next = true, cursor(at)
			break
		}
		head := r.head
		id := rowsID{r.head.Task, r.v}
		if r.rows {
			h := *head
			h.Rows = s.cutRows.take(id, r.flat)
			head = &h
		}
		p, next, more := nextPart(head, r.state, at, syncPage-size)
		size += ckpt.Size(p)
		if r.rows && !more {
			s.cutRows.forget(id)
		}
		if r.delta {
			out.Deltas = append(out.Deltas, wire.RainstormDelta{BaseVersion: r.base.version, BaseIncarnation: r.base.inc, Checkpoint: *p})
		} else {
			out.Checkpoints = append(out.Checkpoints, *p)
		}
		if more { // the part filled the page
			out.More, out.Next = true, cursor(next)
			break
		}
	}
	if from == nil {
		s.mu.Lock()
		for k, h := range s.headers {
			if wantJob(jobs, k[0]) {
				out.Headers = append(out.Headers, h)
			}
		}
		s.mu.Unlock()
	}
	return out
}

func wantJob(jobs []string, job string) bool { return len(jobs) == 0 || slices.Contains(jobs, job) }

// syncRecord is one record a sync reads: a task's latest checkpoint (its
// head and state) or the rows of one of its versions (a rows-only head).
type syncRecord struct {
	key   []byte
	head  *wire.RainstormCheckpoint
	state *aggState
	rows  bool
	flat  flatRows // a rows record's rows, decoded only for the page that holds them
	v     ver
	hist  []histDelta // a latest checkpoint's history, to cut a delta from
	// delta: head and state are the latest checkpoint as a delta on base
	// (deltaFrom), sent as a RainstormDelta.
	delta bool
	base  ver
}

// records is every record of jobs' tasks from the task of fromKey on, in
// key order: references only (heads and states are immutable, a rows
// slice is never changed once stored), taken under mu.
func (s *Store) records(jobs []string, fromKey []byte) []syncRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	var recs []syncRecord
	for t, st := range s.tasks {
		if !wantJob(jobs, t.Job) {
			continue
		}
		k := taskKey(t)
		if fromKey != nil && bytes.Compare(k, fromKey[:min(len(k), len(fromKey))]) < 0 {
			continue
		}
		if st.latest != nil {
			c := *st.latest
			c.Groups = nil
			recs = append(recs, syncRecord{key: recordKey(t, false, ver{}), head: &c, state: st.state, v: verOf(st.latest), hist: st.hist})
		}
		for v, rows := range st.rows {
			recs = append(recs, syncRecord{key: recordKey(t, true, v), rows: true, v: v, flat: rows,
				head: &wire.RainstormCheckpoint{Task: t, Version: v.version, RowsOf: v.inc}})
		}
	}
	slices.SortFunc(recs, func(a, b syncRecord) int { return bytes.Compare(a.key, b.key) })
	return recs
}

// cutRows is the rows record a sync is cutting into parts, decoded: the
// pages after the first take it from here. Decoded for each page, a rows
// record of n pages cost n decodes of all of it. It is kept until its
// last part is cut, or another record's rows are cut (a reader that went
// away leaves one record's rows here until then).
type cutRows struct {
	mu   sync.Mutex
	id   rowsID
	rows wire.RainstormRows
}

// take returns flat, the rows of record id, decoded.
func (c *cutRows) take(id rowsID, flat flatRows) wire.RainstormRows {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rows == nil || c.id != id {
		c.id, c.rows = id, flat.records()
	}
	return c.rows
}

// forget drops record id's rows: its last part is cut.
func (c *cutRows) forget(id rowsID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.id == id {
		c.id, c.rows = rowsID{}, nil
	}
}
