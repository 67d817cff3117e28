package rainstorm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Skipping records without reading them: what a range of a split input
// does up to its first record. Only where each record ends matters there,
// and encoding/csv's strict RFC 4180 rules decide that from a handful of
// bytes per field: the scan below finds quotes and line ends with
// bytes.IndexByte and looks at the byte after each quote, making no
// field, no string and no copy. It follows encoding/csv rule for rule,
// malformed records included, since a record's end is where the next
// record's id starts:
//
//   - At a record boundary a line that is empty ("\n", "\r\n", or a lone
//     "\r" at the end of input) is skipped and is no record.
//   - An unquoted field runs to the next comma or line end. A quote inside
//     it is a bare quote: the record is malformed and ends with its line,
//     even if a quoted field after it would have run on (that is why
//     counting quotes alone cannot find boundaries: `a"b,"x` ends at its
//     newline).
//   - A quoted field runs to a quote not followed by another one, across
//     newlines. After it: a comma starts the next field, a line end ("\n",
//     "\r\n", or the end of input) ends the record, anything else makes it
//     malformed and the record ends with that line. A quoted field the
//     input ends inside is malformed and ends the input.
//
// A record longer than the read buffer, and a headerless input's first
// records before one sets the field count, go to the Reader's own Next.
// FuzzScanTo holds the scan to the Reader on every boundary.

// ScanTo moves the reader past whole records, reading none of their
// fields, to its first record boundary at or past offset target, as
// calling Next until Pos().Offset >= target would (bad records included).
// At the end of input it returns io.EOF with Pos after the last record.
func (r *Reader) ScanTo(target int64) error {
	var bad *BadRecordError
	for r.pos.Offset < target {
		if r.format == FormatCSV && r.fields == 0 {
			// A headerless input learns its field count from its first
			// record that parses, which a boundary needs (Position.Fields).
			if _, err := r.Next(); err != nil && !errors.As(err, &bad) {
				return err
			}
			continue
		}
		buf, err := r.br.Peek(r.br.Size())
		atEOF := errors.Is(err, io.EOF)
		if err != nil && !atEOF {
			return fmt.Errorf("read record %d: %w", r.pos.Record+1, err)
		}
		var n int
		var recs uint64
		var end bool
		if r.format == FormatLines {
			n, recs, end = scanLines(buf, atEOF, target-r.pos.Offset)
		} else {
			n, recs, end = scanCSV(buf, atEOF, target-r.pos.Offset)
		}
		if n > 0 {
			_, _ = r.br.Discard(n) // buffered: cannot fail
			r.pos.Record += recs
			if r.format == FormatLines {
				r.pos.Offset += int64(n)
			} else {
				r.fastBytes += int64(n)
				r.pos.Offset = r.offset()
			}
		}
		switch {
		case end:
			return io.EOF
		case n == 0:
			// The next record does not fit in the buffer: the Reader
			// gathers it.
			if _, err := r.Next(); err != nil && !errors.As(err, &bad) {
				return err
			}
		}
	}
	return nil
}

// scanCSV consumes whole CSV records from buf, each with the empty lines
// before it, while fewer than need bytes are consumed: n bytes holding
// recs records. end: nothing but empty lines follows up to the end of
// input. n is 0 when the first record does not end within buf and more
// input follows.
func scanCSV(buf []byte, atEOF bool, need int64) (n int, recs uint64, end bool) {
	for int64(n) < need {
		i := n
		for i < len(buf) { // empty lines
			if buf[i] == '\n' {
				i++
			} else if buf[i] == '\r' && i+1 < len(buf) && buf[i+1] == '\n' {
				i += 2
			} else if buf[i] == '\r' && i+1 == len(buf) && atEOF {
				i++
			} else {
				break
			}
		}
		if i == len(buf) || (i+1 == len(buf) && buf[i] == '\r') {
			// Only empty lines left in buf (a final "\r" may still be
			// one): the end, or more to read.
			return n, recs, atEOF && i == len(buf)
		}
		l, ok := csvRecordEnd(buf[i:], atEOF)
		if !ok {
			return n, recs, false
		}
		n = i + l
		recs++
	}
	return n, recs, false
}

// csvRecordEnd is the length of the record b starts with (not an empty
// line) through its line end, as encoding/csv reads it; ok false when b
// ends before the record does and more input follows.
func csvRecordEnd(b []byte, atEOF bool) (int, bool) {
	// line is the end of the line p is in (its newline, or len(b) at the
	// end of input), found once per line, not per field.
	line := -1
	lineEnd := func(p int) (int, bool) { // past the end of p's line
		if p > line {
			nl := bytes.IndexByte(b[p:], '\n')
			if nl < 0 {
				line = len(b)
				return len(b), atEOF
			}
			line = p + nl
		}
		if line == len(b) {
			return len(b), atEOF
		}
		return line + 1, true
	}
	p := 0 // a field's start
	for {
		end, ok := lineEnd(p)
		if !ok {
			return 0, false
		}
		q := bytes.IndexByte(b[p:line], '"')
		if q < 0 {
			return end, true // unquoted fields to the line's end
		}
		q += p
		if q > p && b[q-1] != ',' {
			return end, true // a bare quote
		}
		p = q + 1 // inside a quoted field
	quoted:
		for {
			c := bytes.IndexByte(b[p:], '"')
			if c < 0 {
				if !atEOF {
					return 0, false
				}
				return len(b), true // the input ends inside the field
			}
			p += c + 1
			if p == len(b) {
				return p, atEOF
			}
			switch b[p] {
			case '"': // an escaped quote
				p++
			case ',':
				p++
				break quoted
			case '\n':
				return p + 1, true
			case '\r':
				if p+1 == len(b) {
					return p + 1, atEOF // dropped at the end of input
				}
				if b[p+1] == '\n' {
					return p + 2, true
				}
				return lineEnd(p) // a stray quote
			default:
				return lineEnd(p) // a stray quote
			}
		}
	}
}

// scanLines is scanCSV for a lines input, where every line is a record,
// an empty one too.
func scanLines(buf []byte, atEOF bool, need int64) (n int, recs uint64, end bool) {
	for int64(n) < need {
		i := bytes.IndexByte(buf[n:], '\n')
		switch {
		case i >= 0:
			n += i + 1
		case !atEOF:
			return n, recs, false
		case n == len(buf):
			return n, recs, true
		default:
			n = len(buf) // the last line has no newline
		}
		recs++
	}
	return n, recs, false
}
