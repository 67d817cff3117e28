package wire

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

func flatTestBatch(records int) *RainstormBatch {
	b := &RainstormBatch{
		From: RainstormTask{Job: "job-7", Workflow: "pipé", Stage: 2, Index: 5}, To: 3,
		Incarnation: 1<<40 + 3, Seq: 300, EOS: true, Epoch: 2, Base: 290,
		Next: &RainstormEpoch{Epoch: 3, Segment: 1 << 20, Tasks: []int{3, 1, 4}},
	}
	for i := range records {
		b.Records = append(b.Records, RainstormRecord{ID: uint64(i) * 977, Fields: []string{fmt.Sprint(i), "", "a,\"b\"\nc", strings.Repeat("世", i%40)}})
	}
	return b
}

// A batch's flat layout carries every field it has, through a message of
// its own, nested in a checkpoint, frozen or not, and re-encodes to the
// same bytes.
func TestRainstormBatchFlatRoundTrip(t *testing.T) {
	orig := flatTestBatch(300)
	plain := mustMarshal(t, orig)
	if plain[0]>>5 != 2 {
		t.Fatalf("a batch encodes as CBOR major type %d, want a byte string", plain[0]>>5)
	}
	frozen := flatTestBatch(300)
	frozen.Freeze()
	if got := mustMarshal(t, frozen); !bytes.Equal(got, plain) {
		t.Fatal("a frozen batch encodes other bytes than the same batch unfrozen")
	}
	m, err := Decode(TypeRainstormBatch, plain)
	if err != nil {
		t.Fatal(err)
	}
	got := m.(*RainstormBatch)
	if !reflect.DeepEqual(got, orig) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, orig)
	}
	if again := mustMarshal(t, got); !bytes.Equal(again, plain) {
		t.Fatal("re-encoding a decoded batch gave other bytes")
	}
	// An operator that appends a field to one record must not write over
	// the next record's first field, which shares the decoded table.
	got.Records[0].Fields = append(got.Records[0].Fields, "added")
	if got.Records[1].Fields[0] != "1" {
		t.Fatalf("appending to record 0 changed record 1: %q", got.Records[1].Fields)
	}

	c := &RainstormCheckpoint{Task: orig.From, Version: 4, Pending: []RainstormBatch{*frozen, *flatTestBatch(0)}}
	var back RainstormCheckpoint
	if err := Unmarshal(mustMarshal(t, c), &back); err != nil {
		t.Fatal(err)
	}
	c.Pending[0].flat = nil // kept bytes do not travel
	if !reflect.DeepEqual(back.Pending, c.Pending) {
		t.Fatalf("checkpoint's pending batches:\n got %+v\nwant %+v", back.Pending, c.Pending)
	}
}

