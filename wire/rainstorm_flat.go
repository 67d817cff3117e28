package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"strings"
	"unicode/utf8"
)

// A RainstormBatch travels, and sits in a checkpoint's pending batches, in
// a flat layout of its own rather than as a CBOR map: a batch is thousands
// of records, and CBOR spent a reflective step, a header and a string
// allocation on every field of every one of them, on both ends, and did so
// twice per batch (once for the checkpoint, once for the send). The flat
// layout is written once per batch (Freeze) and those bytes serve every
// send, resend and checkpoint; a receiver reads it back into one string
// and one field table per batch.
//
// Its CBOR form is a byte string holding the layout, so a batch still
// nests in messages (RainstormCheckpoint.Pending) and fills a
// RainstormBatchBlob like any other value. A CBOR map, the form nodes
// before it sent and stored, is still read; a node that predates it
// refuses the byte string (it decodes a map) rather than misreading it.
//
// The layout, where uvarint is unsigned LEB128 in its shortest form, int
// a Go int as a zigzag uvarint (the codec's ints take any value, as CBOR
// did), and str a uvarint byte count followed by that many bytes of UTF-8:
//
//	byte     layout version (1)
//	uvarint  flags: 1 EOS, 2 Next follows, 4 Base follows
//	str      From.Job
//	str      From.Workflow
//	int      From.Stage, From.Index, To
//	uvarint  Incarnation, Seq, Epoch
//	Next     (when flagged) uvarint Epoch, Segment, len(Tasks), then each task count an int
//	uvarint  (when flagged) Base, never 0
//	uvarint  records, then fields over all records
//	records  each: uvarint ID, uvarint field count, each field a str
//
// Nothing may follow the last record, and a varint may not be longer than
// it needs: every batch has exactly one encoding.
const flatVersion = 1

const (
	flatEOS  = 1 << 0
	flatNext = 1 << 1
	flatBase = 1 << 2
)

// Freeze writes b's flat layout once and keeps it: every later encoding of
// b (MarshalCBOR: its sends and resends, the checkpoint that holds it)
// returns those bytes instead of encoding again. The task that cuts a
// batch freezes it before handing it out, since a send, a resend and a
// checkpoint of it may then run on different goroutines at once; nothing
// may change b afterwards.
func (b *RainstormBatch) Freeze() { b.flat = b.encode() }

// MarshalCBOR implements cbor.Marshaler: a byte string holding b's flat
// layout, the kept one when b is frozen. The caller must not change the
// bytes it returns.
func (b *RainstormBatch) MarshalCBOR() ([]byte, error) {
	if b.flat != nil {
		return b.flat, nil
	}
	return b.encode(), nil
}

// UnmarshalCBOR implements cbor.Unmarshaler for a CBOR item the strict
// decoder has already found well-formed: the flat layout in a byte
// string, or the map older nodes wrote.
func (b *RainstormBatch) UnmarshalCBOR(data []byte) error {
	if len(data) == 0 || data[0]>>5 != 2 {
		var m rainstormBatchMap
		if err := decMode.Unmarshal(data, &m); err != nil {
			return err
		}
		*b = RainstormBatch(m)
		b.flat = nil
		return nil
	}
	body, err := cborByteString(data)
	if err != nil {
		return fmt.Errorf("rainstorm batch: %w", err)
	}
	var out RainstormBatch
	if err := out.decodeFlat(body); err != nil {
		return fmt.Errorf("rainstorm batch: %w", err)
	}
	*b = out
	return nil
}

// rainstormBatchMap is RainstormBatch without its methods: the CBOR map
// of its struct tags, as nodes before the flat layout wrote it.
type rainstormBatchMap RainstormBatch

