// Package ckpt is the layout of a RainStorm checkpoint as tasks, managers
// and workers exchange it: an aggregate's state per key group, composed
// from deltas, and a checkpoint too large for one
// message split into parts and joined again. It depends on wire alone, so
// the store (rsstore) uses it without the engine (rainstorm).
package ckpt

import (
	"fmt"
	"slices"
	"strings"

	"tempest/wire"
)

// KeyGroups is how many key groups an aggregate's state is kept in (the
// engine partitions tuples over the same groups).
const KeyGroups = 128

// PageBytes is about how many bytes of state, batches and rows one part
// of a split checkpoint carries: under half the transport's message cap,
// so that the estimate's error and a message's other contents still fit.
const PageBytes = 4 << 20

// Size estimates the encoded size of c's state, batches and rows (its
// positions are small next to them).
func Size(c *wire.RainstormCheckpoint) int {
	n := 256 + 24*(len(c.Inputs)+len(c.Outputs))
	for i := range c.Groups {
		n += 8 + entriesSize(c.Groups[i].Entries)
	}
	n += entriesSize(c.State)
	for i := range c.PendingBlobs {
		n += BlobSize(&c.PendingBlobs[i])
	}
	for i := range c.Pending {
		n += BatchSize(&c.Pending[i])
	}
	return n + recordsSize(c.Rows)
}

// EntrySize estimates the encoded size of one aggregate entry.
func EntrySize(e *wire.RainstormAggregate) int { return 16 + len(e.Key) + len(e.Sum) }

func entriesSize(es []wire.RainstormAggregate) int {
	n := 0
	for i := range es {
		n += EntrySize(&es[i])
	}
	return n
}

// BlobSize estimates the encoded size of one encoded batch.
func BlobSize(b *wire.RainstormBatchBlob) int { return 48 + len(b.Batch) }

// BatchSize estimates the encoded size of one batch.
func BatchSize(b *wire.RainstormBatch) int { return 64 + recordsSize(b.Records) }

// RecordSize estimates the encoded size of one record.
func RecordSize(r *wire.RainstormRecord) int {
	n := 12
	for _, f := range r.Fields {
		n += 3 + len(f)
	}
	return n
}

func recordsSize(rs []wire.RainstormRecord) int {
	n := 0
	for i := range rs {
		n += RecordSize(&rs[i])
	}
	return n
}

// Split cuts c into parts of about budget bytes each (Part 0, 1, …; More
// on all but the last), in the order a Joiner expects: part 0 holds c's
// positions, counters and lineage and the first of its groups, batches
// and rows; each later part names the checkpoint (task, incarnation,
// version, and RowsOf for a rows-only record) and holds more of them. A
// group larger than budget continues, under its number, in the next part.
// A checkpoint that fits is returned alone, as it is. The parts share c's
// slices; c is not changed.
func Split(c *wire.RainstormCheckpoint, budget int) []*wire.RainstormCheckpoint {
	if Size(c) <= budget {
		return []*wire.RainstormCheckpoint{c}
	}
	head := *c
	head.Groups, head.State, head.PendingBlobs, head.Pending, head.Rows = nil, nil, nil, nil, nil
	head.Part, head.More = 0, false
	parts := []*wire.RainstormCheckpoint{&head}
	cur, used := &head, 256
	next := func(need int) {
		if used > 256 && used+need > budget {
			cur.More = true
			cur = &wire.RainstormCheckpoint{Task: c.Task, Incarnation: c.Incarnation, Version: c.Version, RowsOf: c.RowsOf, Part: len(parts)}
			parts = append(parts, cur)
			used = 256
		}
		used += need
	}
	for _, g := range c.Groups {
		if len(g.Entries) == 0 {
			next(8)
			cur.Groups = append(cur.Groups, g)
			continue
		}
		for es := g.Entries; len(es) > 0; {
			next(8 + EntrySize(&es[0]))
			k := 1 // and as many more as fit the rest of this part
			for k < len(es) && used+EntrySize(&es[k]) <= budget {
				used += EntrySize(&es[k])
				k++
			}
			cur.Groups = append(cur.Groups, wire.RainstormGroupState{Group: g.Group, Entries: es[:k:k]})
			es = es[k:]
		}
	}
	for i := range c.State {
		next(EntrySize(&c.State[i]))
		cur.State = append(cur.State, c.State[i])
	}
	for i := range c.PendingBlobs {
		next(BlobSize(&c.PendingBlobs[i]))
		cur.PendingBlobs = append(cur.PendingBlobs, c.PendingBlobs[i])
	}
	for i := range c.Pending {
		next(BatchSize(&c.Pending[i]))
		cur.Pending = append(cur.Pending, c.Pending[i])
	}
	for i := range c.Rows {
		next(RecordSize(&c.Rows[i]))
		cur.Rows = append(cur.Rows, c.Rows[i])
	}
	return parts
}

// Joiner puts a checkpoint split by Split back together, part by part.
// The zero value is ready; after a whole checkpoint it starts afresh.
type Joiner struct {
	c *wire.RainstormCheckpoint
}

