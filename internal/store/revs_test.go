package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"

	"tempest/internal/testutil"
)

func openRevTemp(t *testing.T) (*RevFile, string) {
	t.Helper()
	path := filepath.Join(testutil.DataDir(t, "store"), "gate.db")
	f, err := OpenRevFile(path, "records", Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, path
}

// Writes of one key land newest-revision-wins, whatever order they commit
// in, and survive a reopen.
func TestRevFileOlderRevisionNeverOverwrites(t *testing.T) {
	f, path := openRevTemp(t)
	if err := f.Put(Rev{Key: "j1", Rev: 6, Value: []byte("six")}); err != nil {
		t.Fatal(err)
	}
	if err := f.Put(Rev{Key: "j1", Rev: 5, Value: []byte("five")}); err != nil {
		t.Fatal(err)
	}
	// Many writers at once, in random order: the highest stays.
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			if err := f.Put(Rev{Key: "j2", Rev: uint64(i), Value: []byte(strconv.Itoa(i))}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := OpenRevFile(path, "records", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for key, want := range map[string]string{"j1": "six", "j2": "49"} {
		got, err := f.Get(key)
		if err != nil || string(got.Value) != want {
			t.Errorf("%s = %q (%d), %v; want %q", key, got.Value, got.Rev, err, want)
		}
	}
	if err := f.Delete("j1", "absent"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Get("j1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted key: %v, want not found", err)
	}
	n := 0
	if err := f.ForEach(func(Rev) error { n++; return nil }); err != nil || n != 1 {
		t.Errorf("ForEach saw %d values (%v), want 1", n, err)
	}
}

// Migrate moves a bucket of unversioned values over in one transaction and
// drops it; a second open finds nothing left to move.
func TestRevFileMigratesALegacyBucket(t *testing.T) {
	path := filepath.Join(testutil.DataDir(t, "store"), "gate.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("old"))
		if err != nil {
			return err
		}
		for i := 1; i <= 3; i++ {
			if err := b.Put([]byte(fmt.Sprintf("k%d", i)), []byte(strconv.Itoa(i*10))); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	f, err := OpenRevFile(path, "records", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rev := func(_, v []byte) (uint64, error) {
		n, err := strconv.Atoi(string(v))
		return uint64(n), err
	}
	if n, err := f.Migrate("old", rev); err != nil || n != 3 {
		t.Fatalf("migrated %d, %v; want 3", n, err)
	}
	if got, err := f.Get("k2"); err != nil || got.Rev != 20 || string(got.Value) != "20" {
		t.Fatalf("k2 = %+v, %v", got, err)
	}
	if n, err := f.Migrate("old", rev); err != nil || n != 0 {
		t.Fatalf("second migrate moved %d, %v; want none", n, err)
	}
}
