package rainstorm

import (
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"tempest/internal/testutil"
)

// The shared traffic-signs files (testutil.SharedData finds them).
const (
	fullCSV = "traffic_signs_full.csv"
	tenkCSV = "traffic_signs_10k.csv"
)

// sharedData reads one of the shared traffic-signs files: skipped where
// the data is not installed, failed where CI is set.
func sharedData(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(testutil.SharedData(tb, name))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// readAll reads every record and the boundary before each.
func readAll(t testing.TB, rd *Reader) (recs []Record, pos []Position, bad []uint64) {
	t.Helper()
	for {
		p := rd.Pos()
		rec, err := rd.Next()
		var be *BadRecordError
		switch {
		case errors.Is(err, io.EOF):
			return recs, pos, bad
		case errors.As(err, &be):
			bad = append(bad, be.Record)
			continue
		case err != nil:
			t.Fatal(err)
		}
		recs = append(recs, rec)
		pos = append(pos, p)
	}
}

func TestReaderTrafficSignsFull(t *testing.T) {
	data := sharedData(t, fullCSV)
	rd, err := NewReader(bytes.NewReader(data), ReaderOptions{Format: FormatCSV, Header: true})
	if err != nil {
		t.Fatal(err)
	}
	if h := rd.Header(); len(h) != 20 || h[0] != "X" || h[2] != "OBJECTID" || h[8] != "Category" {
		t.Fatalf("header = %q (the BOM must not stick to X)", h)
	}
	recs, _, bad := readAll(t, rd)
	if len(recs) != 15564 || len(bad) != 0 {
		t.Fatalf("%d records, bad %v; want 15564 and none", len(recs), bad)
	}
	var multiline []string
	for i, r := range recs {
		if r.ID != uint64(i) || len(r.Fields) != 20 {
			t.Fatalf("record %d: id %d, %d fields", i, r.ID, len(r.Fields))
		}
		if slices.ContainsFunc(r.Fields, func(f string) bool { return strings.Contains(f, "\n") }) {
			multiline = append(multiline, r.Fields[2])
		}
	}
	if want := []string{"3959", "4363", "11638", "12828", "12898"}; !slices.Equal(multiline, want) {
		t.Fatalf("records with a newline in a field: OBJECTID %v, want %v", multiline, want)
	}
	if got := rd.Pos(); got.Record != 15564 || got.Offset != int64(len(data)) {
		t.Fatalf("end position %+v, want record 15564 at offset %d", got, len(data))
	}
}

func TestReaderTrafficSigns10kNoHeader(t *testing.T) {
	data := sharedData(t, tenkCSV)
	rd, err := NewReader(bytes.NewReader(data), ReaderOptions{Format: FormatCSV})
	if err != nil {
		t.Fatal(err)
	}
	recs, _, bad := readAll(t, rd)
	if len(recs) != 9998 || len(bad) != 0 || rd.Header() != nil {
		t.Fatalf("%d records, bad %v, header %q; want 9998, none, nil", len(recs), bad, rd.Header())
	}
	if recs[0].Fields[2] != "1" {
		t.Fatalf("first OBJECTID %s, want 1", recs[0].Fields[2])
	}
	// The same records as the first 9,998 of the full file.
	full, err := NewReader(bytes.NewReader(sharedData(t, fullCSV)), ReaderOptions{Format: FormatCSV, Header: true})
	if err != nil {
		t.Fatal(err)
	}
	frecs, _, _ := readAll(t, full)
	for i := range recs {
		if !slices.Equal(recs[i].Fields, frecs[i].Fields) {
			t.Fatalf("record %d differs from the full file's", i)
		}
	}
}

// TestReaderResume resumes at every 97th recorded boundary (997th under
// the race detector) (and at each
// record with a quoted newline) and checks the rest reads the same: same
// ids, fields and later boundaries.
func TestReaderResume(t *testing.T) {
	for _, tc := range []struct {
		path   string
		header bool
	}{{fullCSV, true}, {tenkCSV, false}} {
		data := sharedData(t, tc.path)
		opts := ReaderOptions{Format: FormatCSV, Header: tc.header}
		rd, err := NewReader(bytes.NewReader(data), opts)
		if err != nil {
			t.Fatal(err)
		}
		recs, pos, _ := readAll(t, rd)
		step := 97
		if raceEnabled {
			step = 997
		}
		for i := 0; i < len(recs); i++ {
			nl := slices.ContainsFunc(recs[i].Fields, func(f string) bool { return strings.Contains(f, "\n") })
			if i%step != 0 && !nl && i != len(recs)-1 {
				continue
			}
			p := pos[i]
			rr := ResumeReader(bytes.NewReader(data[p.Offset:]), p, opts, rd.Header())
			got, gotPos, _ := readAll(t, rr)
			if len(got) != len(recs)-i {
				t.Fatalf("%s: resume at %+v read %d records, want %d", tc.path, p, len(got), len(recs)-i)
			}
			for j := range got {
				if got[j].ID != recs[i+j].ID || !slices.Equal(got[j].Fields, recs[i+j].Fields) || gotPos[j] != pos[i+j] {
					t.Fatalf("%s: resume at %+v: record %d differs", tc.path, p, i+j)
				}
			}
		}
	}
}

func TestReaderBadRecords(t *testing.T) {
	in := "\xEF\xBB\xBFa,b,c\n1,2,3\n4,5\n\"x\"y,1,2\n7,8,9\n\"q,\nr\",\"\"\"\",z\n"
	rd, err := NewReader(strings.NewReader(in), ReaderOptions{Format: FormatCSV, Header: true})
	if err != nil {
		t.Fatal(err)
	}
	recs, _, bad := readAll(t, rd)
	if !slices.Equal(bad, []uint64{1, 2}) {
		t.Fatalf("bad records %v, want [1 2]", bad)
	}
	if len(recs) != 3 || recs[1].ID != 3 || recs[2].ID != 4 || !slices.Equal(recs[2].Fields, []string{"q,\nr", `"`, "z"}) {
		t.Fatalf("records %+v", recs)
	}
}

func TestReaderLines(t *testing.T) {
	in := "\xEF\xBB\xBFone\r\n\ntwo, \"x\nthree"
	rd, err := NewReader(strings.NewReader(in), ReaderOptions{Format: FormatLines})
	if err != nil {
		t.Fatal(err)
	}
	recs, pos, _ := readAll(t, rd)
	var got []string
	for _, r := range recs {
		got = append(got, r.Fields[0])
	}
	if want := []string{"one", "", `two, "x`, "three"}; !slices.Equal(got, want) {
		t.Fatalf("lines %q, want %q", got, want)
	}
	rr := ResumeReader(strings.NewReader(in[pos[2].Offset:]), pos[2], ReaderOptions{Format: FormatLines}, nil)
	if rec, err := rr.Next(); err != nil || rec.ID != 2 || rec.Fields[0] != `two, "x` {
		t.Fatalf("resumed: %+v, %v", rec, err)
	}
}

func TestReaderEmptyWithHeader(t *testing.T) {
	if _, err := NewReader(strings.NewReader(""), ReaderOptions{Format: FormatCSV, Header: true}); err == nil {
		t.Fatal("an empty input with a header expected gave no error")
	}
}

// FuzzReader checks, on any bytes, that the reader never fails other than
// by bad records, and that resuming at any reported boundary reads exactly
// what continuing would have.
func FuzzReader(f *testing.F) {
	f.Add([]byte("a,b\n1,2\n\"x\ny\",3\n"), true)
	f.Add([]byte("\xEF\xBB\xBF\"a\"\"b\",c\r\nd,e"), false)
	f.Add([]byte("a,\"b\nc\n"), false)
	f.Fuzz(func(t *testing.T, data []byte, header bool) {
		opts := ReaderOptions{Format: FormatCSV, Header: header}
		if len(data) > 0 && data[0]&1 == 1 {
			opts.Format = FormatLines
		}
		rd, err := NewReader(bytes.NewReader(data), opts)
		if err != nil {
			return
		}
		recs, pos, bad := readAll(t, rd)
		for i := range recs {
			if pos[i].Offset > int64(len(data)) || pos[i].Record != recs[i].ID {
				t.Fatalf("position %+v for record %d", pos[i], recs[i].ID)
			}
			rr := ResumeReader(bytes.NewReader(data[pos[i].Offset:]), pos[i], opts, rd.Header())
			got, _, gotBad := readAll(t, rr)
			if len(got) != len(recs)-i {
				t.Fatalf("resume at %+v: %d records, want %d", pos[i], len(got), len(recs)-i)
			}
			for j := range got {
				if got[j].ID != recs[i+j].ID || !slices.Equal(got[j].Fields, recs[i+j].Fields) {
					t.Fatalf("resume at %+v: record %d differs", pos[i], recs[i+j].ID)
				}
			}
			if len(gotBad) > len(bad) {
				t.Fatalf("resume found more bad records")
			}
		}
	})
}

// BenchmarkReader measures records/s of the CSV reader over the full
// traffic-signs file (15,564 records, 2.8 MB) read from memory.
func BenchmarkReader(b *testing.B) {
	data := sharedData(b, fullCSV)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	var n int
	for b.Loop() {
		rd, err := NewReader(bytes.NewReader(data), ReaderOptions{Format: FormatCSV, Header: true})
		if err != nil {
			b.Fatal(err)
		}
		for {
			_, err := rd.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkReaderKept is BenchmarkReader reading three of the twenty
// columns (OBJECTID, Sign_Post, Category: filter → project's) into
// records it keeps, as a source keeps a segment's records (-benchmem: the
// allocations a record costs).
func BenchmarkReaderKept(b *testing.B) {
	data := sharedData(b, fullCSV)
	keep := make([]bool, 20)
	keep[0], keep[5], keep[9] = true, true, true
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	var n int
	kept := make([]Record, 0, 16_000)
	for b.Loop() {
		rd, err := NewReader(bytes.NewReader(data), ReaderOptions{Format: FormatCSV, Header: true})
		if err != nil {
			b.Fatal(err)
		}
		rd.SetKeep(keep)
		kept = kept[:0]
		for {
			rec, err := rd.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			kept = append(kept, rec)
			n++
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkReadSegment: the traffic-signs file read in segments of
// DefaultSegmentRecords as a record output's source reads it (three kept
// columns), per segment (-benchmem).
func BenchmarkReadSegment(b *testing.B) {
	data := sharedData(b, fullCSV)
	keep := make([]bool, 20)
	keep[0], keep[5], keep[9] = true, true, true
	b.ReportAllocs()
	segs := 0
	for b.Loop() {
		rd, err := NewReader(bytes.NewReader(data), ReaderOptions{Format: FormatCSV, Header: true})
		if err != nil {
			b.Fatal(err)
		}
		rd.SetKeep(keep)
		for i := uint64(0); ; i++ {
			seg, err := ReadSegment(rd, i, DefaultSegmentRecords)
			if err != nil {
				b.Fatal(err)
			}
			segs++
			if seg.EOF {
				break
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(segs), "ns/segment")
}

// readShared reads every record of a shared data file.
func readShared(t testing.TB, path string, header bool) []Record {
	t.Helper()
	rd, err := NewReader(bytes.NewReader(sharedData(t, path)), ReaderOptions{Format: FormatCSV, Header: header})
	if err != nil {
		t.Fatal(err)
	}
	recs, _, _ := readAll(t, rd)
	return recs
}
