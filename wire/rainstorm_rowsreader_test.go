package wire

import (
	"slices"
	"testing"
)

// readAll reads data with a RowsReader to its end.
func readAll(data []byte) ([]RainstormRecord, error) {
	r, err := NewRowsReader(data)
	if err != nil {
		return nil, err
	}
	var out []RainstormRecord
	for rec, ok := r.Next(); ok; rec, ok = r.Next() {
		out = append(out, rec)
	}
	return out, r.Err()
}

func sameRecords(a, b []RainstormRecord) bool {
	return slices.EqualFunc(a, b, func(x, y RainstormRecord) bool { return x.ID == y.ID && slices.Equal(x.Fields, y.Fields) })
}

// The reader reads what UnmarshalCBOR decodes, one record at a time, and
// a copy of it reads on independently.
func TestRowsReaderReadsTheRows(t *testing.T) {
	rows := RainstormRows{{ID: 1, Fields: []string{"a", "bb"}}, {ID: 7}, {ID: 300, Fields: []string{"", "ü", "ccc"}}, {ID: 1 << 40, Fields: []string{"x"}}}
	data, err := rows.MarshalCBOR()
	if err != nil {
		t.Fatal(err)
	}
	got, err := readAll(data)
	if err != nil || !sameRecords(got, rows) {
		t.Fatalf("read %+v, %v; want %+v", got, err, rows)
	}
	r, err := NewRowsReader(data)
	if err != nil {
		t.Fatal(err)
	}
	r.Next()
	fork := r
	for range 3 {
		r.Next()
	}
	if rec, ok := fork.Next(); !ok || rec.ID != 7 || fork.Len() != 2 {
		t.Fatalf("a copy after the first record reads %+v, %v with %d left; want id 7 with 2 left", rec, ok, fork.Len())
	}
	if _, err := NewRowsReader([]byte{0x80}); err == nil { // an array: the old form
		t.Fatal("an array of records was read as flat rows")
	}
}

// FuzzRowsReader holds the reader to UnmarshalCBOR: the same records
// from what it decodes, an error from what it refuses.
func FuzzRowsReader(f *testing.F) {
	for _, rows := range []RainstormRows{nil, {{ID: 1, Fields: []string{"a"}}}, {{ID: 2}, {ID: 3, Fields: []string{"x", "y"}}}} {
		data, _ := rows.MarshalCBOR()
		f.Add(data[1:]) // the layout, without its byte string head
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		data := append(appendByteStringHead(nil, len(p)), p...)
		var want RainstormRows
		werr := want.UnmarshalCBOR(data)
		got, gerr := readAll(data)
		// Skip steps over the same records, with their ids and first fields.
		if r, err := NewRowsReader(data); err == nil {
			i := 0
			for id, first, ok := r.Skip(); ok; id, first, ok = r.Skip() {
				if i >= len(got) || id != got[i].ID || (len(got[i].Fields) > 0) != (first != nil) ||
					(first != nil && string(first) != got[i].Fields[0]) {
					t.Fatalf("skip %d: id %d, first %q; read %+v", i, id, first, got)
				}
				i++
			}
			if i != len(got) || (r.Err() == nil) != (gerr == nil) {
				t.Fatalf("skipped %d records (%v), read %d (%v)", i, r.Err(), len(got), gerr)
			}
		}
		switch {
		case werr != nil && gerr == nil:
			t.Fatalf("read %+v from what UnmarshalCBOR refuses (%v)", got, werr)
		case werr == nil && gerr != nil:
			t.Fatalf("refused (%v) what UnmarshalCBOR reads as %+v", gerr, want)
		case werr == nil && !sameRecords(got, want):
			t.Fatalf("read %+v, UnmarshalCBOR %+v", got, want)
		}
	})
}
