package rainstorm

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
	"testing/iotest"
)

// readKept reads every record of data, narrowed to keep when narrow (what
// a reader without SetKeep gives the first stage), with each position.
type readStep struct {
	rec Record
	bad uint64 // id+1 of a bad record, 0 for a record
	pos Position
}

func readKept(t *testing.T, in io.Reader, header bool, keep []bool, set, reuse bool) ([]readStep, error) {
	t.Helper()
	rd, err := NewReader(in, ReaderOptions{Format: FormatCSV, Header: header})
	if err != nil {
		return nil, err
	}
	if set {
		rd.SetKeep(keep)
	}
	if reuse {
		rd.ReuseFields()
	}
	var out []readStep
	for {
		rec, err := rd.Next()
		var bad *BadRecordError
		switch {
		case errors.Is(err, io.EOF):
			return out, nil
		case errors.As(err, &bad):
			out = append(out, readStep{bad: bad.Record + 1, pos: rd.Pos()})
			continue
		case err != nil:
			return out, err
		}
		fields := make([]string, len(rec.Fields)) // a copy: the reader may reuse its slice
		for k, f := range rec.Fields {
			if k < len(keep) && keep[k] {
				fields[k] = f
			}
		}
		out = append(out, readStep{rec: Record{ID: rec.ID, Fields: fields}, pos: rd.Pos()})
	}
}

// FuzzReaderKeep: reading only the kept columns (its own split of unquoted
// lines, encoding/csv for the rest) gives the records, bad records and
// positions of a whole read narrowed to them, whatever the input, however
// it arrives (a byte at a time, so lines straddle the buffer), with or
// without reused field slices.
func FuzzReaderKeep(f *testing.F) {
	f.Add([]byte("a,b,c\n1,2,3\n4,5\n\"x,y\",z,w\r\n\n7,8,9"), uint8(5), true)
	f.Add([]byte("1,2\r\n3,\"4\n5\"\n,,\n6,7,8\nab\"c,d\n"), uint8(2), false)
	f.Add([]byte("\xEF\xBB\xBFh1,h2\n\"unterminated,1\n2,3\n"), uint8(3), true)
	f.Fuzz(func(t *testing.T, data []byte, mask uint8, header bool) {
		keep := make([]bool, 8)
		for k := range keep {
			keep[k] = mask&(1<<k) != 0
		}
		want, werr := readKept(t, bytes.NewReader(data), header, keep, false, false)
		for _, c := range []struct {
			name  string
			in    io.Reader
			reuse bool
		}{
			{"buffered", bytes.NewReader(data), false},
			{"buffered, reused", bytes.NewReader(data), true},
			{"a byte at a time", iotest.OneByteReader(bytes.NewReader(data)), true},
		} {
			got, gerr := readKept(t, c.in, header, keep, true, c.reuse)
			if (werr == nil) != (gerr == nil) || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: with SetKeep %v:\n got %+v, %v\nwant %+v, %v", c.name, keep, got, gerr, want, werr)
			}
		}
	})
}

// The kept columns of the traffic-signs file, read by the split of
// unquoted lines, equal encoding/csv's; most lines take that path.
func TestReaderKeepOnSigns(t *testing.T) {
	data := sharedData(t, fullCSV)
	keep := []bool{false, true, false, false, false, false, true, false, true}
	want, err := readKept(t, bytes.NewReader(data), true, keep, false, false)
	if err != nil {
		t.Fatal(err)
	}
	got, err := readKept(t, bytes.NewReader(data), true, keep, true, true)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		for i := range min(len(got), len(want)) {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("record %d: got %+v, want %+v", i, got[i], want[i])
			}
		}
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	rd, _ := NewReader(bytes.NewReader(data), ReaderOptions{Format: FormatCSV, Header: true})
	rd.SetKeep(keep)
	fast := 0
	for {
		before := rd.fastBytes
		if _, err := rd.Next(); errors.Is(err, io.EOF) {
			break
		}
		if rd.fastBytes > before {
			fast++
		}
	}
	if fast < len(want)*9/10 {
		t.Fatalf("%d of %d records split without encoding/csv: the fast path is not taken", fast, len(want))
	}
}