// encode returns b's flat layout inside a CBOR byte string head, in one
// allocation of the exact size.
func (b *RainstormBatch) encode() []byte {
	n, fields := b.flatSize()
	dst := appendByteStringHead(make([]byte, 0, 9+n), n)
	dst = append(dst, flatVersion)
	var flags uint64
	if b.EOS {
		flags |= flatEOS
	}
	if b.Next != nil {
		flags |= flatNext
	}
	if b.Base != 0 {
		flags |= flatBase
	}
	dst = binary.AppendUvarint(dst, flags)
	dst = appendFlatString(dst, b.From.Job)
	dst = appendFlatString(dst, b.From.Workflow)
	dst = binary.AppendUvarint(dst, zigzag(b.From.Stage))
	dst = binary.AppendUvarint(dst, zigzag(b.From.Index))
	dst = binary.AppendUvarint(dst, zigzag(b.To))
	dst = binary.AppendUvarint(dst, b.Incarnation)
	dst = binary.AppendUvarint(dst, b.Seq)
	dst = binary.AppendUvarint(dst, b.Epoch)
	if e := b.Next; e != nil {
		dst = binary.AppendUvarint(dst, e.Epoch)
		dst = binary.AppendUvarint(dst, e.Segment)
		dst = binary.AppendUvarint(dst, uint64(len(e.Tasks)))
		for _, t := range e.Tasks {
			dst = binary.AppendUvarint(dst, zigzag(t))
		}
	}
	if b.Base != 0 {
		dst = binary.AppendUvarint(dst, b.Base)
	}
	return appendFlatRecords(dst, b.Records, fields)
}

// flatSize is the length of b's flat layout and its field count over all
// records.
func (b *RainstormBatch) flatSize() (n, fields int) {
	n = 1 + uvarintLen(flatEOS|flatNext|flatBase) + flatStringLen(b.From.Job) + flatStringLen(b.From.Workflow) +
		uvarintLen(zigzag(b.From.Stage)) + uvarintLen(zigzag(b.From.Index)) + uvarintLen(zigzag(b.To)) +
		uvarintLen(b.Incarnation) + uvarintLen(b.Seq) + uvarintLen(b.Epoch)
	if e := b.Next; e != nil {
		n += uvarintLen(e.Epoch) + uvarintLen(e.Segment) + uvarintLen(uint64(len(e.Tasks)))
		for _, t := range e.Tasks {
			n += uvarintLen(zigzag(t))
		}
	}
	if b.Base != 0 {
		n += uvarintLen(b.Base)
	}
	rn, fields := flatRecordsSize(b.Records)
	return n + rn, fields
}

// flatRecordsSize is the length of records' flat layout (their count,
// field count and each record) and their field count.
func flatRecordsSize(recs []RainstormRecord) (n, fields int) {
	for i := range recs {
		r := &recs[i]
		n += uvarintLen(r.ID) + uvarintLen(uint64(len(r.Fields)))
		for _, f := range r.Fields {
			n += flatStringLen(f)
		}
		fields += len(r.Fields)
	}
	return n + uvarintLen(uint64(len(recs))) + uvarintLen(uint64(fields)), fields
}

func appendFlatRecords(dst []byte, recs []RainstormRecord, fields int) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(recs)))
	dst = binary.AppendUvarint(dst, uint64(fields))
	for i := range recs {
		r := &recs[i]
		dst = binary.AppendUvarint(dst, r.ID)
		dst = binary.AppendUvarint(dst, uint64(len(r.Fields)))
		for _, f := range r.Fields {
			dst = appendFlatString(dst, f)
		}
	}
	return dst
}

// decodeFlat reads a flat layout into b. Every string of the batch is
// cut from one copy of p, and every record's fields from one table, so a
// batch costs a few allocations whatever its size; p itself is not kept.
func (b *RainstormBatch) decodeFlat(p []byte) error {
	if len(p) == 0 || p[0] != flatVersion {
		if len(p) == 0 {
			return errFlat("empty")
		}
		return errFlat(fmt.Sprintf("layout version %d, want %d", p[0], flatVersion))
	}
	r := flatReader{s: string(p), off: 1}
	flags := r.uvarint()
	if flags&^(flatEOS|flatNext|flatBase) != 0 {
		return errFlat(fmt.Sprintf("unknown flags %#x", flags))
	}
	b.EOS = flags&flatEOS != 0
	// The task names outlive the batch in the machines: copies, so they
	// do not hold its records' memory.
	b.From.Job = strings.Clone(r.str())
	b.From.Workflow = strings.Clone(r.str())
	b.From.Stage = r.int()
	b.From.Index = r.int()
	b.To = r.int()
	b.Incarnation = r.uvarint()
	b.Seq = r.uvarint()
	b.Epoch = r.uvarint()
	if flags&flatNext != 0 {
		e := &RainstormEpoch{Epoch: r.uvarint(), Segment: r.uvarint()}
		if n := r.count(1); n > 0 {
			e.Tasks = make([]int, n)
			for i := range e.Tasks {
				e.Tasks[i] = r.int()
			}
		}
		b.Next = e
	}
	if flags&flatBase != 0 {
		if b.Base = r.uvarint(); b.Base == 0 {
			return errFlat("base flagged but 0") // one encoding per batch
		}
	}
	b.Records = r.records()
	return r.end()
}

