package rsstore

import (
	"cmp"
	"encoding/binary"
	"errors"
	"math"

	"tempest/rainstorm/ckpt"
	"tempest/wire"
)

// partCut is how far a checkpoint's parts have got: the number of the
// next part, the last state entry sent, and how many
// of the head's lists were sent. It is all a reader needs to be handed
// the next part, so a part costs its own entries — a seek in the state's
// B-tree and a walk of one part's worth — however large the state is.
// Splitting the whole checkpoint (ckpt.Split) to find part n made every
// page of a million-key state cost the state, and a new leader's sync of
// it outlasted its per-page timeout page after page.
type partCut struct {
	Part  int
	Began bool // a state entry was sent: Group and Key name the last one
	Group int
	Key   string
	// Lists counts the entries sent of the head's State, PendingBlobs,
	// Pending and Rows, in that order (a part holds them after the state's
	// entries, as ckpt.Split orders them).
	Lists [4]int
}

// partHead is the bytes Size counts for a checkpoint's own fields, which
// part 0 carries and every part's names and framing approximate.
const partHead = 256

// nextPart is the part of checkpoint head (its Groups ignored) with
// aggregate state st that starts at at: part at.Part, holding the entries
// after at up to about budget bytes (at least one entry, so a reader
// always gets on), and where the next part starts. more is false on the
// last part. Parts are what ckpt.Split makes — part 0 the head's fields,
// each later part naming the checkpoint, a key group continued under its
// number — so a ckpt.Joiner joins them; only where they are cut differs.
// A checkpoint that fits budget from the start is one part, a copy of
// it. head and st are not changed.
func nextPart(head *wire.RainstormCheckpoint, st *aggState, at partCut, budget int) (p *wire.RainstormCheckpoint, next partCut, more bool) {
	if at.Part == 0 {
		c := *head
		c.Groups, c.State, c.PendingBlobs, c.Pending, c.Rows = nil, nil, nil, nil, nil
		p = &c
	} else {
		p = &wire.RainstormCheckpoint{Task: head.Task, Incarnation: head.Incarnation, Version: head.Version, RowsOf: head.RowsOf}
	}
	p.Part, p.More = at.Part, false
	used := partHead
	if at.Part == 0 {
		used += 24 * (len(head.Inputs) + len(head.Outputs))
	}
	empty := used
	fits := func(need int) bool { return used == empty || used+need <= budget }
	next = at
	full := false
	if st != nil && st.Len() > 0 {
		var n int
		used, n, full = st.entriesFrom(at, used, func(used, need int) bool { return used == empty || used+need <= budget }, nil)
		if n > 0 {
			// Counted first, then copied into one slice of the right
			// size: appended group by group, the slices' doubling made a
			// part's garbage grow with the size of the state's groups.
			flat := make([]wire.RainstormAggregate, 0, n)
			var starts []int
			st.entriesFrom(at, 0, func(int, int) bool { return len(flat) < n }, func(it item) {
				if k := len(p.Groups); k == 0 || p.Groups[k-1].Group != int(it.group) {
					p.Groups = append(p.Groups, wire.RainstormGroupState{Group: int(it.group)})
					starts = append(starts, len(flat))
				}
				flat = append(flat, it.e)
			})
			fillGroups(p.Groups, flat, starts)
			last := flat[len(flat)-1]
			next.Began, next.Group, next.Key = true, p.Groups[len(p.Groups)-1].Group, last.Key
		}
	}
	// The head's lists, after the state, each from where the last part
	// stopped: a part shares a run of each with head.
	sizes := [4]func(i int) int{
		func(i int) int { return ckpt.EntrySize(&head.State[i]) },
		func(i int) int { return ckpt.BlobSize(&head.PendingBlobs[i]) },
		func(i int) int { return ckpt.BatchSize(&head.Pending[i]) },
		func(i int) int { return ckpt.RecordSize(&head.Rows[i]) },
	}
	lens := [4]int{len(head.State), len(head.PendingBlobs), len(head.Pending), len(head.Rows)}
	for l := 0; l < len(sizes) && !full; l++ {
		from := next.Lists[l]
		for ; next.Lists[l] < lens[l]; next.Lists[l]++ {
			need := sizes[l](next.Lists[l])
			if !fits(need) {
				full = true
				break
			}
			used += need
		}
		if from, to := from, next.Lists[l]; to > from {
			switch l {
			case 0:
				p.State = head.State[from:to:to]
			case 1:
				p.PendingBlobs = head.PendingBlobs[from:to:to]
			case 2:
				p.Pending = head.Pending[from:to:to]
			case 3:
				p.Rows = head.Rows[from:to:to]
			}
		}
	}
	if !full {
		return p, partCut{}, false
	}
	p.More = true
	next.Part = at.Part + 1
	return p, next, true
}

