package rainstorm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"testing"

	"tempest/wire"
)

// readRanges reads data as n ranges in turn, each found afresh and read
// from its start to its end, as n source tasks would.
func readRanges(t *testing.T, data []byte, n int, opts ReaderOptions) (recs []Record, bad []uint64) {
	t.Helper()
	for k := range n {
		rng, header, err := FindRange(bytes.NewReader(data), int64(len(data)), k, n, opts)
		if err != nil {
			t.Fatalf("range %d of %d: %v", k, n, err)
		}
		src := &RangeSource{Src: ResumeReader(bytes.NewReader(data[rng.Start.Offset:]), rng.Start, opts, header), End: rng.End}
		for {
			rec, err := src.Next()
			var be *BadRecordError
			switch {
			case errors.Is(err, io.EOF):
			case errors.As(err, &be):
				bad = append(bad, be.Record)
				continue
			case err != nil:
				t.Fatalf("range %d of %d: %v", k, n, err)
			default:
				recs = append(recs, rec)
				continue
			}
			break
		}
	}
	return recs, bad
}

// FuzzSplitRanges: however the input is split, the ranges read in turn
// give the records and bad records of one whole read, with the same input
// ids (so an id does not depend on the split), whatever quoted newlines,
// malformed records, empty lines, a BOM or a missing header field count
// put near a range's search offset.
func FuzzSplitRanges(f *testing.F) {
	f.Add([]byte("a,b\n1,2\n\"x\ny\",3\n\"p,\nq\nr\",4\n5,6\n"), true, uint8(3))
	f.Add([]byte("\xEF\xBB\xBF\"a\"\"b\",c\r\nd,e\n\n\nf,\"g\n\"\nh"), false, uint8(4))
	f.Add([]byte("1,2\n3\n\"4\n5\",6\n7,8\n9,\"\n\n\n\",x\ny,z\n"), false, uint8(5))
	f.Add([]byte("one\ntwo\n\nthree"), false, uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, header bool, n uint8) {
		opts := ReaderOptions{Format: FormatCSV, Header: header}
		if n&0x80 != 0 {
			opts = ReaderOptions{Format: FormatLines}
		}
		rd, err := NewReader(bytes.NewReader(data), opts)
		if err != nil {
			return
		}
		want, _, wantBad := readAll(t, rd)
		for split := 1; split <= 1+int(n&7); split++ {
			got, gotBad := readRanges(t, data, split, opts)
			if !slices.EqualFunc(got, want, func(a, b Record) bool { return a.ID == b.ID && slices.Equal(a.Fields, b.Fields) }) {
				t.Fatalf("split %d: %d records, whole read %d (or they differ)", split, len(got), len(want))
			}
			if !slices.Equal(gotBad, wantBad) {
				t.Fatalf("split %d: bad records %v, whole read %v", split, gotBad, wantBad)
			}
		}
	})
}

// TestSplitRangesOnSigns: the traffic-signs file, whose quoted fields hold
// commas, read in 1 to 8 ranges is the whole read, and every range but
// the empty ones holds records.
func TestSplitRangesOnSigns(t *testing.T) {
	data := sharedData(t, fullCSV)
	opts := ReaderOptions{Format: FormatCSV, Header: true}
	rd, err := NewReader(bytes.NewReader(data), opts)
	if err != nil {
		t.Fatal(err)
	}
	want, _, wantBad := readAll(t, rd)
	for n := 1; n <= 8; n++ {
		got, gotBad := readRanges(t, data, n, opts)
		if len(got) != len(want) || !slices.Equal(gotBad, wantBad) {
			t.Fatalf("split %d: %d records and bad %v, whole read %d and %v", n, len(got), gotBad, len(want), wantBad)
		}
		for i := range got {
			if got[i].ID != want[i].ID || !slices.Equal(got[i].Fields, want[i].Fields) {
				t.Fatalf("split %d: record %d differs", n, i)
			}
		}
	}
}

// TestSimSplitSourceEveryRangeSends: in a split pipeline under faults,
// every range's source task reads a part of the input (none is empty on
// this file) and checkpoints progress past its range's start (its final
// checkpoint need not be durable when the sinks finish), and the output
// is the sequential pass.
func TestSimSplitSourceEveryRangeSends(t *testing.T) {
	for _, c := range simCases(t) {
		if c.name != "filter-count-split3" && c.name != "filter-count-chained-split3" {
			continue
		}
		s, got := runSim(t, 7, heavy, c.spec(true), c.data, nil, ExecOptions{})
		if !slices.EqualFunc(got, c.expect, func(a, b Record) bool { return a.ID == b.ID && slices.Equal(a.Fields, b.Fields) }) {
			t.Fatalf("%s: output differs from the sequential pass\n%s", c.name, diffRows(got, c.expect))
		}
		for k := range 3 {
			ck := s.store.Latest(wire.RainstormTask{Index: k})
			rng := s.findRange(k)
			if rng.End >= 0 && rng.End <= rng.Start.Offset {
				t.Fatalf("%s: range %d is empty: %+v", c.name, k, rng)
			}
			if ck == nil || ck.Source == nil || ck.Source.Record <= rng.Start.Record {
				t.Fatalf("%s: source %d (range from record %d) checkpointed no progress: %+v", c.name, k, rng.Start.Record, ck)
			}
		}
	}
}

