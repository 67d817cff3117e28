package rainstorm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"tempest/wire"
)

// invalidUTF8CSV is a header and n records k,v where record bad holds a
// byte that is not UTF-8 in its key, the column a count reads.
func invalidUTF8CSV(n, bad int) (data []byte, want map[string]int) {
	var b bytes.Buffer
	want = map[string]int{}
	b.WriteString("k,v\n")
	for i := range n {
		k := fmt.Sprintf("k%d", i%5)
		if i == bad {
			fmt.Fprintf(&b, "k\xff%d,%d\n", i%5, i)
			continue
		}
		want[k]++
		fmt.Fprintf(&b, "%s,%d\n", k, i)
	}
	return b.Bytes(), want
}

// TestSimInvalidUTF8IsABadRecord: a record holding bytes that are not
// UTF-8 must not stall the pipeline. The batch layout's decoder refuses
// such a string, so a source that sent the record had its batch refused
// by the receiver, and resent, forever; the reader counts it as a bad
// record instead, and the output is the pass over the other records.
func TestSimInvalidUTF8IsABadRecord(t *testing.T) {
	data, counts := invalidUTF8CSV(3000, 1234)
	want := countRows(counts)
	for _, chained := range []bool{false, true} {
		spec := &Spec{Source: Source{File: "k.csv", Header: true}, Stages: []Stage{
			{Name: "count", Op: OpCount, Tasks: 2, Key: "k"}}}
		if chained {
			spec.Stages = append([]Stage{{Name: "all", Op: OpFilter, Tasks: 2, Field: "k", Matches: "^k"}}, spec.Stages...)
			c := spec.Chained()
			spec = &c
		}
		s, got := runSim(t, 1, faults{maxDelay: 2}, spec, data, nil, ExecOptions{})
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("chained %v: output differs from the pass over the valid records\n%s", chained, diffRows(got, want))
		}
		if c := s.store.Latest(wire.RainstormTask{}); c == nil || c.BadRecords != 1 {
			t.Fatalf("chained %v: the source's last checkpoint counts %+v bad records, want 1", chained, c)
		}
	}
}

// TestReaderInvalidUTF8: both ways of reading (every column, and the
// kept columns only) and the lines format refuse a record that is not
// UTF-8, whichever column holds it, with the column in the reason, and go
// on with the next.
func TestReaderInvalidUTF8(t *testing.T) {
	in := "a,b,c\n1,2,3\n4,\xc3,6\n\"7\xff\",8,9\n10,11,12\n"
	for _, keep := range [][]bool{nil, {true, false, false}} {
		rd, err := NewReader(strings.NewReader(in), ReaderOptions{Format: FormatCSV, Header: true})
		if err != nil {
			t.Fatal(err)
		}
		rd.SetKeep(keep)
		var ids []uint64
		var reasons []string
		for {
			rec, err := rd.Next()
			var bad *BadRecordError
			if errors.Is(err, io.EOF) {
				break
			}
			if errors.As(err, &bad) {
				reasons = append(reasons, fmt.Sprintf("%d:%v", bad.Record, bad.Err))
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, rec.ID)
		}
		if !reflect.DeepEqual(ids, []uint64{0, 3}) {
			t.Fatalf("keep %v: records %v, want [0 3]", keep, ids)
		}
		if want := []string{"1:field 2 is not valid UTF-8", "2:field 1 is not valid UTF-8"}; !reflect.DeepEqual(reasons, want) {
			t.Fatalf("keep %v: bad records %q, want %q", keep, reasons, want)
		}
	}
	rd, err := NewReader(strings.NewReader("one\nt\xffo\nthree\n"), ReaderOptions{Format: FormatLines})
	if err != nil {
		t.Fatal(err)
	}
	recs, _, bad := readAll(t, rd)
	if len(recs) != 2 || recs[1].ID != 2 || !reflect.DeepEqual(bad, []uint64{1}) {
		t.Fatalf("lines: records %+v, bad %v", recs, bad)
	}
	if _, err := NewReader(strings.NewReader("a,\xfe\n1,2\n"), ReaderOptions{Format: FormatCSV, Header: true}); err == nil {
		t.Fatal("a header that is not UTF-8 was read")
	}
}