// syncCursor is where a sync page stopped, handed to the reader as Next
// and back as the next request's After: the record it stopped in (a
// task's latest checkpoint, or the rows of one version) and how far that
// record's parts got. The record is named by its key, which a write never
// changes, so a cursor means the same whatever is stored between pages;
// a task's latest checkpoint replaced by a newer one between two of its
// parts is sent again from part 0, which restarts the reader's join, and
// so is one sent as a delta on another base than the one being cut (the
// reader's version changed between attempts), since its parts hold other
// keys.
type syncCursor struct {
	Task wire.RainstormTask
	Rows bool // a rows record: Version and Inc name it
	// Version and Inc name the record whose parts Cut counts (for a
	// latest checkpoint, the version being cut).
	Version, Inc uint64
	// Delta: the latest checkpoint is being cut as a delta on Base.
	Delta bool
	Base  ver
	Cut   partCut
}

// key is the cursor's record's place in the order pages follow.
func (c *syncCursor) key() []byte { return recordKey(c.Task, c.Rows, ver{c.Version, c.Inc}) }

// recordKey orders the records a sync reads: by task, a task's latest
// checkpoint before its rows, rows by (version, incarnation).
func recordKey(t wire.RainstormTask, rows bool, v ver) []byte {
	k := taskKey(t)
	if !rows {
		return append(k, 0)
	}
	k = binary.BigEndian.AppendUint64(append(k, 1), v.version)
	return binary.BigEndian.AppendUint64(k, v.inc)
}

// Cursor formats: 1 named no delta; 2 adds the base a delta is cut on.
// A store reads both, so a leader's cursor survives its peer's upgrade
// between two pages.
const (
	cursorFormat1 = 1
	cursorFormat  = 2
)

// Flag bits of an encoded cursor. Bit 1 was a flag that format 1 defined
// and no store ever set; it stays unused, so it never means something
// else to a reader of either format.
const (
	flagRows  = 1 << 0
	flagBegan = 1 << 2
	flagDelta = 1 << 3
)

func (c *syncCursor) encode() []byte {
	b := []byte{cursorFormat}
	str := func(s string) []byte { return append(binary.AppendUvarint(b, uint64(len(s))), s...) }
	b = str(c.Task.Job)
	b = str(c.Task.Workflow)
	var flags byte
	for _, f := range []struct {
		bit byte
		set bool
	}{{flagRows, c.Rows}, {flagBegan, c.Cut.Began}, {flagDelta, c.Delta}} {
		if f.set {
			flags |= f.bit
		}
	}
	b = append(b, flags)
	for _, n := range []uint64{uint64(c.Task.Stage), uint64(c.Task.Index), c.Version, c.Inc, uint64(c.Cut.Part), uint64(c.Cut.Group),
		uint64(c.Cut.Lists[0]), uint64(c.Cut.Lists[1]), uint64(c.Cut.Lists[2]), uint64(c.Cut.Lists[3]), c.Base.version, c.Base.inc} {
		b = binary.AppendUvarint(b, n)
	}
	return str(c.Cut.Key)
}

