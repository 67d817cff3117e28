package rsstore

import (
	"bytes"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"testing"

	bolt "go.etcd.io/bbolt"

	"tempest/wire"
)

// A checkpoint's rows are kept on disk in their flat layout, and rows an
// older store kept as a CBOR array of records still load.
func TestRowsKeptFlatAndLegacyRowsLoad(t *testing.T) {
	dir := t.TempDir()
	task := wire.RainstormTask{Job: "j", Workflow: "pipe", Stage: 1}
	rows := wire.RainstormRows{{ID: 7, Fields: []string{"k", "1"}}, {ID: 9, Fields: []string{"é", ""}}}
	s := openSolo(t, dir)
	c := wire.RainstormCheckpoint{Task: task, Incarnation: 1, Version: 1, Rows: rows}
	if _, _, err := s.storeReplicated(&wire.RainstormReplicate{Term: 1, Checkpoints: []wire.RainstormCheckpoint{c}}, func() string { return "" }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	load := func(when string) {
		t.Helper()
		s := openSolo(t, dir)
		defer s.Close()
		if got := s.Rows(task); !reflect.DeepEqual(got, []wire.RainstormRecord(rows)) {
			t.Fatalf("%s: rows %+v, want %+v", when, got, rows)
		}
	}
	load("flat")

	flat, _ := rows.MarshalCBOR()
	type legacyRecord struct { // rowsRecord as stores before the flat layout wrote it
		Task    wire.RainstormTask     `cbor:"1,keyasint"`
		Version uint64                 `cbor:"2,keyasint"`
		Rows    []wire.RainstormRecord `cbor:"3,keyasint,omitempty"`
		Inc     uint64                 `cbor:"4,keyasint,omitempty"`
	}
	db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRows)
		kvs := map[string][]byte{}
		if err := b.ForEach(func(k, v []byte) error {
			if !bytes.Contains(v, flat) {
				t.Errorf("stored rows %x do not hold the flat layout %x", v, flat)
			}
			var r rowsRecord
			if err := wire.Unmarshal(v, &r); err != nil {
				return err
			}
			old, err := wire.Marshal(&legacyRecord{Task: r.Task, Version: r.Version, Rows: r.Rows, Inc: r.Inc})
			kvs[string(k)] = old
			return err
		}); err != nil {
			return err
		}
		for k, v := range kvs {
			n++
			if err := b.Put([]byte(k), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err != nil || n != 1 {
		t.Fatalf("rewrote %d rows records: %v", n, err)
	}
	load("legacy")
}

// storeRowsCheckpoint stores, as a peer does, version v+1 of a project
// task, publishing n rows of two short fields (an id and a category, as
// filter → project's output).
func storeRowsCheckpoint(tb testing.TB, s *Store, task wire.RainstormTask, v, n int) {
	tb.Helper()
	rows := make(wire.RainstormRows, n)
	for i := range rows {
		id := uint64(v*n + i)
		rows[i] = wire.RainstormRecord{ID: id, Fields: []string{strconv.FormatUint(id+1, 10), "Telespar " + strconv.Itoa(i%7)}}
	}
	d := wire.RainstormDelta{BaseVersion: uint64(v), BaseIncarnation: 1,
		Checkpoint: wire.RainstormCheckpoint{Task: task, Incarnation: 1, Version: uint64(v + 1), Rows: rows}}
	if v == 0 {
		d.BaseIncarnation = 0
	}
	if n, missing, err := s.storeReplicated(&wire.RainstormReplicate{Term: 1, Deltas: []wire.RainstormDelta{d}}, func() string { return "" }); err != nil || n != 1 || len(missing) > 0 {
		tb.Fatalf("checkpoint %d: stored %d, missing %v, %v", v+1, n, missing, err)
	}
}

// BenchmarkStoredRows: what a record output's rows cost a manager.
// store: a peer storing checkpoints of 4k rows each (the rows made in the
// loop, as a message's decode makes them). gc: one garbage collection
// with half a million rows held — every cycle of a manager's run traces
// what the store holds, which for rows kept as records was three
// pointers a row.
func BenchmarkStoredRows(b *testing.B) {
	task := wire.RainstormTask{Job: "j", Workflow: "project", Stage: 1}
	const perCkpt = 4096
	b.Run("store", func(b *testing.B) {
		s, err := Open(b.TempDir(), soloHost{}, Config{NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		b.ReportAllocs()
		v := 0
		for ; b.Loop(); v++ {
			storeRowsCheckpoint(b, s, task, v, perCkpt)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(v*perCkpt), "ns/row")
	})
	b.Run("gc-with-512k-rows", func(b *testing.B) {
		s, err := Open(b.TempDir(), soloHost{}, Config{NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		for v := range 128 {
			storeRowsCheckpoint(b, s, task, v, perCkpt)
		}
		runtime.GC()
		for b.Loop() {
			runtime.GC()
		}
		if got := len(s.Rows(task)); got != 128*perCkpt {
			b.Fatalf("%d rows held, want %d", got, 128*perCkpt)
		}
	})
}
