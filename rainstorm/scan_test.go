package rainstorm

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"testing"
)

// readerAt starts a reader of data where first (a Reader of it just
// made) stands, with a read buffer of size bytes, at least 4096 (below it
// encoding/csv would read ahead through a buffer of its own), so a record
// can be longer than it.
func readerAt(data []byte, first *Reader, opts ReaderOptions, size int) *Reader {
	br := bufio.NewReaderSize(bytes.NewReader(data[first.pos.Offset:]), size)
	rd := newReader(br, opts.Format, first.pos.Offset, first.pos)
	rd.header, rd.fields = first.header, first.fields
	return rd
}

// boundaries reads data whole with Next: every position it reports, the
// one at the end included.
func boundaries(t *testing.T, rd *Reader) []Position {
	t.Helper()
	pos := []Position{rd.Pos()}
	var bad *BadRecordError
	for {
		_, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return pos
		}
		if err != nil && !errors.As(err, &bad) {
			t.Fatal(err)
		}
		pos = append(pos, rd.Pos())
	}
}

// FuzzScanTo: for every target offset, ScanTo stops at the boundary
// reading record by record would (the first at or past the target, ids
// and field count included), or at the end of input after the last
// record, whether the records fit the read buffer or not.
func FuzzScanTo(f *testing.F) {
	f.Add([]byte("a,b\n1,2\n\"x\ny\",3\n\"p,\nq\nr\",4\n5,6\n"), uint8(1))
	f.Add([]byte("\xEF\xBB\xBF\"a\"\"b\",c\r\nd,e\n\n\nf,\"g\n\"\nh"), uint8(0))
	f.Add([]byte("1,2\n3\n\"4\n5\",6\n7,8\n9,\"\n\n\n\",x\ny,z\n"), uint8(2))
	f.Add([]byte("a\"b,\"x\ny\",z\n1,2\n\"q\"r,\"s\nt\"\n"), uint8(0))
	f.Add([]byte("h,i\na\"b\nc,d\n\"e\nf,g\n"), uint8(1))
	f.Add([]byte("x,\"a\"\r\r\n\"b\"\r,c\n\r\n\r\"c\"\r"), uint8(4))
	f.Add([]byte("one\ntwo\n\nthree"), uint8(0x80))
	f.Fuzz(func(t *testing.T, data []byte, mode uint8) {
		opts := ReaderOptions{Format: FormatCSV, Header: mode&1 != 0}
		if mode&0x80 != 0 {
			opts = ReaderOptions{Format: FormatLines}
		}
		size := 4096
		if mode&2 != 0 {
			// A record longer than the buffer, among the others.
			size = 4096
			y := bytes.Repeat([]byte("y"), size*3/4)
			long := slices.Concat([]byte("\""), y, []byte("\n"), y, []byte("\",z\n"))
			data = slices.Concat(data[:len(data)/2], long, data[len(data)/2:])
		}
		first, err := NewReader(bytes.NewReader(data), opts)
		if err != nil {
			return // no header: nothing to scan
		}
		want := boundaries(t, readerAt(data, first, opts, size))
		// Every offset of a small input; of a large one, around each
		// boundary.
		var targets []int64
		if len(data) <= 512 {
			for o := want[0].Offset; o <= int64(len(data))+1; o++ {
				targets = append(targets, o)
			}
		} else {
			for _, p := range want {
				targets = append(targets, p.Offset-1, p.Offset, p.Offset+1)
			}
		}
		if k := len(targets) / 100; k > 1 { // each reads on to the end: a sample
			for i := range len(targets) / k {
				targets[i] = targets[i*k]
			}
			targets = targets[:len(targets)/k]
		}
		for _, target := range targets {
			rd := readerAt(data, first, opts, size)
			err := rd.ScanTo(target)
			// The first boundary the whole read reports at or past the
			// target, or the last one.
			w, atEnd := want[len(want)-1], true
			for _, p := range want {
				if p.Offset >= target {
					w, atEnd = p, false
					break
				}
			}
			switch {
			case atEnd && !errors.Is(err, io.EOF):
				t.Fatalf("target %d: err %v, want io.EOF at %+v", target, err, w)
			case !atEnd && err != nil:
				t.Fatalf("target %d: %v, want %+v", target, err, w)
			}
			if got := rd.Pos(); got != w {
				t.Fatalf("target %d: at %+v, reading record by record %+v", target, got, w)
			}
			// The reader reads on from there as the whole read does.
			if !atEnd {
				rest := boundaries(t, rd)
				if len(rest) == 0 || rest[len(rest)-1] != want[len(want)-1] {
					t.Fatalf("target %d: reading on ends at %+v, whole read %+v", target, rest, want[len(want)-1])
				}
			}
		}
	})
}

// BenchmarkScanTo: skipping the first half of the 1,000,000-record file
// record by record with Next (keeping no column) against ScanTo.
func BenchmarkScanTo(b *testing.B) {
	data := millionData(b)
	opts := ReaderOptions{Format: FormatCSV, Header: true}
	half := int64(len(data) / 2)
	b.Run("next", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rd, err := NewReader(bytes.NewReader(data), opts)
			if err != nil {
				b.Fatal(err)
			}
			rd.SetKeep([]bool{})
			rd.ReuseFields()
			for rd.Pos().Offset < half {
				if _, err := rd.Next(); err != nil && !errors.As(err, new(*BadRecordError)) {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(half)/1e6/(b.Elapsed().Seconds()/float64(b.N)), "MB/s")
	})
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rd, err := NewReader(bytes.NewReader(data), opts)
			if err != nil {
				b.Fatal(err)
			}
			if err := rd.ScanTo(half); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(half)/1e6/(b.Elapsed().Seconds()/float64(b.N)), "MB/s")
	})
}

func millionData(b *testing.B) []byte {
	b.Helper()
	data, err := os.ReadFile(millionCSV(b, b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	return data
}
