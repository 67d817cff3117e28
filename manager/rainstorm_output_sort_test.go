package manager

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"tempest/wire"
)

// sliceCursor is a task's rows as rsMergeRows reads them, from a slice.
type sliceCursor struct {
	rows []wire.RainstormRecord
	i    int
}

func (c *sliceCursor) Next() (wire.RainstormRecord, bool) {
	if c.i >= len(c.rows) {
		return wire.RainstormRecord{}, false
	}
	c.i++
	return c.rows[c.i-1], true
}

func (c *sliceCursor) Skip() (uint64, []byte, bool) {
	r, ok := c.Next()
	if !ok || len(r.Fields) == 0 {
		return r.ID, nil, ok
	}
	return r.ID, []byte(r.Fields[0]), true
}

// outputTasks is rows as a record output's tasks gather them: ids dealt
// round-robin over the tasks, each task's in id order unless interleave
// (a task fed by several senders) cuts them into runs of that many, and
// dup ids published twice (an at-least-once resend) with a second field
// telling the copies apart.
func outputTasks(n, tasks, dups, interleave int, r *rand.Rand) []sliceCursor {
	out := make([]sliceCursor, tasks)
	for id := range n {
		t := &out[id%tasks]
		t.rows = append(t.rows, wire.RainstormRecord{ID: uint64(id), Fields: []string{fmt.Sprint(id), "first"}})
	}
	for i := range out {
		if interleave > 0 {
			// Runs of interleave ids, dealt out of order.
			var runs [][]wire.RainstormRecord
			for rows := out[i].rows; len(rows) > 0; rows = rows[min(interleave, len(rows)):] {
				runs = append(runs, rows[:min(interleave, len(rows))])
			}
			r.Shuffle(len(runs), func(a, b int) { runs[a], runs[b] = runs[b], runs[a] })
			out[i].rows = slices.Concat(runs...)
		}
	}
	for range dups {
		id := r.IntN(max(n, 1))
		t := &out[r.IntN(tasks)]
		at := r.IntN(len(t.rows) + 1)
		t.rows = slices.Insert(t.rows, at, wire.RainstormRecord{ID: uint64(id), Fields: []string{fmt.Sprint(id), "again"}})
	}
	return out
}

// The merged output is what a stable sort of every task's rows, gathered
// task by task, gives: input order, the copies of one record in the order
// gathered; an aggregate's by key.
func TestMergedRowsAreAStableSort(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct{ n, tasks, dups, interleave int }{
		{0, 1, 0, 0}, {1, 1, 0, 0}, {100, 1, 0, 0}, {1000, 3, 50, 0}, {5000, 7, 2000, 0}, {5000, 3, 300, 17}, {2000, 2, 0, 1},
	} {
		tasks := outputTasks(c.n, c.tasks, c.dups, c.interleave, r)
		var want []wire.RainstormRecord
		for _, t := range tasks {
			want = append(want, t.rows...)
		}
		slices.SortStableFunc(want, func(a, b wire.RainstormRecord) int { return cmp.Compare(a.ID, b.ID) })
		got := slices.Collect(rsMergeRows(tasks, false))
		if len(got) != len(want) {
			t.Fatalf("%+v: %d rows merged, want %d", c, len(got), len(want))
		}
		for i := range want {
			if got[i].ID != want[i].ID || got[i].Fields[1] != want[i].Fields[1] {
				t.Fatalf("%+v: row %d is %+v, want %+v", c, i, got[i], want[i])
			}
		}
	}
	// An aggregate: keys in key group order per task, not sorted.
	tasks := make([]sliceCursor, 3)
	var want []string
	for i := range 3000 {
		k := fmt.Sprintf("key-%x", uint32(i)*2654435761)
		want = append(want, k)
		tasks[i%3].rows = append(tasks[i%3].rows, wire.RainstormRecord{Fields: []string{k, fmt.Sprint(i)}})
	}
	slices.Sort(want)
	var got []string
	for rec := range rsMergeRows(tasks, true) {
		got = append(got, rec.Fields[0])
	}
	if !slices.Equal(got, want) {
		t.Fatal("an aggregate's rows are not in key order")
	}
	// A range stopped early stops reading.
	n := 0
	for range rsMergeRows(tasks, true) {
		if n++; n == 10 {
			break
		}
	}
	if n != 10 {
		t.Fatalf("a range stopped after 10 rows saw %d", n)
	}
}

// BenchmarkMergeRows: a filter → project output of 524k rows from three
// tasks, as the results read merges it.
func BenchmarkMergeRows(b *testing.B) {
	tasks := outputTasks(524_214, 3, 0, 0, rand.New(rand.NewPCG(1, 2)))
	b.ReportAllocs()
	for b.Loop() {
		for range rsMergeRows(tasks, false) {
		}
	}
}
