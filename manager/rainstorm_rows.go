package manager

import (
	"bytes"
	"cmp"
	"container/heap"
	"iter"
	"slices"
	"strings"

	"tempest/wire"
)

// A pipeline's output rows, read in output order from the store's pages as
// they are written out (docs/rainstorm.md, "Reading the output"). The order
// is the one a sort of the whole output gave — by key for an aggregate
// last stage, by input id for a record output, rows of one id in the order
// gathered — without the whole output in memory: the rows come task by
// task, each task's as a few ascending runs (one for a task fed by a
// single source; one per batch of another sender where its inputs
// interleave), and a k-way merge of the runs needs only each run's
// current row. One pass over the rows finds where the runs start, stepping
// over each without making it (only its id or first field is looked at, in
// the store's page), a second merges them: what the read holds is a cursor
// and a row per run, not a row per row.

// rsRowsCursor is a cursor over one task's rows that copies as a value:
// rsstore.RowsCursor, or a test's. Skip steps over a row as Next reads it,
// giving only what orders it (its id and first field), without making it:
// the pass that finds the runs makes no row.
type rsRowsCursor[C any] interface {
	*C
	Next() (wire.RainstormRecord, bool)
	Skip() (id uint64, first []byte, ok bool)
}

// rsRun is an ascending run of rows of one task (its index among the
// merged ones): a cursor at its next row, the rows left in it after the
// row it is on, that row, and the cursor where that row was read (what a
// paged read's resume position names).
type rsRun[C any] struct {
	task int
	cur  C
	at   C
	left int
	rec  wire.RainstormRecord
}

// rsCompareRows is the output order of a pipeline's rows: by key (the
// first field) for an aggregate, else by input id.
func rsCompareRows(aggregate bool) func(a, b *wire.RainstormRecord) int {
	if aggregate {
		return func(a, b *wire.RainstormRecord) int { return strings.Compare(rsFirst(a), rsFirst(b)) }
	}
	return func(a, b *wire.RainstormRecord) int { return cmp.Compare(a.ID, b.ID) }
}

// rsFirst is r's first field, "" when it has none.
func rsFirst(r *wire.RainstormRecord) string {
	if len(r.Fields) == 0 {
		return ""
	}
	return r.Fields[0]
}

// rsMergeRows returns the rows of srcs (each a task's, in the order
// gathered) in output order (rsCompareRows), rows equal in it in the order
// gathered: what a stable sort of all of them, concatenated, gives. The
// cursors are read from where they stand when the sequence is ranged
// over; each range reads them afresh.
func rsMergeRows[C any, P rsRowsCursor[C]](srcs []C, aggregate bool) iter.Seq[wire.RainstormRecord] {
	return func(yield func(wire.RainstormRecord) bool) {
		m := rsNewMerge[C, P](rsFindRuns[C, P](srcs, aggregate), aggregate)
		for {
			rec, ok := m.next()
			if !ok || !yield(rec) {
				return
			}
		}
	}
}

// rsFindRuns steps over the rows of srcs, making none, and returns their
// ascending runs in the order gathered (task by task), each at its first
// row.
func rsFindRuns[C any, P rsRowsCursor[C]](srcs []C, aggregate bool) []rsRun[C] {
	var runs []rsRun[C]
	for t, c := range srcs {
		start, n := c, 0
		var prevID uint64
		var prevFirst []byte
		for {
			before := c
			id, first, ok := P(&c).Skip()
			if !ok {
				break
			}
			if n > 0 && (aggregate && bytes.Compare(first, prevFirst) < 0 || !aggregate && id < prevID) {
				runs = append(runs, rsRun[C]{task: t, cur: start, left: n})
				start, n = before, 0
			}
			prevID, prevFirst = id, first
			n++
		}
		if n > 0 {
			runs = append(runs, rsRun[C]{task: t, cur: start, left: n})
		}
	}
	return runs
}

// rsMerge is a k-way merge of runs (each at its first row still to give,
// left counting that row): next gives their rows in output order, equal
// rows in the order of the runs; pending says where the runs not yet
// given through stand.
type rsMerge[C any, P rsRowsCursor[C]] struct {
	h *rsRunHeap[C]
}

func rsNewMerge[C any, P rsRowsCursor[C]](runs []rsRun[C], aggregate bool) *rsMerge[C, P] {
	h := &rsRunHeap[C]{runs: runs, compare: rsCompareRows(aggregate)}
	for i := range runs {
		r := &runs[i]
		if r.left <= 0 {
			continue
		}
		if !rsRead[C, P](r) {
			continue // fewer rows than counted: the run ends there
		}
		h.idx = append(h.idx, i)
	}
	heap.Init(h)
	return &rsMerge[C, P]{h: h}
}

// peek is the row next gives, without giving it.
func (m *rsMerge[C, P]) peek() (wire.RainstormRecord, bool) {
	if len(m.h.idx) == 0 {
		return wire.RainstormRecord{}, false
	}
	return m.h.runs[m.h.idx[0]].rec, true
}

// next is the next row in output order, false after the last.
func (m *rsMerge[C, P]) next() (wire.RainstormRecord, bool) {
	h := m.h
	if len(h.idx) == 0 {
		return wire.RainstormRecord{}, false
	}
	r := &h.runs[h.idx[0]]
	rec := r.rec
	if r.left == 0 || !rsRead[C, P](r) {
		r.rec = wire.RainstormRecord{}
		heap.Pop(h)
	} else {
		heap.Fix(h, 0)
	}
	return rec, true
}

// rsRead moves r to its next row; false when its cursor has none.
func rsRead[C any, P rsRowsCursor[C]](r *rsRun[C]) bool {
	r.at = r.cur
	rec, ok := P(&r.cur).Next()
	if !ok {
		return false
	}
	r.rec = rec
	r.left--
	return true
}

// pending is the runs with rows not yet given, in the order of the runs,
// each at the row it is on (at) with left counting that row.
func (m *rsMerge[C, P]) pending() []rsRun[C] {
	idx := slices.Sorted(slices.Values(m.h.idx))
	out := make([]rsRun[C], 0, len(idx))
	for _, i := range idx {
		r := m.h.runs[i]
		out = append(out, rsRun[C]{task: r.task, cur: r.at, left: r.left + 1})
	}
	return out
}

// rsRunHeap orders runs by their current rows, then by where they start in
// the rows gathered, which keeps equal rows in that order.
type rsRunHeap[C any] struct {
	runs    []rsRun[C]
	idx     []int
	compare func(a, b *wire.RainstormRecord) int
}

func (h *rsRunHeap[C]) Len() int { return len(h.idx) }
func (h *rsRunHeap[C]) Less(i, j int) bool {
	a, b := h.idx[i], h.idx[j]
	if c := h.compare(&h.runs[a].rec, &h.runs[b].rec); c != 0 {
		return c < 0
	}
	return a < b
}
func (h *rsRunHeap[C]) Swap(i, j int) { h.idx[i], h.idx[j] = h.idx[j], h.idx[i] }
func (h *rsRunHeap[C]) Push(x any)    { h.idx = append(h.idx, x.(int)) }
func (h *rsRunHeap[C]) Pop() any {
	n := len(h.idx) - 1
	x := h.idx[n]
	h.idx = h.idx[:n]
	return x
}
