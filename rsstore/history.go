package rsstore

import (
	"slices"

	"tempest/rainstorm/ckpt"
	"tempest/wire"
)

// A store keeps, per task, the deltas of its last few versions, so that a
// store one or a few checkpoints behind another is caught up by the keys
// changed since its version instead of the whole state: a new leader's
// sync of a peer ahead of it, and the spread to a peer behind it. A leader
// change while a count checkpoints every 100 ms nearly always leaves the
// stores a version or a few apart (the groups in flight), and read whole,
// a million-key count's 22 MB took 15–21 s to sync, during which no task
// could checkpoint.
//
// The bounds: 8 versions cover the checkpoints in flight at a leader
// change and a slow peer's lag of most of a second at the 100 ms cadence;
// a store further behind is caught up whole, which costs no more than a
// composed delta of the whole state would. 4 MB (the estimate of the
// entries kept) keeps a task's history a small part of a large state
// and within one part of a checkpoint, and bounds what the deltas of
// many small tasks cost a manager; past it a composed delta nears the
// size of the states where history matters less.
const (
	histDepth = 8
	histBytes = 4 << 20
)

// histDelta is one change of a task's latest checkpoint within one
// incarnation, from base to v, as the store applied it: the keys it put
// (its delta's entries, as the task or a peer sent them) and the batches
// it cut. A composed delta takes each key's value from the latest state,
// so the entries' own values are never read.
type histDelta struct {
	base, v ver
	groups  []wire.RainstormGroupState
	cut     []blobID
	size    int
}

// blobID names an unacknowledged batch by its channel and number.
type blobID struct {
	to  int
	seq uint64
}

// note records ch in st's history before ch.next becomes the task's
// latest: appended when ch is a delta (replay) on st's latest of the same
// incarnation, else the history starts over, since what a whole state
// changed (a diff, which may drop keys) or an open (another incarnation)
// cannot be replayed as puts. The slice is replaced, never changed where
// a reader holding an older one looks (records takes it under mu and
// reads it outside). Under mu.
func (st *stored) note(ch change) {
	if !newer(st.latest, ch.next) {
		return // rows alone, or an older state: the latest stays
	}
	if ch.replay == nil || st.latest == nil || verOf(st.latest) != verOf(ch.prev) || ch.prev.Incarnation != ch.next.Incarnation {
		st.hist, st.histSize = nil, 0
		return
	}
	d := histDelta{base: verOf(ch.prev), v: verOf(ch.next), groups: ch.replay.Groups}
	for i := range ch.replay.PendingBlobs {
		d.cut = append(d.cut, blobID{ch.replay.PendingBlobs[i].To, ch.replay.PendingBlobs[i].Seq})
	}
	for i := range d.groups {
		d.size += 8
		for j := range d.groups[i].Entries {
			d.size += ckpt.EntrySize(&d.groups[i].Entries[j])
		}
	}
	d.size += 16 * len(d.cut)
	// Appending writes past every older slice's length, so a reader of
	// one is not disturbed.
	st.hist = append(st.hist, d)
	st.histSize += d.size
	drop := 0
	for len(st.hist)-drop > histDepth || (st.histSize > histBytes && drop < len(st.hist)) {
		st.histSize -= st.hist[drop].size
		drop++
	}
	if drop > 0 {
		st.hist = slices.Clone(st.hist[drop:])
	}
}

// deltaFrom is latest (with its state) as a delta on x, an older version
// of the same incarnation that a reader holds: a head whose PendingBlobs
// are the batches cut since x, and a state of every key changed since x
// with its latest value, each key once however many versions changed it.
// Applied on x as a replicated delta is (compose, aggState.with), it makes
// latest. ok is false where hist does not reach back to x.
//
// hist's keys from any version at or before x cover the keys changed since
// x (an incarnation's versions are one line, and a delta never drops a
// key), so the entry whose base is x is not needed for the state; it is
// for the batches, since which batches x holds is known only by the
// version each was cut in. A latest with no batch pending needs none.
func deltaFrom(latest *wire.RainstormCheckpoint, state *aggState, hist []histDelta, x ver) (*wire.RainstormCheckpoint, *aggState, bool) {
	l := verOf(latest)
	if latest == nil || x.inc != l.inc || x.version >= l.version || len(hist) == 0 || hist[len(hist)-1].v != l ||
		len(latest.Pending) > 0 {
		return nil, nil, false
	}
	from := -1
	for i := len(hist) - 1; i >= 0; i-- {
		if hist[i].base.version <= x.version {
			from = i
			break
		}
	}
	if from < 0 || (hist[from].base != x && len(latest.PendingBlobs) > 0) {
		return nil, nil, false
	}
	cut := map[blobID]bool{}
	out := (*aggState)(nil).clone()
	for _, d := range hist[from:] {
		for _, id := range d.cut {
			cut[id] = true
		}
		for _, g := range d.groups {
			for i := range g.Entries {
				e, ok := state.get(g.Group, g.Entries[i].Key)
				if !ok {
					return nil, nil, false // a delta never drops a key: not this state's history
				}
				out.t.ReplaceOrInsert(item{group: uint8(g.Group), e: e})
			}
		}
	}
	head := *latest
	head.Groups, head.Rows, head.PendingBlobs = nil, nil, nil
	for _, b := range latest.PendingBlobs {
		if cut[blobID{b.To, b.Seq}] {
			head.PendingBlobs = append(head.PendingBlobs, b)
		}
	}
	if out.Len() == 0 {
		out = nil
	}
	return &head, out, true
}