// records reads a records block: every record's fields come from one
// table, cut from one string.
func (r *flatReader) records() []RainstormRecord {
	// Bounded by the bytes left before anything is allocated: a record
	// takes at least two bytes, a field at least one.
	nrec := r.count(2)
	nfield := r.count(1)
	if r.err != nil || nrec == 0 {
		if nfield > 0 {
			r.fail(fmt.Sprintf("%d fields in no record", nfield))
		}
		return nil
	}
	recs := make([]RainstormRecord, nrec)
	var table []string
	if nfield > 0 {
		table = make([]string, nfield)
	}
	used := 0
	for i := range recs {
		rec := &recs[i]
		rec.ID = r.uvarint()
		k := r.count(1)
		if r.err != nil {
			return nil
		}
		if k > nfield-used {
			r.fail(fmt.Sprintf("record %d has %d fields, more than the %d left of %d", i, k, nfield-used, nfield))
			return nil
		}
		if k == 0 {
			continue
		}
		fs := table[used : used+k : used+k] // capped: an append by an operator copies
		used += k
		for j := range fs {
			fs[j] = r.str()
		}
		rec.Fields = fs
	}
	if used != nfield && r.err == nil {
		r.fail(fmt.Sprintf("records hold %d fields, the count says %d", used, nfield))
	}
	return recs
}

// end is the reader's error, or one for bytes left over.
func (r *flatReader) end() error {
	if r.err == nil && r.off != len(r.s) {
		return errFlat(fmt.Sprintf("%d bytes after the last record", len(r.s)-r.off))
	}
	return r.err
}

func errFlat(why string) error { return fmt.Errorf("flat layout: %s", why) }

// flatReader reads a flat layout; the first error sticks and every read
// after it returns a zero value.
type flatReader struct {
	s   string
	off int
	err error
}

func (r *flatReader) fail(why string) {
	if r.err == nil {
		r.err = errFlat(fmt.Sprintf("%s at byte %d", why, r.off))
	}
}

// uvarint reads an unsigned LEB128 value in its shortest form.
func (r *flatReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	var x uint64
	for i, shift := 0, uint(0); i < binary.MaxVarintLen64; i, shift = i+1, shift+7 {
		if r.off >= len(r.s) {
			r.fail("truncated varint")
			return 0
		}
		c := r.s[r.off]
		r.off++
		if c < 0x80 {
			switch {
			case i == binary.MaxVarintLen64-1 && c > 1:
				r.fail("varint overflows 64 bits")
				return 0
			case c == 0 && i > 0:
				r.fail("varint longer than it needs")
				return 0
			}
			return x | uint64(c)<<shift
		}
		x |= uint64(c&0x7f) << shift
	}
	r.fail("varint overflows 64 bits")
	return 0
}

// int reads a zigzag uvarint that must fit an int.
func (r *flatReader) int() int {
	u := r.uvarint()
	v := int64(u>>1) ^ -int64(u&1)
	if int64(int(v)) != v {
		r.fail(fmt.Sprintf("value %d does not fit an int", v))
		return 0
	}
	return int(v)
}

// count reads a number of items that each take at least min bytes of
// what is left, so that no count makes the decoder allocate more than
// the input could hold.
func (r *flatReader) count(min int) int {
	v := r.uvarint()
	if left := uint64(len(r.s) - r.off); v > left/uint64(min) {
		r.fail(fmt.Sprintf("count %d does not fit the %d bytes left", v, left))
		return 0
	}
	return int(v)
}