// BenchmarkFindRange measures what the second of two ranges of the
// 1,000,000-record file pays before its first record: the scan of the
// file's first half for its start, against reading that half whole.
func BenchmarkFindRange(b *testing.B) {
	path := millionCSV(b, b.TempDir())
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	opts := ReaderOptions{Format: FormatCSV, Header: true}
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := FindRange(bytes.NewReader(data), int64(len(data)), 1, 2, opts); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(data)/2)/1e6/(b.Elapsed().Seconds()/float64(b.N)), "MB/s")
	})
	b.Run("read", func(b *testing.B) {
		for b.Loop() {
			rd, err := NewReader(bytes.NewReader(data[:len(data)/2]), opts)
			if err != nil {
				b.Fatal(err)
			}
			for {
				if _, err := rd.Next(); errors.Is(err, io.EOF) {
					break
				}
			}
		}
		b.ReportMetric(float64(len(data)/2)/1e6/(b.Elapsed().Seconds()/float64(b.N)), "MB/s")
	})
}

// TestIdentifyRange: a range's identity covers what its records depend on
// and nothing else. A change in another range's records leaves it alone;
// a change in its own records, in the tail of its last record past its
// search end, in the header, or one that moves its start changes it, and
// SameFile then refuses the resumed range.
func TestIdentifyRange(t *testing.T) {
	opts := ReaderOptions{Format: FormatCSV, Header: true}
	base := []byte("h,v\n1,\"a\nb\"\n2,x\n3,y\n4,z\n5,w\n6,\"long\nlong\nlong\"\n7,u\n8,t\n9,s\n")
	ids := func(data []byte) []*wire.RainstormFileID {
		t.Helper()
		var out []*wire.RainstormFileID
		for k := range 2 {
			rng, header, err := FindRange(bytes.NewReader(data), int64(len(data)), k, 2, opts)
			if err != nil {
				t.Fatal(err)
			}
			id, err := IdentifyRange(context.Background(), bytes.NewReader(data), int64(len(data)), rng, opts, header)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, id)
		}
		return out
	}
	was := ids(base)
	if was[0].Range.To != was[1].Range.From || was[1].Range.To != int64(len(base)) {
		t.Fatalf("the ranges' bytes do not tile the input: %+v %+v", was[0].Range, was[1].Range)
	}
	// Range 0 of this input ends inside record 6's quoted field: its
	// search end falls there and the record is range 0's.
	end := rangeOffset(int64(len(base)), 1, 2)
	if tail := bytes.Index(base, []byte("6,")); int64(tail) >= end || was[0].Range.To <= end {
		t.Fatalf("test input: record 6 at %d, search end %d, range 0 to %d", tail, end, was[0].Range.To)
	}
	change := func(old, new string) []byte {
		if !bytes.Contains(base, []byte(old)) {
			t.Fatalf("%q not in the input", old)
		}
		return bytes.Replace(base, []byte(old), []byte(new), 1)
	}
	for _, c := range []struct {
		name         string
		data         []byte
		same0, same1 bool
	}{
		{"a record of range 0", change("2,x", "2,X"), false, true},
		{"a record of range 1", change("7,u", "7,U"), true, false},
		{"range 0's last record past its search end", change("long\"", "lonG\""), false, true},
		{"the header", change("h,v", "h,V"), false, false},
		{"a record of range 0 one byte longer", change("2,x", "2,xx"), false, false},
	} {
		now := ids(c.data)
		for k, same := range []bool{c.same0, c.same1} {
			err := SameFile("/in", was[k], now[k])
			if got := err == nil; got != same {
				t.Errorf("%s: range %d same %v, want %v (%v)", c.name, k, got, same, err)
			}
		}
	}
	// An identity recorded for the whole file is not a range's.
	whole := &wire.RainstormFileID{Size: was[0].Size, SHA256: was[0].SHA256}
	if err := SameFile("/in", whole, was[0]); err == nil {
		t.Fatal("a whole-file identity matched a range's")
	}
}

// BenchmarkIdentify: what a `path:` source pays before its first record to
// identify the 1,000,000-record file, whole (one source) against each of
// two ranges (its part's hash, and the scan to its last record's end or,
// for the second, to its start).
func BenchmarkIdentify(b *testing.B) {
	path := millionCSV(b, b.TempDir())
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		b.Fatal(err)
	}
	size := st.Size()
	opts := ReaderOptions{Format: FormatCSV, Header: true}
	b.Run("whole", func(b *testing.B) {
		for b.Loop() {
			if _, err := IdentifyFile(context.Background(), f); err != nil {
				b.Fatal(err)
			}
		}
	})
	for k := range 2 {
		b.Run(fmt.Sprintf("range-%d-of-2", k+1), func(b *testing.B) {
			for b.Loop() {
				rng, header, err := FindRange(io.NewSectionReader(f, 0, size), size, k, 2, opts)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := IdentifyRange(context.Background(), f, size, rng, opts, header); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
