package rsstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

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
	changes := make([]change, 0, len(msg.Checkpoints)+len(msg.Deltas))
	cur := map[wire.RainstormTask]*wire.RainstormCheckpoint{}
	prevOf := func(t wire.RainstormTask) *wire.RainstormCheckpoint {
		if c, ok := cur[t]; ok {
			return c
		}
		return s.Latest(t)
	}
	for i := range msg.Checkpoints {
		c := &msg.Checkpoints[i]
		prev := prevOf(c.Task)
		changes = append(changes, change{prev: prev, next: c})
		if newer(prev, c) {
			cur[c.Task] = c
		}
	}
	for i := range msg.Deltas {
		d := &msg.Deltas[i]
		c := &d.Checkpoint
		prev := prevOf(c.Task)
		switch have := verOf(prev); {
		case have == verOf(c):
			stored++ // a repeat of what is stored
			continue
		case have != ver{d.BaseVersion, d.BaseIncarnation}:
			missing = append(missing, c.Task)
			continue
		}
		full := compose(prev, c)
		changes = append(changes, change{prev: prev, next: full})
		cur[c.Task] = full
	}
	if err := s.persist(changes, msg.Headers); err != nil {
		return 0, nil, err
	}
	s.apply(changes, msg.Headers)
	return stored + len(changes), missing, nil
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
	}
	return s.snapshot(jobs, after)
}

// syncPage is about how many bytes of records one sync page carries: the
// transport refuses a message over 10 MiB, and a store holds every
// pipeline's state and output.
const syncPage = 4 << 20

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
			es = append(es, entry{append(slices.Clone(k), 0), *st.latest})
		}
		for v, rows := range st.rows {
			ek := binary.BigEndian.AppendUint64(append(slices.Clone(k), 1), v)
			es = append(es, entry{ek, wire.RainstormCheckpoint{Task: t, Version: v, Rows: rows}})
		}
	}
	slices.SortFunc(es, func(a, b entry) int { return bytes.Compare(a.key, b.key) })
	size := 0
	for i, e := range es {
		if after != nil && bytes.Compare(e.key, after) <= 0 {
			continue
		}
		if size > 0 && size+sizeOf(&e.c) > syncPage {
			out.More, out.Next = true, es[i-1].key
			break
		}
		size += sizeOf(&e.c)
		out.Checkpoints = append(out.Checkpoints, e.c)
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

// sizeOf estimates the encoded size of c's records.
func sizeOf(c *wire.RainstormCheckpoint) int {
	n := 256 + 32*len(c.State)
	recs := func(rs []wire.RainstormRecord) {
		for _, r := range rs {
			n += 12 + len(r.Fields)
			for _, f := range r.Fields {
				n += len(f)
			}
		}
	}
	for i := range c.PendingBlobs {
		n += 32 + len(c.PendingBlobs[i].Batch)
	}
	recs(c.Rows)
	return n
}
