package rsstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

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
		full := snap{compose(prev.head, c), prev.state.with(c.Groups)}
		changes = append(changes, change{prev: prev.head, next: full.head, prevState: prev.state, nextState: full.state, delta: c.Groups})
		cur[c.Task] = full
	}
	hs := s.newest(msg.Headers)
	if err := s.persist(changes, hs); err != nil {
		return 0, nil, err
	}
	s.apply(changes, hs)
	return stored + len(changes), missing, nil
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
	return s.promise(msg.Term, msg.Jobs, msg.After)
}

func (s *Store) promise(term uint64, jobs []string, after []byte) *wire.RainstormSyncResponse {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if term > s.promised {
		s.promised = term
		s.parts = nil // an older leader's unfinished checkpoints never finish
	}
	s.deposed(term)
	return s.snapshot(jobs, after)
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
// from after (exclusive), up to about syncPage bytes, and the headers
// with the first page. The keys are stable, so a page's cursor means the
// same whatever is written between pages.
func (s *Store) snapshot(jobs []string, after []byte) *wire.RainstormSyncResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &wire.RainstormSyncResponse{}
	want := func(job string) bool { return len(jobs) == 0 || slices.Contains(jobs, job) }
	type entry struct {
		key []byte
		c   wire.RainstormCheckpoint
	}
	var es []entry
	for t, st := range s.tasks {
		if !want(t.Job) {
			continue
		}
		k := taskKey(t)
		if st.latest != nil {
			c := *st.latest
			c.Groups = st.state.whole() // once per version: each page asks again
			es = append(es, entry{append(slices.Clone(k), 0), c})
		}
		for v, rows := range st.rows {
			ek := binary.BigEndian.AppendUint64(append(slices.Clone(k), 1), v.version)
			ek = binary.BigEndian.AppendUint64(ek, v.inc)
			es = append(es, entry{ek, wire.RainstormCheckpoint{Task: t, Version: v.version, RowsOf: v.inc, Rows: rows}})
		}
	}
	slices.SortFunc(es, func(a, b entry) int { return bytes.Compare(a.key, b.key) })
	// A checkpoint larger than a page goes in parts (ckpt.Split),
	// each under its entry's key and its part number, so the cursor can
	// stop between parts.
	size := 0
	var last []byte
pages:
	for _, e := range es {
		if after != nil && bytes.Compare(e.key, after) < 0 && !bytes.HasPrefix(after, e.key) {
			continue
		}
		for n, p := range ckpt.Split(&e.c, syncPage) {
			pk := binary.BigEndian.AppendUint32(slices.Clip(e.key), uint32(n))
			if after != nil && bytes.Compare(pk, after) <= 0 {
				continue
			}
			sz := ckpt.Size(p)
			if size > 0 && size+sz > syncPage {
				out.More, out.Next = true, last
				break pages
			}
			size += sz
			out.Checkpoints = append(out.Checkpoints, *p)
			last = pk
		}
	}
	if after == nil {
		for k, h := range s.headers {
			if want(k[0]) {
				out.Headers = append(out.Headers, h)
			}
		}
	}
	return out
}