// Add takes the next part. It returns the whole checkpoint once p is the
// last part (p alone when it was never split), else nil. A part that does
// not follow the ones before (another checkpoint, a part out of order)
// is an error; a part 0 always starts afresh, so a reader that lost its
// place asks for part 0 again.
func (j *Joiner) Add(p *wire.RainstormCheckpoint) (*wire.RainstormCheckpoint, error) {
	if p.Part == 0 {
		head := *p
		head.Groups = append([]wire.RainstormGroupState(nil), p.Groups...)
		j.c = &head
	} else {
		c := j.c
		switch {
		case c == nil:
			return nil, fmt.Errorf("checkpoint part %d without part 0", p.Part)
		case p.Task != c.Task || p.Incarnation != c.Incarnation || p.Version != c.Version || p.RowsOf != c.RowsOf:
			j.c = nil
			return nil, fmt.Errorf("checkpoint part %d is of %d.%d incarnation %d version %d, not of the checkpoint being joined (%d.%d incarnation %d version %d)",
				p.Part, p.Task.Stage, p.Task.Index, p.Incarnation, p.Version, c.Task.Stage, c.Task.Index, c.Incarnation, c.Version)
		case p.Part != c.Part+1:
			j.c = nil
			return nil, fmt.Errorf("checkpoint part %d after part %d", p.Part, c.Part)
		}
		for _, g := range p.Groups {
			if n := len(c.Groups); n > 0 && c.Groups[n-1].Group == g.Group {
				last := &c.Groups[n-1]
				last.Entries = append(last.Entries[:len(last.Entries):len(last.Entries)], g.Entries...)
				continue
			}
			c.Groups = append(c.Groups, g)
		}
		c.State = append(c.State, p.State...)
		c.PendingBlobs = append(c.PendingBlobs, p.PendingBlobs...)
		c.Pending = append(c.Pending, p.Pending...)
		c.Rows = append(c.Rows, p.Rows...)
		c.Part, c.More = p.Part, p.More
	}
	if j.c.More {
		return nil, nil
	}
	c := j.c
	j.c = nil
	c.Part = 0
	for i := 1; i < len(c.Groups); i++ {
		if c.Groups[i].Group <= c.Groups[i-1].Group {
			return nil, fmt.Errorf("checkpoint of %d.%d: key group %d after %d", c.Task.Stage, c.Task.Index, c.Groups[i].Group, c.Groups[i-1].Group)
		}
	}
	for _, g := range c.Groups {
		if g.Group < 0 || g.Group >= KeyGroups {
			return nil, fmt.Errorf("checkpoint of %d.%d: key group %d of %d", c.Task.Stage, c.Task.Index, g.Group, KeyGroups)
		}
	}
	return c, nil
}

// Paged packs checkpoints into pages of about budget bytes each, in
// order: a checkpoint that fits shares a page with its neighbours, one
// that does not is split (Split) and its parts fill pages of their own in
// sequence. A receiver that handles the pages in order joins the parts.
func Paged(cs []*wire.RainstormCheckpoint, budget int) [][]*wire.RainstormCheckpoint {
	var pages [][]*wire.RainstormCheckpoint
	var cur []*wire.RainstormCheckpoint
	used := 0
	flush := func() {
		if len(cur) > 0 {
			pages = append(pages, cur)
			cur, used = nil, 0
		}
	}
	for _, c := range cs {
		for _, p := range Split(c, budget) {
			n := Size(p)
			if used > 0 && used+n > budget {
				flush()
			}
			cur = append(cur, p)
			used += n
		}
	}
	flush()
	return pages
}

// ComposeGroups folds delta (changed entries per group) into state (every
// entry per group), both in group order with entries sorted by key, and
// returns the result. Neither input is changed; groups delta does not
// touch are shared with state, so a store keeps one copy of them.
func ComposeGroups(state, delta []wire.RainstormGroupState) []wire.RainstormGroupState {
	if len(delta) == 0 {
		return state
	}
	out := make([]wire.RainstormGroupState, 0, max(len(state), len(delta)))
	i, j := 0, 0
	for i < len(state) || j < len(delta) {
		switch {
		case j == len(delta) || (i < len(state) && state[i].Group < delta[j].Group):
			out = append(out, state[i])
			i++
		case i == len(state) || delta[j].Group < state[i].Group:
			out = append(out, wire.RainstormGroupState{Group: delta[j].Group, Entries: slices.Clone(delta[j].Entries)})
			j++
		default:
			out = append(out, wire.RainstormGroupState{Group: state[i].Group, Entries: mergeEntries(state[i].Entries, delta[j].Entries)})
			i++
			j++
		}
	}
	return out
}

// mergeEntries merges sorted lists; on a key in both, b's entry wins.
func mergeEntries(a, b []wire.RainstormAggregate) []wire.RainstormAggregate {
	out := make([]wire.RainstormAggregate, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b):
			out = append(out, a[i:]...)
			i = len(a)
		case i == len(a):
			out = append(out, b[j:]...)
			j = len(b)
		default:
			switch c := strings.Compare(a[i].Key, b[j].Key); {
			case c < 0:
				out = append(out, a[i])
				i++
			case c > 0:
				out = append(out, b[j])
				j++
			default:
				out = append(out, b[j])
				i++
				j++
			}
		}
	}
	return out
}

// Unacked is what a composed checkpoint keeps of its channels' batches:
// prev's batches that the new checkpoint's outputs have not acknowledged,
// followed by the new checkpoint's own (next). The runtime's store keeps
// them encoded, the in-memory one decoded, hence pos, which reads a
// batch's channel and sequence number.
func Unacked[B any](prev, next []B, outputs []wire.RainstormOutput, pos func(*B) (to int, seq uint64)) []B {
	acked := make(map[int]uint64, len(outputs))
	for _, o := range outputs {
		acked[o.To] = o.Acked
	}
	out := make([]B, 0, len(prev)+len(next))
	for i := range prev {
		if to, seq := pos(&prev[i]); seq > acked[to] {
			out = append(out, prev[i])
		}
	}
	return append(out, next...)
}
