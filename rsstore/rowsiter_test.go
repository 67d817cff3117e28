package rsstore

import (
	"slices"
	"testing"

	"tempest/wire"
)

// cursorRows reads c to its end.
func cursorRows(c RowsCursor) []wire.RainstormRecord {
	var out []wire.RainstormRecord
	for rec, ok := c.Next(); ok; rec, ok = c.Next() {
		out = append(out, rec)
	}
	return out
}

func sameRows(a, b []wire.RainstormRecord) bool {
	return slices.EqualFunc(a, b, func(x, y wire.RainstormRecord) bool { return x.ID == y.ID && slices.Equal(x.Fields, y.Fields) })
}

// A cursor reads the rows Rows returns, page after page, and a copy of it
// reads on from where it was taken; checkpoints stored after the cursor
// was taken are not in it.
func TestRowsCursorReadsWhatRowsReturns(t *testing.T) {
	s, err := Open(t.TempDir(), soloHost{}, Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	task := wire.RainstormTask{Job: "j", Workflow: "p", Stage: 2}
	for v := range 5 {
		storeRowsCheckpoint(t, s, task, v, 100)
	}
	c := s.RowsCursor(task)
	storeRowsCheckpoint(t, s, task, 5, 100) // after the cursor
	want := s.Rows(task)
	if len(want) != 600 {
		t.Fatalf("the store holds %d rows, want 600", len(want))
	}
	for range 150 {
		c.Next()
	}
	fork := c
	if got := cursorRows(c); !sameRows(got, want[150:500]) {
		t.Fatalf("the cursor read %d rows after 150, want the 350 of the five versions it was taken with", len(got))
	}
	if got := cursorRows(fork); !sameRows(got, want[150:500]) {
		t.Fatalf("a copy of the cursor read %d rows, want 350", len(got))
	}
	if got := cursorRows(s.RowsCursor(task)); !sameRows(got, want) {
		t.Fatalf("a new cursor read %d rows, want the 600 Rows returns", len(got))
	}
	// Skip steps over the same rows, with their ids and first fields.
	skip := s.RowsCursor(task)
	for i := range want {
		id, first, ok := skip.Skip()
		if !ok || id != want[i].ID || string(first) != want[i].Fields[0] {
			t.Fatalf("skip %d: %d %q %v, want %+v", i, id, first, ok, want[i])
		}
	}
	if _, _, ok := skip.Skip(); ok {
		t.Fatal("skipped past the last row")
	}
	if got := cursorRows(s.RowsCursor(wire.RainstormTask{Job: "none"})); got != nil {
		t.Fatalf("a task the store lacks has rows %v", got)
	}
}