// decodeCursor reads a cursor encode made, or one of format 1. The bytes
// come from a peer (the leader that was handed them), so anything else is
// an error, never a panic; the page is then read from the start.
func decodeCursor(b []byte) (*syncCursor, error) {
	if len(b) == 0 || (b[0] != cursorFormat && b[0] != cursorFormat1) {
		return nil, errors.New("sync cursor: unknown format")
	}
	format := b[0]
	b = b[1:]
	var err error
	num := func(limit uint64) uint64 {
		n, k := binary.Uvarint(b)
		if err == nil && (k <= 0 || n > limit) {
			err = errors.New("sync cursor: bad number")
		}
		if err != nil {
			return 0
		}
		b = b[k:]
		return n
	}
	str := func() string {
		n := num(uint64(len(b)))
		if err != nil || n > uint64(len(b)) {
			err = cmp.Or(err, errors.New("sync cursor: short string"))
			return ""
		}
		s := string(b[:n])
		b = b[n:]
		return s
	}
	c := &syncCursor{}
	c.Task.Job, c.Task.Workflow = str(), str()
	if err == nil && len(b) == 0 {
		err = errors.New("sync cursor: short")
	}
	if err != nil {
		return nil, err
	}
	flags := b[0]
	b = b[1:]
	if format == cursorFormat1 {
		flags &^= flagDelta // not a flag of format 1
	}
	c.Rows, c.Cut.Began, c.Delta = flags&flagRows != 0, flags&flagBegan != 0, flags&flagDelta != 0
	c.Task.Stage, c.Task.Index = int(num(math.MaxUint32)), int(num(math.MaxUint32))
	c.Version, c.Inc = num(math.MaxUint64), num(math.MaxUint64)
	c.Cut.Part, c.Cut.Group = int(num(math.MaxInt32)), int(num(ckpt.KeyGroups-1))
	for i := range c.Cut.Lists {
		c.Cut.Lists[i] = int(num(math.MaxInt32))
	}
	if format == cursorFormat {
		c.Base.version, c.Base.inc = num(math.MaxUint64), num(math.MaxUint64)
	}
	c.Cut.Key = str()
	if err == nil && len(b) > 0 {
		err = errors.New("sync cursor: trailing bytes")
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// entriesFrom walks st's entries after at's last one, as many as fits
// lets in (given the bytes used so far and the entry's size, plus a
// group's framing where one starts), adding their sizes to used, and hands each to take (when not
// nil). It returns the new used, how many it took, and whether an entry
// was left that did not fit.
func (st *aggState) entriesFrom(at partCut, used int, fits func(used, need int) bool, take func(item)) (int, int, bool) {
	n, full := 0, false
	group := -1
	visit := func(it item) bool {
		if at.Began && it.group == uint8(at.Group) && it.e.Key == at.Key {
			return true // the last entry sent
		}
		need := ckpt.EntrySize(&it.e)
		if int(it.group) != group {
			need += 8
		}
		if !fits(used, need) {
			full = true
			return false
		}
		used += need
		group = int(it.group)
		n++
		if take != nil {
			take(it)
		}
		return true
	}
	if at.Began {
		st.t.AscendGreaterOrEqual(item{group: uint8(at.Group), e: wire.RainstormAggregate{Key: at.Key}}, visit)
	} else {
		st.t.Ascend(visit)
	}
	return used, n, full
}

// fillGroups hands each of groups its run of flat, the entries of all of
// them in order, group i's starting at starts[i]: one slice for a page's
// entries, capped per group so none appends into the next.
func fillGroups(groups []wire.RainstormGroupState, flat []wire.RainstormAggregate, starts []int) {
	for i := range groups {
		end := len(flat)
		if i+1 < len(starts) {
			end = starts[i+1]
		}
		groups[i].Entries = flat[starts[i]:end:end]
	}
}
