package rainstorm

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"tempest/wire"
)

// Splitting a file input into byte ranges, one source task each, so that
// reading and parsing use more than one core.
//
// A boundary cannot be found by looking for a newline near a byte offset:
// RFC 4180 lets a quoted field hold newlines, and whether an offset lies
// inside one depends on every quote before it. So range k of n finds its
// start by scanning the input from its first byte for where records end
// (Reader.ScanTo, encoding/csv's rules on bytes, making no field), up to
// the first record boundary at or past byte k·size/n. That costs range k
// a scan of k/n of the input before its first record, several times
// cheaper than reading it, but needs no coordination: every range, and
// every restart of one, computes the same boundaries from the bytes alone,
// and they are the Reader's own, so the records of the ranges, read in
// turn, are the records of one whole read.
//
// A record belongs to the range its first byte lies in: range k reads until
// its reader stands at or past byte (k+1)·size/n, which is where range k+1
// starts. Its input ids are the Reader's, counted from the input's start
// (the scan counts the records before the range), so a record's id does
// not depend on how many ranges there are.

// MaxSplit bounds `source.split`.
const MaxSplit = 16

// Range is one source task's part of a file input.
type Range struct {
	// Start is the range's first record boundary: the id its first
	// record gets, its offset, and the field count learnt before it.
	Start Position
	// End is the offset at which the range stops reading (the next
	// range's search offset); -1 reads to the end of input.
	End int64
	// First is the offset of the input's first record: the bytes before
	// it (a BOM, the header) bear on every range's records.
	First int64
}

// FindRange returns range k (0-based) of n of an input of size bytes, read
// from its first byte from r, and the input's header (nil without one).
func FindRange(r io.Reader, size int64, k, n int, opts ReaderOptions) (Range, []string, error) {
	if n < 1 || k < 0 || k >= n {
		return Range{}, nil, fmt.Errorf("range %d of %d", k, n)
	}
	rd, err := NewReader(r, opts)
	if err != nil {
		return Range{}, nil, err
	}
	rng := Range{End: -1, First: rd.Pos().Offset}
	if k+1 < n {
		rng.End = rangeOffset(size, k+1, n)
	}
	if k == 0 {
		rng.Start = rd.Pos()
		return rng, rd.Header(), nil
	}
	switch err := rd.ScanTo(rangeOffset(size, k, n)); {
	case errors.Is(err, io.EOF): // an empty range: it ends at once
	case err != nil:
		return Range{}, nil, fmt.Errorf("find range %d of %d: %w", k+1, n, err)
	}
	rng.Start = rd.Pos()
	return rng, rd.Header(), nil
}

// rangeOffset is the byte at which range k of n starts looking for its
// first record.
func rangeOffset(size int64, k, n int) int64 {
	return size/int64(n)*int64(k) + size%int64(n)*int64(k)/int64(n)
}

// RangeSource reads src, which stands in a range, up to the range's end:
// io.EOF once it stands at or past End (never, for End -1).
type RangeSource struct {
	Src RecordSource
	End int64
}

// Next implements RecordSource.
func (r *RangeSource) Next() (Record, error) {
	if r.End >= 0 && r.Src.Pos().Offset >= r.End {
		return Record{}, io.EOF
	}
	return r.Src.Next()
}

// Pos implements RecordSource.
func (r *RangeSource) Pos() Position { return r.Src.Pos() }

// IdentifyRange identifies what range rng of a split input, read from f
// of size bytes, reads: its records' bytes, from its start to the end of
// its last record (found by scanning to End), and the bytes before the
// input's first record, with where the range starts (id, offset, field
// count). That is all the range's records depend on, so a resumed range
// whose identity is unchanged reads the records it read before under the
// same ids, even if bytes of other ranges changed; and each range hashes
// its own part, so a split input is hashed about once in all, not once
// per range. header is the input's (FindRange).
func IdentifyRange(ctx context.Context, f io.ReaderAt, size int64, rng Range, opts ReaderOptions, header []string) (*wire.RainstormFileID, error) {
	to := size
	if rng.End >= 0 {
		rd := ResumeReader(io.NewSectionReader(f, rng.Start.Offset, size-rng.Start.Offset), rng.Start, opts, header)
		if err := rd.ScanTo(rng.End); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("find the range's end: %w", err)
		}
		to = rd.Pos().Offset
	}
	h := sha256.New()
	var b []byte
	for _, v := range []uint64{rng.Start.Record, uint64(rng.Start.Offset), uint64(rng.Start.Fields), uint64(rng.First), uint64(to)} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	h.Write(b)
	for _, part := range [][2]int64{{0, rng.First}, {rng.Start.Offset, to}} {
		if _, err := io.Copy(h, ctxReader{ctx, io.NewSectionReader(f, part[0], part[1]-part[0])}); err != nil {
			return nil, fmt.Errorf("hash source: %w", err)
		}
	}
	return &wire.RainstormFileID{Size: size, SHA256: h.Sum(nil),
		Range: &wire.RainstormFileRange{From: rng.Start.Offset, To: to}}, nil
}