// str reads a length-prefixed UTF-8 string, a substring of the input.
func (r *flatReader) str() string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.s)-r.off) {
		r.fail(fmt.Sprintf("string of %d bytes past the end", n))
		return ""
	}
	s := r.s[r.off : r.off+int(n)]
	if !utf8.ValidString(s) {
		r.fail("string is not valid UTF-8")
		return ""
	}
	r.off += int(n)
	return s
}

func appendFlatString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

func flatStringLen(s string) int { return uvarintLen(uint64(len(s))) + len(s) }

func zigzag(v int) uint64 { return uint64(int64(v)<<1 ^ int64(v)>>63) }

func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

// appendByteStringHead appends the shortest CBOR head of a byte string
// of n bytes (major type 2).
func appendByteStringHead(dst []byte, n int) []byte {
	const major = 2 << 5
	switch u := uint64(n); {
	case u < 24:
		return append(dst, major|byte(u))
	case u <= math.MaxUint8:
		return append(dst, major|24, byte(u))
	case u <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, major|25), uint16(u))
	case u <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(dst, major|26), uint32(u))
	default:
		return binary.BigEndian.AppendUint64(append(dst, major|27), u)
	}
}

// cborByteString returns the content of the definite-length CBOR byte
// string that is all of data.
func cborByteString(data []byte) ([]byte, error) {
	if len(data) == 0 || data[0]>>5 != 2 {
		return nil, fmt.Errorf("not a CBOR byte string")
	}
	var n uint64
	head := 1
	switch info := data[0] & 0x1f; {
	case info < 24:
		n = uint64(info)
	case info == 24 && len(data) >= 2:
		n, head = uint64(data[1]), 2
	case info == 25 && len(data) >= 3:
		n, head = uint64(binary.BigEndian.Uint16(data[1:])), 3
	case info == 26 && len(data) >= 5:
		n, head = uint64(binary.BigEndian.Uint32(data[1:])), 5
	case info == 27 && len(data) >= 9:
		n, head = binary.BigEndian.Uint64(data[1:]), 9
	default:
		return nil, fmt.Errorf("CBOR byte string head %#x", data[0])
	}
	if n != uint64(len(data)-head) {
		return nil, fmt.Errorf("CBOR byte string of %d bytes in %d", n, len(data)-head)
	}
	return data[head:], nil
}

// RainstormRows is the rows a checkpoint publishes (a sink's output), in
// the flat layout of a batch's records: a sink emits a row for every
// record it takes, and the managers decode, store and replicate each
// checkpoint's rows, so a row costs what a batch's record does. Its CBOR
// form is a byte string holding
//
//	byte     layout version (1)
//	uvarint  records, then fields over all records
//	records  each: uvarint ID, uvarint field count, each field a str
//
// and the CBOR array of records older nodes wrote is still read.
type RainstormRows []RainstormRecord

// IsZero reports whether there are no rows: the checkpoint's field is
// then left out (omitzero), as omitempty left out an empty list.
func (rs RainstormRows) IsZero() bool { return len(rs) == 0 }

// MarshalCBOR implements cbor.Marshaler.
func (rs RainstormRows) MarshalCBOR() ([]byte, error) {
	n, fields := flatRecordsSize(rs)
	dst := appendByteStringHead(make([]byte, 0, 10+n), 1+n)
	dst = append(dst, flatVersion)
	return appendFlatRecords(dst, rs, fields), nil
}

// UnmarshalCBOR implements cbor.Unmarshaler for a well-formed CBOR item:
// the flat layout in a byte string, or an array of records.
func (rs *RainstormRows) UnmarshalCBOR(data []byte) error {
	if len(data) == 0 || data[0]>>5 != 2 {
		var recs []RainstormRecord
		if err := decMode.Unmarshal(data, &recs); err != nil {
			return err
		}
		*rs = recs
		return nil
	}
	p, err := cborByteString(data)
	if err != nil {
		return fmt.Errorf("rainstorm rows: %w", err)
	}
	if len(p) == 0 || p[0] != flatVersion {
		return fmt.Errorf("rainstorm rows: %w", errFlat("no layout version 1"))
	}
	r := flatReader{s: string(p), off: 1}
	recs := r.records()
	if err := r.end(); err != nil {
		return fmt.Errorf("rainstorm rows: %w", err)
	}
	*rs = recs
	return nil
}
