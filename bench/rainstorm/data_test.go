package main

import (
	"bytes"
	"encoding/csv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"tempest/internal/testutil"
)

func source(t *testing.T) string {
	t.Helper()
	return testutil.SharedData(t, "traffic_signs_full.csv")
}

// The generated input is the source's records in a cycle with new
// OBJECTIDs: every other field, the header with its BOM and the records
// with a newline inside a quoted field are as in the source.
func TestWriteInputCopiesRecords(t *testing.T) {
	src := source(t)
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	r := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(raw, []byte("\xEF\xBB\xBF"))))
	orig, err := r.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	hdr, recs := orig[0], orig[1:]

	n := 2*len(recs) + 123 // wraps around twice
	path := filepath.Join(t.TempDir(), "in.csv")
	if err := writeInput(src, path, n); err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(out, raw[:bytes.IndexByte(raw, '\n')+1]) {
		t.Fatal("header line (with its BOM) not kept")
	}
	got, err := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(out, []byte("\xEF\xBB\xBF")))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(got)-1 != n {
		t.Fatalf("%d records, want %d", len(got)-1, n)
	}
	multiline, wantMultiline := 0, 0
	for i, rec := range got[1:] {
		if strings.Contains(strings.Join(recs[i%len(recs)], ""), "\n") {
			wantMultiline++
		}
		want := append([]string(nil), recs[i%len(recs)]...)
		want[2] = strconv.Itoa(i + 1)
		if strings.Join(rec, "\x00") != strings.Join(want, "\x00") {
			t.Fatalf("record %d is %q, want %q", i, rec, want)
		}
		if strings.Contains(strings.Join(rec, ""), "\n") {
			multiline++
		}
	}
	if multiline != wantMultiline || multiline < 10 {
		t.Fatalf("%d records with a newline inside a field, want %d (the source's 5 per copy)", multiline, wantMultiline)
	}
	if strings.Join(got[0], ",") != strings.Join(hdr, ",") {
		t.Fatalf("header %q", got[0])
	}

	// The reference pass agrees with a direct count over the source's
	// records, and checks the OBJECTIDs.
	seq, err := sequentialPass(path)
	if err != nil {
		t.Fatal(err)
	}
	direct := map[string]int{}
	for i := range n {
		rec := recs[i%len(recs)]
		if rec[6] == filterValue {
			direct[rec[8]]++
		}
	}
	if seq.Records != n || countRows(seq.Counts) != countRows(direct) || seq.Multiline != multiline {
		t.Fatalf("sequential pass: %d records, %d multiline, %v; want %d, %d, %v", seq.Records, seq.Multiline, seq.Counts, n, multiline, direct)
	}
	floor, err := floorPass(path)
	if err != nil || countRows(floor) != countRows(direct) {
		t.Fatalf("floor pass %v (%v), want %v", floor, err, direct)
	}

	// Same n, same bytes.
	again := filepath.Join(t.TempDir(), "again.csv")
	if err := writeInput(src, again, n); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(again); !bytes.Equal(b, out) {
		t.Fatal("two inputs of the same size differ")
	}
}

// A record out of sequence is refused by the reference pass, so an input
// that is not what it claims cannot pass as checked.
func TestSequentialPassChecksObjectIDs(t *testing.T) {
	src := source(t)
	path := filepath.Join(t.TempDir(), "in.csv")
	if err := writeInput(src, path, 100); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	b = bytes.Replace(b, []byte(",57,"), []byte(",58,"), 1)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sequentialPass(path); err == nil || !strings.Contains(err.Error(), "record 57") {
		t.Fatalf("err = %v, want record 57 refused", err)
	}
}

func TestOverCount(t *testing.T) {
	want := map[string]int{"a": 2, "b": 3}
	if n, err := overCount("key,value\na,2\nb,5\n", want); err != nil || n != 2 {
		t.Fatalf("over-count = %d, %v", n, err)
	}
	for _, bad := range []string{"key,value\na,1\nb,3\n", "key,value\na,2\n", "key,value\na,2\nb,3\nc,1\n", "a,2\nb,3\n"} {
		if _, err := overCount(bad, want); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}
