package main

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// The benchmark input: n records made by cycling through the records of the
// traffic-signs file (record i is a copy of source record i mod 15,564) with
// OBJECTID = i+1, behind the source's header line (BOM included). A
// record's bytes are the source record's bytes, with only the OBJECTID
// field replaced, so the quoted fields, the doubled quotes and the five
// records with a newline inside a quoted field all come through as they
// are; a copy is therefore exactly what a CSV parser must cope with in the
// original.

const (
	filterField = "Sign_Post"
	filterValue = "Punched Telespar"
	keyField    = "Category"
	idField     = "OBJECTID"
)

// projectFields are what the filter → project pipeline keeps.
var projectFields = []string{idField, keyField}

// srcRecord is one source record's bytes split around its OBJECTID value.
type srcRecord struct {
	before, after []byte // after runs to the end of the record's newline
}

// readSource splits the source file into its header line and records.
// OBJECTID must be the third column of a header, with the first two
// columns never quoted, so a record's OBJECTID lies between its second and
// third comma; every record is checked for that.
func readSource(path string) (header []byte, recs []srcRecord, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	r := csv.NewReader(bytes.NewReader(b))
	r.FieldsPerRecord = -1
	r.ReuseRecord = true
	hdr, err := r.Read()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: header: %w", path, err)
	}
	if idx := slices.Index(hdr, idField); idx != 2 {
		return nil, nil, fmt.Errorf("%s: %s is column %d, want 3", path, idField, idx+1)
	}
	header = b[:r.InputOffset()]
	for {
		start := r.InputOffset()
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		raw := b[start:r.InputOffset()]
		c1 := bytes.IndexByte(raw, ',')
		c2 := c1 + 1 + bytes.IndexByte(raw[c1+1:], ',')
		c3 := c2 + 1 + bytes.IndexByte(raw[c2+1:], ',')
		if c1 < 0 || c2 <= c1 || c3 <= c2 || bytes.IndexByte(raw[:c3], '"') >= 0 || string(raw[c2+1:c3]) != rec[2] {
			line, _ := r.FieldPos(0)
			return nil, nil, fmt.Errorf("%s:%d: %s is not the plain third field of this record", path, line, idField)
		}
		recs = append(recs, srcRecord{before: raw[:c2+1], after: raw[c3:]})
	}
	if len(recs) == 0 {
		return nil, nil, fmt.Errorf("%s: no records", path)
	}
	if last := recs[len(recs)-1].after; last[len(last)-1] != '\n' {
		// Every copy must end its line, or the next copy would join it.
		recs[len(recs)-1].after = append(slices.Clone(last), '\n')
	}
	return header, recs, nil
}

// writeInput writes the n-record input to path.
func writeInput(src, path string, n int) error {
	header, recs, err := readSource(src)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	_, _ = w.Write(header)
	var num []byte
	for i := range n {
		r := recs[i%len(recs)]
		_, _ = w.Write(r.before)
		num = strconv.AppendInt(num[:0], int64(i+1), 10)
		_, _ = w.Write(num)
		_, _ = w.Write(r.after)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// sequential is the reference: one pass over the input with encoding/csv,
// filter then count by key, plus the checks that the input is what it
// claims (its record count and OBJECTIDs 1..n in order).
type sequential struct {
	Records   int
	Multiline int // records with a newline inside a quoted field
	Counts    map[string]int
	// Projected is the filter → project pipeline's output: the kept
	// records' OBJECTID and Category, in input order.
	Projected [][]string
}

func sequentialPass(path string) (*sequential, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	if bom, _ := br.Peek(3); bytes.Equal(bom, []byte("\xEF\xBB\xBF")) {
		_, _ = br.Discard(3)
	}
	r := csv.NewReader(br)
	r.ReuseRecord = true
	hdr, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: header: %w", path, err)
	}
	post, cat, id := slices.Index(hdr, filterField), slices.Index(hdr, keyField), slices.Index(hdr, idField)
	if post < 0 || cat < 0 || id < 0 {
		return nil, fmt.Errorf("%s: header %v lacks %s, %s or %s", path, hdr, filterField, keyField, idField)
	}
	s := &sequential{Counts: map[string]int{}}
	want := []byte{}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		s.Records++
		want = strconv.AppendInt(want[:0], int64(s.Records), 10)
		if rec[id] != string(want) {
			return nil, fmt.Errorf("%s: record %d has %s %q", path, s.Records, idField, rec[id])
		}
		if rec[post] == filterValue {
			s.Counts[rec[cat]]++
			s.Projected = append(s.Projected, []string{rec[id], rec[cat]})
		}
		for _, f := range rec {
			if strings.IndexByte(f, '\n') >= 0 {
				s.Multiline++
				break
			}
		}
	}
	return s, nil
}

