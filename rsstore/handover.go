package rsstore

import (
	"tempest/rainstorm/ckpt"
	"tempest/wire"
)

// StatePos is a position in a task's aggregate state as a resize's
// handover pages name it (wire.RainstormHandover's FromGroup and
// FromEntry): a key group, and how many of that group's entries, in key
// order, come before it.
type StatePos struct{ Group, Entry int }

// StatePage is one page of some of a task's key groups, cut by ReadState.
type StatePage struct {
	// Head is the task's latest checkpoint the page was cut from, without
	// its state (nil when the store holds none): its caller checks it is
	// one the groups may be read from (a closing checkpoint, or later).
	Head   *wire.RainstormCheckpoint
	Groups []wire.RainstormGroupState
	// More says entries are left; the next page starts at Next.
	More bool
	Next StatePos
	// Bytes is what the page's entries count against the budget.
	Bytes int
}

// ReadState cuts a page of task t's latest aggregate state: the entries
// of the groups take accepts, by group then key, from from on, as many as
// fit budget bytes (at least one, so an entry larger than the budget
// still moves). A handover reads the old owner's state in pages while the
// old owner goes on checkpointing; each page is a seek in the state's
// B-tree and a walk of the page's entries (plus, in the page's first
// group, of the entries before from, at most a group's worth), never a
// copy of the whole state: building every entry to serve one page made
// each page of a million-key handover cost the state.
//
// The position is the group's entry count, not a key, because that is
// what the wire carries; a group the old owner gave away does not change
// in its state again, so the count names the same key on every page.
func (s *Store) ReadState(t wire.RainstormTask, from StatePos, take func(group int) bool, budget int) StatePage {
	head, st := s.head(t)
	p := StatePage{Head: head}
	if head == nil || st.Len() == 0 {
		return p
	}
	var (
		flat   []wire.RainstormAggregate
		starts []int
	)
	for g := max(from.Group, 0); g < ckpt.KeyGroups && !p.More; g++ {
		if !take(g) {
			continue
		}
		skip, i := 0, 0
		if g == from.Group {
			skip = from.Entry
		}
		st.t.AscendRange(item{group: uint8(g)}, item{group: uint8(g + 1)}, func(it item) bool {
			if i < skip {
				i++
				return true
			}
			need := ckpt.EntrySize(&it.e)
			opens := len(p.Groups) == 0 || p.Groups[len(p.Groups)-1].Group != g
			if opens {
				need += groupFraming
			}
			if len(flat) > 0 && p.Bytes+need > budget {
				p.More, p.Next = true, StatePos{Group: g, Entry: i}
				return false
			}
			if opens {
				p.Groups = append(p.Groups, wire.RainstormGroupState{Group: g})
				starts = append(starts, len(flat))
			}
			p.Bytes += need
			flat = append(flat, it.e)
			i++
			return true
		})
	}
	fillGroups(p.Groups, flat, starts)
	return p
}

// groupFraming is what ReadState counts for a group's own fields in a
// page, as entriesFrom does for a checkpoint's parts.
const groupFraming = 8
