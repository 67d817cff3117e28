package workflow

import (
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"unicode/utf8"
)

// Data files: an http workflow may name a CSV file whose header row names
// columns that steps use as {{data.column}}. The job-file parser reads the
// file (on the client, relative to the job file) and the whole text travels
// inside the params, so workers need no file access and a re-dispatched
// workflow reads the same rows.

// MaxDataSize bounds the data-file bytes one job file may ship, all
// workflows together (a file used by two workflows counts twice: each
// carries its own copy). Params travel in every dispatch and are kept by
// every manager, so this is a few MiB, not a database.
const MaxDataSize = 4 << 20

// maxDataRows bounds the per-row slices a runner holds: a 4 MiB file of
// one-byte rows would otherwise cost some 50 MiB of slice headers.
const maxDataRows = 1 << 20

// DataMode says which row an iteration gets.
type DataMode uint8

// Data modes. The zero value is sequential, so params that carry no mode
// mean the default.
const (
	// DataSequential hands rows out in file order from one counter shared by
	// every VU of the run, starting over after the last row.
	DataSequential DataMode = iota
	// DataRandom picks a uniformly random row per iteration.
	DataRandom
	// DataPerVU gives VU n row (n-1) mod rows, the same row for all of its
	// iterations: one user account per VU.
	DataPerVU
)

func (m DataMode) String() string {
	switch m {
	case DataSequential:
		return "sequential"
	case DataRandom:
		return "random"
	case DataPerVU:
		return "per_vu"
	default:
		return fmt.Sprintf("DataMode(%d)", uint8(m))
	}
}

func parseDataMode(s string) (DataMode, bool) {
	for _, m := range []DataMode{DataSequential, DataRandom, DataPerVU} {
		if s == m.String() {
			return m, true
		}
	}
	return 0, false
}

// HTTPData is a CSV data file shipped in an http workflow's params.
type HTTPData struct {
	// File is the name the job file gave, for messages only.
	File string   `cbor:"1,keyasint"`
	Mode DataMode `cbor:"2,keyasint,omitempty"`
	// CSV is the file's text: a header row of unique column names, then at
	// least one row with as many fields. Empty when Blob names the file
	// instead: the worker fills it in from the blob before running.
	CSV string `cbor:"3,keyasint"`
	// Blob is the file's SHA-256 (hex) when it travels as a blob stored by
	// the managers (see blobs.go) rather than inside the params, so shards
	// and retries share one copy.
	Blob string `cbor:"13,keyasint,omitempty"`
}

// dataTable is a parsed data file.
type dataTable struct {
	file    string // as the job file names it, for messages
	columns []string
	index   map[string]int
	rows    [][]string
}

// parseDataCSV parses a data file's text. Errors name the CSV line, and the
// caller adds the file and the job-file field.
func parseDataCSV(file, text string) (*dataTable, error) {
	if len(text) > MaxDataSize {
		return nil, fmt.Errorf("is %d bytes, more than the %d allowed", len(text), MaxDataSize)
	}
	if !utf8.ValidString(text) {
		return nil, errors.New("is not UTF-8 text")
	}
	// Spreadsheets often save CSV with a byte-order mark, which would
	// otherwise become part of the first column's name.
	text = strings.TrimPrefix(text, "\uFEFF")
	r := csv.NewReader(strings.NewReader(text))
	// FieldsPerRecord 0: every row must have as many fields as the header.
	header, err := r.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("is empty; want a header row naming the columns, then rows")
		}
		return nil, csvError(err)
	}
	t := &dataTable{file: file, columns: header, index: make(map[string]int, len(header))}
	for i, name := range header {
		switch {
		case name == "":
			return nil, fmt.Errorf("line 1: column %d has no name; the first row must name every column", i+1)
		case strings.ContainsAny(name, " \t{}"):
			return nil, fmt.Errorf("line 1: column name %q has spaces or braces, so {{data.%s}} cannot name it", truncate(name, 40), truncate(name, 40))
		}
		if j, dup := t.index[name]; dup {
			return nil, fmt.Errorf("line 1: duplicate column %q (columns %d and %d)", truncate(name, 40), j+1, i+1)
		}
		t.index[name] = i
	}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, csvError(err)
		}
		if len(t.rows) == maxDataRows {
			return nil, fmt.Errorf("has more than %d rows", maxDataRows)
		}
		t.rows = append(t.rows, rec)
	}
	if len(t.rows) == 0 {
		return nil, errors.New("has a header row but no rows")
	}
	return t, nil
}

// csvError turns csv.ParseError's "record on line 3: wrong number of
// fields" into "line 3: wrong number of fields".
func csvError(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		if errors.Is(pe.Err, csv.ErrFieldCount) {
			return fmt.Errorf("line %d: %w", pe.Line, pe.Err)
		}
		return fmt.Errorf("line %d, column %d: %w", pe.Line, pe.Column, pe.Err)
	}
	return err
}

// columnList names a table's columns for messages.
func (t *dataTable) columnList() string {
	return truncate(strings.Join(t.columns, ", "), 200)
}

// dataRows hands rows to iterations per a data mode. It is shared by every
// VU of a run.
type dataRows struct {
	table *dataTable
	mode  DataMode
	next  atomic.Uint64 // sequential: the next row, before the modulo
}

// row returns the row for an iteration of vu (0-based). A nil dataRows (no
// data file) returns nil.
func (d *dataRows) row(vu int) []string {
	if d == nil {
		return nil
	}
	n := len(d.table.rows)
	switch d.mode {
	case DataPerVU:
		return d.table.rows[vu%n]
	case DataRandom:
		return d.table.rows[rand.IntN(n)] // load, not secrets: see template.render
	default:
		return d.table.rows[(d.next.Add(1)-1)%uint64(n)]
	}
}

// validate checks the data params and returns the table for checking the
// steps' {{data.x}} references, or nil when there is none to check against
// (no data, or data whose problem is already reported).
func (d *HTTPData) validate(errs *FieldErrors) *dataTable {
	if d == nil {
		return nil
	}
	if !slices.Contains([]DataMode{DataSequential, DataRandom, DataPerVU}, d.Mode) {
		errs.add("data.mode", "must be sequential, random or per_vu, got %s", d.Mode)
	}
	if d.Blob != "" {
		if err := checkBlobSum(d.Blob); err != nil {
			errs.add("data.file", "data file %q: %v", truncate(d.File, 80), err)
			return nil
		}
		if d.CSV == "" {
			// Checked in full where the job file was parsed, with the text.
			return nil
		}
		if sum := sha256.Sum256([]byte(d.CSV)); hex.EncodeToString(sum[:]) != d.Blob {
			errs.add("data.file", "data file %q does not match its blob %s", truncate(d.File, 80), d.Blob)
			return nil
		}
	}
	t, err := parseDataCSV(d.File, d.CSV)
	if err != nil {
		errs.add("data.file", "data file %q %v", truncate(d.File, 80), err)
		return nil
	}
	return t
}
