package rsstore

import (
	"bytes"
	"path/filepath"
	"reflect"
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
