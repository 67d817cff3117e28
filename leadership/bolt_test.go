package leadership

import (
	"errors"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"tempest/internal/testutil"
)

func TestBoltStorageSurvivesReopen(t *testing.T) {
	path := filepath.Join(testutil.DataDir(t, "n1"), "leadership.db")
	st, err := OpenBoltStorage(path)
	if err != nil {
		t.Fatal(err)
	}
	if hs, err := st.Load(); err != nil || hs != (HardState{}) {
		t.Fatalf("new store Load() = %+v, %v; want zero state", hs, err)
	}
	want := HardState{Term: 42, VotedFor: "n3"}
	if err := st.Save(want); err != nil {
		t.Fatalf("Save: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	st, err = OpenBoltStorage(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if hs, err := st.Load(); err != nil || hs != want {
		t.Fatalf("after reopen Load() = %+v, %v; want %+v", hs, err, want)
	}
}

func TestBoltStorageRejectsCorruptState(t *testing.T) {
	path := filepath.Join(testutil.DataDir(t, "n1"), "leadership.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(boltBucket)
		if err != nil {
			return err
		}
		return b.Put(boltKey, []byte{0xff, 0x00, 0x13})
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	st, err := OpenBoltStorage(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Load(); !errors.Is(err, ErrCorruptState) {
		t.Fatalf("Load() = %v, want ErrCorruptState", err)
	}
	// A machine must refuse to start rather than forget its vote.
	if _, err := NewMachine(Config{ID: "a", Peers: []string{"a"}, ElectionTicks: 10, HeartbeatTicks: 1}, st); !errors.Is(err, ErrCorruptState) {
		t.Fatalf("NewMachine on corrupt state = %v, want ErrCorruptState", err)
	}
}
