package rainstorm

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"

	"tempest/wire"
)

// Record is one tuple: the id of the input record it descends from and its
// fields. It is the wire type, so batches travel without conversion.
type Record = wire.RainstormRecord

// Format is how a source's bytes split into records.
type Format uint8

// The input formats.
const (
	FormatCSV   Format = iota + 1 // RFC 4180 records
	FormatLines                   // one record per line, one field named "line"
)

func (f Format) String() string {
	switch f {
	case FormatCSV:
		return "csv"
	case FormatLines:
		return "lines"
	}
	return fmt.Sprintf("format(%d)", uint8(f))
}

// LineField is the one field of a `lines` record.
const LineField = "line"

// Position is a record boundary of an input: the index of the next record
// (the input id it will get) and the byte offset where it starts. A reader
// resumes only at a position it reported, never by scanning for a newline,
// since quoted CSV fields may hold newlines.
type Position struct {
	Record uint64
	Offset int64
	// Fields is the field count a CSV record after the boundary must have,
	// 0 while it is not known (the next record that parses sets it). A
	// headerless input learns it from its first record, not from the one a
	// resumed reader meets first, which may be malformed.
	Fields int
}

// BadRecordError is a malformed input record. The reader has skipped it
// and can go on: the record still used up its input id, so the ids of the
// records after it do not depend on whether it was readable.
type BadRecordError struct {
	Record uint64 // input id (0-based record index)
	Err    error
}

func (e *BadRecordError) Error() string {
	return fmt.Sprintf("record %d: %v", e.Record+1, e.Err)
}

func (e *BadRecordError) Unwrap() error { return e.Err }

const readBufferSize = 1 << 20

var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// Reader reads records from a CSV or line input and numbers them. It reads
// ahead through a 1 MiB buffer but reports exact record boundaries.
type Reader struct {
	format Format
	csv    *csv.Reader
	br     *bufio.Reader
	base   int64 // offset of the csv reader's first byte in the input
	pos    Position
	header []string
	fields int // expected fields per record, 0 until known
	// keep, fastFields, fastBytes: reading only the kept columns of
	// unquoted lines (fastcsv.go); fastBytes is what it consumed past
	// encoding/csv.
	keep       []bool
	fastFields []string
	fastBytes  int64
	spans      []span
	slab       fieldSlab // kept records' field tables
}

// ReaderOptions says how to read an input.
type ReaderOptions struct {
	Format Format
	// Header: the first CSV record names the columns and is not data.
	Header bool
}

// NewReader starts reading an input at its beginning: it skips a UTF-8
// byte-order mark and, with Header, reads the header record.
func NewReader(r io.Reader, opts ReaderOptions) (*Reader, error) {
	br := bufio.NewReaderSize(r, readBufferSize)
	var base int64
	if b, err := br.Peek(3); err == nil && bytes.Equal(b, utf8BOM) {
		_, _ = br.Discard(3)
		base = 3
	}
	rd := newReader(br, opts.Format, base, Position{Offset: base})
	if opts.Header && opts.Format == FormatCSV {
		h, err := rd.csv.Read()
		switch {
		case errors.Is(err, io.EOF):
			return nil, errors.New("read header: input is empty")
		case err != nil:
			return nil, fmt.Errorf("read header: %w", err)
		}
		if k := invalidField(h); k >= 0 {
			return nil, fmt.Errorf("read header: %w", errInvalidUTF8(k))
		}
		rd.header = h
		rd.fields = len(h)
		rd.pos.Offset = rd.offset()
	}
	return rd, nil
}

// ResumeReader continues an input at pos, which must be a position an
// earlier Reader of the same input reported. r must already be positioned
// at pos.Offset; header is the earlier reader's Header (nil without one).
func ResumeReader(r io.Reader, pos Position, opts ReaderOptions, header []string) *Reader {
	rd := newReader(bufio.NewReaderSize(r, readBufferSize), opts.Format, pos.Offset, pos)
	rd.header = header
	rd.fields = max(pos.Fields, 0) // it came from a stored checkpoint
	if header != nil {
		rd.fields = len(header)
	}
	return rd
}

func newReader(br *bufio.Reader, f Format, base int64, pos Position) *Reader {
	rd := &Reader{format: f, br: br, base: base, pos: pos}
	if f == FormatCSV {
		rd.csv = csv.NewReader(br)
		// The count is checked here, against the header or the first
		// record, so a short record is a bad record rather than a panic
		// in an operator.
		rd.csv.FieldsPerRecord = -1
	}
	return rd
}

