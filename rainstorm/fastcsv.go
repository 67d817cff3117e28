package rainstorm

import (
	"bytes"
	"unicode/utf8"
)

// Reading only the columns a pipeline reads. Most lines of a CSV input
// hold no quote: such a line's fields are the bytes between its commas,
// and encoding/csv's state machine, and its copy of the whole line as one
// string, buy nothing. With SetKeep, the reader splits such a line itself
// and makes strings of the kept columns only (for filter → count, two of
// twenty), leaving the others empty as Narrow would; a line with a quote,
// an empty line, or one not yet wholly buffered goes to encoding/csv as
// before. The records, bad records and positions are the same either way
// (FuzzReaderKeep holds the two to each other).

// SetKeep makes Next fill in only the fields keep marks (others ""), as
// the first stage's Narrow would leave them; nil (every column may be
// read) reads every field as before. Set it before the first Next.
func (r *Reader) SetKeep(keep []bool) {
	if r.format == FormatCSV {
		r.keep = keep
	}
}

// ReadKeep is the source columns the pipeline reads (its first stage's,
// chained or not, and the stages' after it): what a source's reader needs
// to fill in (Reader.SetKeep). Nil: all of them.
func (p *Pipeline) ReadKeep() []bool {
	return p.unchained()[0].keep
}

// nextFast reads the next record itself when it is a whole buffered line
// (no newline inside a quoted field) that encoding/csv would read without
// an error; ok false leaves it to encoding/csv, which then reports it.
func (r *Reader) nextFast() (rec Record, ok bool, err error) {
	buf, _ := r.br.Peek(r.br.Buffered())
	if len(buf) == 0 {
		if _, err := r.br.Peek(1); err != nil {
			return Record{}, false, nil // the end, or an error: encoding/csv reports it
		}
		buf, _ = r.br.Peek(r.br.Buffered())
	}
	nl := bytes.IndexByte(buf, '\n')
	if nl < 0 {
		return Record{}, false, nil
	}
	line := buf[:nl]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1] // encoding/csv reads "\r\n" as "\n"
	}
	if len(line) == 0 {
		return Record{}, false, nil // skipped as empty: encoding/csv's
	}
	spans, ok := splitCSVLine(line, r.spans[:0])
	r.spans = spans
	if !ok {
		return Record{}, false, nil
	}
	n := len(spans)
	id := r.pos.Record
	if r.fields != 0 && n != r.fields {
		r.skip(nl + 1)
		return Record{}, true, &BadRecordError{Record: id, Err: errFieldCount(n, r.fields)}
	}
	if !utf8.Valid(line) {
		// As encoding/csv's path: the count is learnt first (the record
		// parses), then the record is refused for its bytes.
		r.skip(nl + 1)
		if r.fields == 0 {
			r.fields = n
		}
		k := 0
		for k < n-1 && utf8.Valid(line[spans[k].start:spans[k].end]) {
			k++
		}
		return Record{}, true, &BadRecordError{Record: id, Err: errInvalidUTF8(k)}
	}
	var fields []string
	switch {
	case r.csv.ReuseRecord && cap(r.fastFields) >= n:
		fields = r.fastFields[:n]
		clear(fields)
	case r.csv.ReuseRecord:
		fields = make([]string, n)
		r.fastFields = fields
	default:
		fields = r.slab.take(n)[:n]
	}
	for k := range min(n, len(r.keep)) {
		if !r.keep[k] {
			continue
		}
		sp := spans[k]
		raw := line[sp.start:sp.end]
		if sp.quoted && bytes.Contains(raw, dquote) {
			fields[k] = string(bytes.ReplaceAll(raw, dquote, quote))
		} else {
			fields[k] = string(raw)
		}
	}
	r.skip(nl + 1)
	if r.fields == 0 {
		r.fields = n
	}
	return Record{ID: id, Fields: fields}, true, nil
}

var quote, dquote = []byte{'"'}, []byte{'"', '"'}

// span is a field of a line: its bytes (inside the quotes of a quoted
// field, escaped quotes still doubled).
type span struct {
	start, end int
	quoted     bool
}

// splitCSVLine splits one line (no line end) into RFC 4180 fields as
// encoding/csv (strict quotes) does; ok false for a line it would refuse or
// read on past (a bare or stray quote, a quoted field the line does not
// close).
func splitCSVLine(line []byte, spans []span) ([]span, bool) {
	i := 0
	for {
		if i < len(line) && line[i] == '"' {
			j := i + 1
			for {
				q := bytes.IndexByte(line[j:], '"')
				if q < 0 {
					return spans, false // the field goes on past the line
				}
				j += q
				if j+1 < len(line) && line[j+1] == '"' {
					j += 2 // an escaped quote
					continue
				}
				break
			}
			spans = append(spans, span{start: i + 1, end: j, quoted: true})
			i = j + 1
			if i == len(line) {
				return spans, true
			}
			if line[i] != ',' {
				return spans, false // text after the closing quote
			}
			i++
			continue
		}
		end := bytes.IndexByte(line[i:], ',')
		if end < 0 {
			end = len(line) - i
		}
		if bytes.IndexByte(line[i:i+end], '"') >= 0 {
			return spans, false // a bare quote
		}
		spans = append(spans, span{start: i, end: i + end})
		i += end
		if i == len(line) {
			return spans, true
		}
		i++ // the comma
	}
}

// skip consumes a line nextFast read and moves past it.
func (r *Reader) skip(n int) {
	_, _ = r.br.Discard(n) // buffered: cannot fail
	r.fastBytes += int64(n)
	r.pos = Position{Record: r.pos.Record + 1, Offset: r.offset()}
}

// fieldSlab hands out field tables for records their caller keeps (a
// source keeps a segment's records until its chain has run; an exec stage
// passes its answers on), cut from one allocation of fieldSlabRecords
// tables, so a record output's source and an exec stage make one
// allocation per 256 records instead of one a record (the source's
// twenty-slot tables were a third of the reader's time). Each table's
// capacity is its size, so an operator that appends to it copies rather
// than writing into the next record's table. A slab lives as long as any
// of its records; narrowing copies the kept fields out, so that is about
// a segment's life.
type fieldSlab struct{ free []string }

// fieldSlabRecords is how many records' field tables one allocation holds.
const fieldSlabRecords = 256

// take returns an empty table with room for n fields.
func (s *fieldSlab) take(n int) []string {
	if len(s.free) < n {
		s.free = make([]string, n*fieldSlabRecords)
	}
	t := s.free[:0:n]
	s.free = s.free[n:]
	return t
}