// The decoded strings are cut from one copy of the input: no field
// aliases the bytes the transport decoded from (it reuses them), and a
// batch costs a handful of allocations, not one per field.
func TestRainstormBatchFlatDecodeCopiesOnce(t *testing.T) {
	enc := mustMarshal(t, flatTestBatch(1000))
	var b RainstormBatch
	if err := Unmarshal(enc, &b); err != nil {
		t.Fatal(err)
	}
	lo, hi := uintptr(unsafe.Pointer(&enc[0])), uintptr(unsafe.Pointer(&enc[len(enc)-1]))
	for _, r := range b.Records {
		for _, f := range r.Fields {
			if p := uintptr(unsafe.Pointer(unsafe.StringData(f))); len(f) > 0 && p >= lo && p <= hi {
				t.Fatalf("field %q aliases the encoded input", f)
			}
		}
	}
	allocs := testing.AllocsPerRun(20, func() {
		var b RainstormBatch
		if err := Unmarshal(enc, &b); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 12 {
		t.Fatalf("decoding 1000 records took %.0f allocations, want a few per batch", allocs)
	}
}

// A node that predates the flat layout wrote a batch as the map of its
// struct tags (and stored it so in checkpoints): it still reads.
func TestRainstormBatchReadsTheMapOlderNodesWrote(t *testing.T) {
	orig := flatTestBatch(3)
	legacy := mustMarshal(t, (*rainstormBatchMap)(orig))
	if legacy[0]>>5 != 5 {
		t.Fatalf("the legacy form is major type %d, want a map", legacy[0]>>5)
	}
	m, err := Decode(TypeRainstormBatch, legacy)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, orig) {
		t.Fatalf("legacy map read as %+v, want %+v", m, orig)
	}
}

// The layout's shape is pinned: a field added to a batch (or to what it
// nests) must get a place in the flat layout, or it would silently not
// travel.
func TestRainstormBatchFlatCoversEveryField(t *testing.T) {
	for _, c := range []struct {
		v    any
		want int
	}{
		{RainstormBatch{}, 10}, {RainstormTask{}, 4}, {RainstormRecord{}, 2}, {RainstormEpoch{}, 3},
	} {
		if n := reflect.TypeOf(c.v).NumField(); n != c.want {
			t.Errorf("%T has %d fields, the flat layout knows %d: give the new one a place in rainstorm_flat.go (and a new layout version)", c.v, n, c.want)
		}
	}
	// Every field non-zero, negative ints included, survives.
	for seed := uint64(1); seed <= 16; seed++ {
		var b RainstormBatch
		newFiller(t, seed).fill(reflect.ValueOf(&b).Elem(), 0)
		checkNonZero(t, "RainstormBatch", reflect.ValueOf(b))
		var got RainstormBatch
		if err := got.decodeFlat(mustFlat(t, &b)); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if !reflect.DeepEqual(got, b) {
			t.Fatalf("seed %d:\n got %+v\nwant %+v", seed, got, b)
		}
	}
}

// mustFlat is b's flat layout without its CBOR head.
func mustFlat(tb testing.TB, b *RainstormBatch) []byte {
	tb.Helper()
	body, err := cborByteString(b.encode())
	if err != nil {
		tb.Fatal(err)
	}
	return body
}

func TestRainstormBatchFlatRefusesMalformed(t *testing.T) {
	good := mustFlat(t, flatTestBatch(2))
	// Every proper prefix is truncated somewhere.
	for n := range len(good) {
		var b RainstormBatch
		if err := b.decodeFlat(good[:n]); err == nil {
			t.Fatalf("the first %d of %d bytes decoded", n, len(good))
		}
	}
	small := mustFlat(t, &RainstormBatch{From: RainstormTask{Job: "j", Workflow: "w"}, Seq: 1,
		Records: []RainstormRecord{{ID: 1, Fields: []string{"ab"}}}})
	// 01 | 00 | 01 'j' | 01 'w' | 00 00 00 | 00 01 00 | 01 01 | 01 01 02 'a' 'b'
	if want := "0100016a017700000000010001010101026162"; fmt.Sprintf("%x", small) != want {
		t.Fatalf("layout %x, want %s", small, want)
	}
	edit := func(at int, with ...byte) []byte {
		out := append([]byte(nil), small[:at]...)
		return append(append(out, with...), small[at+1:]...)
	}
	for name, p := range map[string][]byte{
		"layout version 2":          edit(0, 2),
		"unknown flag":              edit(1, 4),
		"overlong varint":           edit(1, 0x80, 0x00),
		"varint past 64 bits":       edit(9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02),
		"more records than bytes":   edit(12, 0x7f),
		"more fields than bytes":    edit(13, 0x7f),
		"record with extra fields":  edit(15, 2),
		"fields short of the count": edit(13, 2),
		"string past the end":       edit(16, 9),
		"invalid UTF-8":             edit(18, 0xff),
		"trailing byte":             append(append([]byte(nil), small...), 0),
	} {
		var b RainstormBatch
		if err := b.decodeFlat(p); err == nil {
			t.Errorf("%s: %x decoded as %+v", name, p, b)
		}
	}
	// Through the codec, a refusal is a malformed message.
	bad := appendByteStringHead(nil, len(small)-1)
	if _, err := Decode(TypeRainstormBatch, append(bad, small[:len(small)-1]...)); CodeOf(err) != CodeMalformed {
		t.Fatalf("a truncated batch: %v, want CodeMalformed", err)
	}
}

// A checkpoint's rows travel in the flat layout too, an empty list not at
// all, and the array of records older nodes wrote still reads.
func TestRainstormRowsFlat(t *testing.T) {
	rows := RainstormRows(flatTestBatch(50).Records)
	c := &RainstormCheckpoint{Task: RainstormTask{Job: "j"}, Version: 2, Rows: rows}
	enc := mustMarshal(t, c)
	var back RainstormCheckpoint
	if err := Unmarshal(enc, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Rows, rows) {
		t.Fatalf("rows:\n got %+v\nwant %+v", back.Rows, rows)
	}
	raw, _ := rows.MarshalCBOR()
	if raw[0]>>5 != 2 || !bytes.Contains(enc, raw) {
		t.Fatal("the checkpoint does not carry its rows as one byte string")
	}
	if none := mustMarshal(t, &RainstormCheckpoint{Task: c.Task, Version: 2, Rows: RainstormRows{}}); !bytes.Equal(none, mustMarshal(t, &RainstormCheckpoint{Task: c.Task, Version: 2})) {
		t.Fatal("empty rows are encoded")
	}
	legacy := mustMarshal(t, []RainstormRecord(rows))
	var old RainstormRows
	if err := old.UnmarshalCBOR(legacy); err != nil || !reflect.DeepEqual(old, rows) {
		t.Fatalf("legacy array: %v, %+v", err, old)
	}
	content, err := cborByteString(raw)
	if err != nil {
		t.Fatal(err)
	}
	for n := range len(content) { // every cut short is refused
		var r RainstormRows
		if err := r.UnmarshalCBOR(append(appendByteStringHead(nil, n), content[:n]...)); err == nil {
			t.Fatalf("rows cut to %d of %d bytes decoded", n, len(content))
		}
	}
}

// FuzzRainstormBatchFlat: any bytes decode or are refused without a
// panic, and what decodes has exactly one encoding, the input.
func FuzzRainstormBatchFlat(f *testing.F) {
	f.Add(mustFlat(f, flatTestBatch(0)))
	f.Add(mustFlat(f, flatTestBatch(3)))
	f.Add(mustFlat(f, &RainstormBatch{}))
	f.Add(mustFlat(f, &RainstormBatch{Seq: 7, Base: 5, EOS: true, Next: &RainstormEpoch{Epoch: 2, Segment: 9, Tasks: []int{3, 1}}}))
	f.Add(mustFlat(f, &RainstormBatch{From: RainstormTask{Stage: -1}, Records: []RainstormRecord{{}, {Fields: []string{""}}}}))
	f.Add([]byte{1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var b RainstormBatch
		if err := b.decodeFlat(data); err != nil {
			return
		}
		if again := mustFlat(t, &b); !bytes.Equal(again, data) {
			t.Fatalf("decoded %x, which encodes as %x", data, again)
		}
		// The codec's path (a byte string around it) reads the same.
		m, err := Decode(TypeRainstormBatch, append(appendByteStringHead(nil, len(data)), data...))
		if err != nil || !reflect.DeepEqual(m, &b) {
			t.Fatalf("through the codec: %v, %+v; want %+v", err, m, b)
		}
	})
}

// FuzzRainstormRowsFlat: the same for a checkpoint's rows.
func FuzzRainstormRowsFlat(f *testing.F) {
	for _, rs := range []RainstormRows{nil, RainstormRows(flatTestBatch(3).Records), {{}, {Fields: []string{""}}}} {
		raw, _ := rs.MarshalCBOR()
		f.Add(raw)
	}
	f.Add([]byte{0x43, 1, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		var rs RainstormRows
		if err := rs.UnmarshalCBOR(data); err != nil || len(data) == 0 || data[0]>>5 != 2 {
			return // refused, or the legacy array (the strict decoder's)
		}
		again, _ := rs.MarshalCBOR()
		want, _ := cborByteString(data)
		if got, _ := cborByteString(again); !bytes.Equal(got, want) {
			t.Fatalf("decoded %x, which encodes as %x", want, got)
		}
	})
}

// BenchmarkRainstormBatch compares a 4096-record batch's encode and
// decode in the flat layout with the CBOR map it replaced.
func BenchmarkRainstormBatch(b *testing.B) {
	batch := flatTestBatch(0)
	for i := range 4096 {
		batch.Records = append(batch.Records, RainstormRecord{ID: uint64(i), Fields: []string{fmt.Sprint(100000 + i), "Telespar"}})
	}
	for _, c := range []struct {
		name string
		v    any
	}{{"flat", batch}, {"map", (*rainstormBatchMap)(batch)}} {
		enc := mustMarshal(b, c.v)
		b.Run(c.name+"/encode", func(b *testing.B) {
			b.SetBytes(int64(len(enc)))
			for b.Loop() {
				if _, err := Marshal(c.v); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/decode", func(b *testing.B) {
			b.SetBytes(int64(len(enc)))
			for b.Loop() {
				out := reflect.New(reflect.TypeOf(c.v).Elem()).Interface()
				if err := Unmarshal(enc, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