// ReuseFields lets Next reuse the slice of a CSV record's fields for the
// next record (encoding/csv's ReuseRecord): one allocation a record less,
// for a caller that keeps no record past the next Next (a source reading
// through a combiner, ReadChainedSegment). The field strings themselves
// are never reused.
func (r *Reader) ReuseFields() {
	if r.csv != nil {
		r.csv.ReuseRecord = true
	}
}

// Header returns the column names (nil without a header).
func (r *Reader) Header() []string { return r.header }

// Pos returns the boundary before the next record.
func (r *Reader) Pos() Position {
	p := r.pos
	p.Fields = r.fields
	return p
}

func (r *Reader) offset() int64 { return r.base + r.fastBytes + r.csv.InputOffset() }

func errFieldCount(got, want int) error { return fmt.Errorf("has %d fields, want %d", got, want) }

// Records must be UTF-8: every string a batch carries is checked by its
// decoder (wire/rainstorm_flat.go), so a record that is not would have
// its batch refused by the receiver and resent forever, stalling the
// pipeline. The reader counts it as a bad record instead, whichever column
// holds the byte and whether or not a stage reads that column, so the
// count does not depend on the pipeline; replacing the bytes (with U+FFFD)
// would put values in the output that are not in the input.
func errInvalidUTF8(k int) error { return fmt.Errorf("field %d is not valid UTF-8", k+1) }

// invalidField is the index of the first field that is not UTF-8, or -1.
func invalidField(fields []string) int {
	for k, f := range fields {
		if !utf8.ValidString(f) {
			return k
		}
	}
	return -1
}

// Next returns the next record. At the end of input it returns io.EOF; a
// malformed record returns a *BadRecordError and the reader stays usable.
// Any other error is the input's and ends the read.
func (r *Reader) Next() (Record, error) {
	if r.format == FormatLines {
		return r.nextLine()
	}
	if r.keep != nil {
		if rec, ok, err := r.nextFast(); ok {
			return rec, err
		}
	}
	fields, err := r.csv.Read()
	if errors.Is(err, io.EOF) {
		return Record{}, io.EOF
	}
	id := r.pos.Record
	var pe *csv.ParseError
	if err != nil && !errors.As(err, &pe) {
		return Record{}, fmt.Errorf("read record %d: %w", id+1, err)
	}
	r.pos = Position{Record: id + 1, Offset: r.offset()}
	if err != nil {
		return Record{}, &BadRecordError{Record: id, Err: pe.Err}
	}
	if r.fields == 0 {
		r.fields = len(fields)
	} else if len(fields) != r.fields {
		return Record{}, &BadRecordError{Record: id, Err: errFieldCount(len(fields), r.fields)}
	}
	if k := invalidField(fields); k >= 0 {
		return Record{}, &BadRecordError{Record: id, Err: errInvalidUTF8(k)}
	}
	if r.keep != nil {
		for k := range fields {
			if k >= len(r.keep) || !r.keep[k] {
				fields[k] = "" // as a line read by nextFast
			}
		}
	}
	return Record{ID: id, Fields: fields}, nil
}

func (r *Reader) nextLine() (Record, error) {
	line, err := r.br.ReadSlice('\n')
	for errors.Is(err, bufio.ErrBufferFull) {
		// A line longer than the buffer: gather it.
		var more []byte
		long := append([]byte(nil), line...)
		more, err = r.br.ReadSlice('\n')
		line = append(long, more...)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return Record{}, fmt.Errorf("read line %d: %w", r.pos.Record+1, err)
	}
	if len(line) == 0 {
		return Record{}, io.EOF
	}
	id := r.pos.Record
	r.pos = Position{Record: id + 1, Offset: r.pos.Offset + int64(len(line))}
	line = bytes.TrimSuffix(line, []byte{'\n'})
	line = bytes.TrimSuffix(line, []byte{'\r'})
	if !utf8.Valid(line) {
		return Record{}, &BadRecordError{Record: id, Err: errInvalidUTF8(0)}
	}
	return Record{ID: id, Fields: []string{string(line)}}, nil
}

// ColumnNames returns the names fields go by: the header, or for an input
// without one "1".."n" (1-based column numbers), or "line" for lines.
func ColumnNames(header []string, n int, f Format) []string {
	if f == FormatLines {
		return []string{LineField}
	}
	if header != nil {
		return header
	}
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i + 1)
	}
	return out
}