// floorPass is the plain Go floor timed against the pipeline: the same
// filter and count with encoding/csv and nothing else (no OBJECTID check).
func floorPass(path string) (map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	if bom, _ := br.Peek(3); bytes.Equal(bom, []byte("\xEF\xBB\xBF")) {
		_, _ = br.Discard(3)
	}
	r := csv.NewReader(br)
	r.ReuseRecord = true
	hdr, err := r.Read()
	if err != nil {
		return nil, err
	}
	post, cat := slices.Index(hdr, filterField), slices.Index(hdr, keyField)
	counts := map[string]int{}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return counts, nil
		}
		if err != nil {
			return nil, err
		}
		if rec[post] == filterValue {
			counts[rec[cat]]++
		}
	}
}

// countRows renders counts as the pipeline's CSV output: key,value rows
// sorted by key behind a key,value header.
func countRows(counts map[string]int) string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	_ = w.Write([]string{"key", "value"})
	for _, k := range keys {
		_ = w.Write([]string{k, strconv.Itoa(counts[k])})
	}
	w.Flush()
	return b.String()
}

// projectRows renders the filter → project output as the pipeline's CSV:
// the projected columns' header, then the rows in input order.
func projectRows(rows [][]string) string {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	_ = w.Write(projectFields)
	_ = w.WriteAll(rows)
	return b.String()
}

// projectExcess checks a filter → project output against the expected rows
// allowing duplicates (at-least-once): every expected row there, in input
// order once duplicates are dropped. It returns how many rows repeat.
func projectExcess(out string, want [][]string) (int, error) {
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		return 0, err
	}
	if len(rows) == 0 || !slices.Equal(rows[0], projectFields) {
		return 0, fmt.Errorf("no %v header", projectFields)
	}
	rows = rows[1:]
	uniq := slices.CompactFunc(slices.Clone(rows), slices.Equal)
	if len(uniq) != len(want) {
		return 0, fmt.Errorf("%d distinct rows, want %d: a record was lost or made up", len(uniq), len(want))
	}
	for i := range want {
		if !slices.Equal(uniq[i], want[i]) {
			return 0, fmt.Errorf("row %d is %q, want %q", i+1, uniq[i], want[i])
		}
	}
	return len(rows) - len(uniq), nil
}

// overCount checks a pipeline's key,value CSV output against the expected
// counts allowing over-counting (at-least-once): every key present, none
// extra, no count below the expected one. It returns the sum of the excess.
func overCount(out string, want map[string]int) (int, error) {
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		return 0, err
	}
	if len(rows) == 0 || !slices.Equal(rows[0], []string{"key", "value"}) {
		return 0, errors.New("no key,value header")
	}
	if len(rows)-1 != len(want) {
		return 0, fmt.Errorf("%d keys, want %d", len(rows)-1, len(want))
	}
	excess := 0
	for _, r := range rows[1:] {
		n, err := strconv.Atoi(r[1])
		w, ok := want[r[0]]
		if err != nil || !ok || n < w {
			return 0, fmt.Errorf("key %q counted %s, want %d: a record was lost", r[0], r[1], w)
		}
		excess += n - w
	}
	return excess, nil
}

// upperProgram is the exec stage of -pipeline exec, written beside the job
// file (tempest submit uploads it with the job).
const upperProgram = "bench-upper.sh"

// writeUpper writes the exec program: it upper-cases the key column of
// every record it is sent. It names the column by the field names the
// worker passes in RAINSTORM_FIELDS, so it does not depend on the input's
// column order.
func writeUpper(path string) error {
	prog := `#!/bin/sh
interactive=
if awk -W version 2>&1 | grep -q mawk; then interactive='-W interactive'; fi
exec awk $interactive -F '\t' -v OFS='\t' -v fields="$RAINSTORM_FIELDS" -v key='` + keyField + `' '
BEGIN { n = split(fields, names, "\t"); for (i = 1; i <= n; i++) if (names[i] == key) col = i
        if (!col) { print "no column " key " in RAINSTORM_FIELDS" > "/dev/stderr"; exit 1 } }
{ $col = toupper($col); print "forward", $0; fflush() }'
`
	return os.WriteFile(path, []byte(prog), 0o755)
}

// upperKeys is counts with its keys upper-cased, as the exec pipeline and
// Miller's toupper count them.
func upperKeys(counts map[string]int) map[string]int {
	out := make(map[string]int, len(counts))
	for k, n := range counts {
		out[strings.ToUpper(k)] += n
	}
	return out
}

// column is name's index in path's CSV header.
func column(path, name string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	if bom, _ := br.Peek(3); bytes.Equal(bom, []byte("\xEF\xBB\xBF")) {
		_, _ = br.Discard(3)
	}
	hdr, err := csv.NewReader(br).Read()
	if err != nil {
		return 0, fmt.Errorf("header of %s: %w", path, err)
	}
	i := slices.Index(hdr, name)
	if i < 0 {
		return 0, fmt.Errorf("no column %q in %s", name, path)
	}
	return i, nil
}
