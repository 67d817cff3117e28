package wire

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// RowsReader reads the records of a RainstormRows in its flat CBOR form
// one at a time, where UnmarshalCBOR decodes them all at once: a results
// read walks a pipeline's whole output, and decoded at once that was every
// row of it in memory together. A record costs one string (its fields cut
// from it) and one field slice; the input is not copied, so it must not
// change while the reader is in use.
//
// RowsReader is a value: a copy reads on from where the original stood,
// independently of it. It holds the same rules as UnmarshalCBOR (counts
// bounded by the bytes left, shortest varints, UTF-8 strings, the field
// count met exactly, nothing after the last record) and reports a
// violation by Err, once the records before it were read.
type RowsReader struct {
	p      []byte
	off    int
	recs   int // records left
	fields int // fields left over those records
	err    error
}

// NewRowsReader returns a reader of data, the CBOR byte string
// RainstormRows.MarshalCBOR writes. The array of records older nodes
// wrote is refused: this reader is for the flat layout only.
func NewRowsReader(data []byte) (RowsReader, error) {
	p, err := cborByteString(data)
	if err != nil {
		return RowsReader{}, fmt.Errorf("rainstorm rows: %w", err)
	}
	if len(p) == 0 || p[0] != flatVersion {
		return RowsReader{}, fmt.Errorf("rainstorm rows: %w", errFlat("no layout version 1"))
	}
	r := RowsReader{p: p, off: 1}
	r.recs = r.count(2)
	r.fields = r.count(1)
	if r.err == nil && r.recs == 0 && r.fields > 0 {
		r.fail(fmt.Sprintf("%d fields in no record", r.fields))
	}
	r.end()
	if r.err != nil {
		return RowsReader{}, fmt.Errorf("rainstorm rows: %w", r.err)
	}
	return r, nil
}

// Len is the number of records not read yet.
func (r *RowsReader) Len() int { return r.recs }

// Err is the first violation of the layout met, nil while there is none.
func (r *RowsReader) Err() error {
	if r.err != nil {
		return fmt.Errorf("rainstorm rows: %w", r.err)
	}
	return nil
}

// Next returns the next record, or false when there is none left or the
// layout is broken (Err says which).
func (r *RowsReader) Next() (RainstormRecord, bool) {
	id, k, start, _, ok := r.step()
	if !ok {
		return RainstormRecord{}, false
	}
	rec := RainstormRecord{ID: id}
	if k > 0 {
		// The fields were checked and stepped over: cut all of them from
		// one string of their span.
		span := string(r.p[start:r.off])
		rec.Fields = make([]string, k)
		for i, off := 0, start; i < k; i++ {
			n, w := binary.Uvarint(r.p[off:])
			off += w
			rec.Fields[i] = span[off-start : off-start+int(n)]
			off += int(n)
		}
	}
	return rec, true
}

// Skip steps over the next record, checking it as Next does, without
// making it: its id and its first field (nil when it has none) as a view
// of the input, for a caller that only orders records. False as Next.
func (r *RowsReader) Skip() (id uint64, first []byte, ok bool) {
	id, _, _, first, ok = r.step()
	return id, first, ok
}

// step reads the next record's id and field count and steps over its
// fields, checking them: they start at start and end at r.off, the first
// at first.
func (r *RowsReader) step() (id uint64, k, start int, first []byte, ok bool) {
	if r.err != nil || r.recs == 0 {
		return 0, 0, 0, nil, false
	}
	id = r.uvarint()
	k = r.count(1)
	if r.err == nil && k > r.fields {
		r.fail(fmt.Sprintf("a record has %d fields, more than the %d left", k, r.fields))
	}
	start = r.off
	for i := 0; i < k && r.err == nil; i++ {
		f := r.str()
		if i == 0 {
			first = f
		}
	}
	if r.err != nil {
		return 0, 0, 0, nil, false
	}
	r.recs--
	r.fields -= k
	if r.recs == 0 {
		if r.fields != 0 {
			r.fail(fmt.Sprintf("records hold %d fewer fields than the count says", r.fields))
		}
		r.end()
	}
	if r.err != nil {
		return 0, 0, 0, nil, false
	}
	return id, k, start, first, true
}

// end checks that nothing follows the last record, once none is left.
func (r *RowsReader) end() {
	if r.err == nil && r.recs == 0 && r.off != len(r.p) {
		r.fail(fmt.Sprintf("%d bytes after the last record", len(r.p)-r.off))
	}
}

func (r *RowsReader) fail(why string) {
	if r.err == nil {
		r.err = errFlat(fmt.Sprintf("%s at byte %d", why, r.off))
	}
}

// uvarint reads an unsigned LEB128 value in its shortest form.
func (r *RowsReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	x, n := binary.Uvarint(r.p[r.off:])
	switch {
	case n == 0:
		r.fail("truncated varint")
		return 0
	case n < 0:
		r.fail("varint overflows 64 bits")
		return 0
	case n > 1 && r.p[r.off+n-1] == 0:
		r.fail("varint longer than it needs")
		return 0
	}
	r.off += n
	return x
}

// count reads a number of items that each take at least min bytes of
// what is left.
func (r *RowsReader) count(min int) int {
	v := r.uvarint()
	if left := uint64(len(r.p) - r.off); v > left/uint64(min) {
		r.fail(fmt.Sprintf("count %d does not fit the %d bytes left", v, left))
		return 0
	}
	return int(v)
}

// str checks a length-prefixed UTF-8 string, steps over it and returns
// its bytes (a view of the input).
func (r *RowsReader) str() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.p)-r.off) {
		r.fail(fmt.Sprintf("string of %d bytes past the end", n))
		return nil
	}
	b := r.p[r.off : r.off+int(n) : r.off+int(n)]
	if !utf8.Valid(b) {
		r.fail("string is not valid UTF-8")
		return nil
	}
	r.off += int(n)
	return b
}
