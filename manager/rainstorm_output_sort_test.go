package manager

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"tempest/wire"
)

// outputRows is rows as a record output gathers them: tasks' runs, each
// in id order, ids dealt round-robin over the tasks, dup ids published
// twice (an at-least-once resend) with a second field telling the copies
// apart.
func outputRows(n, tasks, dups int, r *rand.Rand) []wire.RainstormRecord {
	runs := make([][]wire.RainstormRecord, tasks)
	for id := range n {
		t := id % tasks
		runs[t] = append(runs[t], wire.RainstormRecord{ID: uint64(id), Fields: []string{fmt.Sprint(id), "first"}})
	}
	var rows []wire.RainstormRecord
	for _, run := range runs {
		rows = append(rows, run...)
	}
	for range dups {
		id := r.IntN(n)
		rows = append(rows, wire.RainstormRecord{ID: uint64(id), Fields: []string{fmt.Sprint(id), "again"}})
	}
	return rows
}

// sortByInput orders a record output as a stable sort by id does:
// input order, the copies of one record in the order gathered.
func TestSortByInputIsStableByID(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct{ n, tasks, dups int }{{0, 1, 0}, {1, 1, 0}, {100, 1, 0}, {1000, 3, 50}, {5000, 7, 2000}} {
		rows := outputRows(c.n, c.tasks, c.dups, r)
		r.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
		want := slices.Clone(rows)
		slices.SortStableFunc(want, func(a, b wire.RainstormRecord) int { return cmp.Compare(a.ID, b.ID) })
		sortByInput(rows)
		for i := range want {
			if rows[i].ID != want[i].ID || rows[i].Fields[1] != want[i].Fields[1] {
				t.Fatalf("%+v: row %d is %+v, want %+v", c, i, rows[i], want[i])
			}
		}
	}
}

// BenchmarkSortByInput: a filter → project output of 524k rows from three
// tasks, as the results read sorts it.
func BenchmarkSortByInput(b *testing.B) {
	rows := outputRows(524_214, 3, 0, rand.New(rand.NewPCG(1, 2)))
	work := make([]wire.RainstormRecord, len(rows))
	b.ReportAllocs()
	for b.Loop() {
		copy(work, rows)
		sortByInput(work)
	}
}
