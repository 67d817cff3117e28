package manager

import (
	"bytes"
	"cmp"
	"container/heap"
	"iter"
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

// rsRun is an ascending run of rows: a cursor at its next row, the rows
// left in it and the row it is on.
type rsRun[C any] struct {
	cur  C
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
	compare := rsCompareRows(aggregate)
	return func(yield func(wire.RainstormRecord) bool) {
		var runs []rsRun[C]
		for _, c := range srcs {
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
					runs = append(runs, rsRun[C]{cur: start, left: n})
					start, n = before, 0
				}
				prevID, prevFirst = id, first
				n++
			}
			if n > 0 {
				runs = append(runs, rsRun[C]{cur: start, left: n})
			}
		}
		h := &rsRunHeap[C]{runs: runs, compare: compare}
		for i := range runs {
			r := &runs[i]
			r.rec, _ = P(&r.cur).Next()
			r.left--
			h.idx = append(h.idx, i)
		}
		heap.Init(h)
		for len(h.idx) > 0 {
			r := &runs[h.idx[0]]
			if !yield(r.rec) {
				return
			}
			if r.left == 0 {
				r.rec = wire.RainstormRecord{}
				heap.Pop(h)
				continue
			}
			r.rec, _ = P(&r.cur).Next()
			r.left--
			heap.Fix(h, 0)
		}
	}
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
