package leadership

import (
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"tempest/wire"
)

var (
	boltBucket = []byte("leadership")
	boltKey    = []byte("hardstate")
)

// boltOpenTimeout bounds the wait for bbolt's file lock, so a second process
// (or a leaked handle) pointing at the same data dir fails loudly instead of
// hanging startup.
const boltOpenTimeout = 2 * time.Second

// BoltStorage keeps the HardState in a bbolt file. Every Save is one bbolt
// transaction committed with fsync (NoSync stays false), so a Save that
// returned nil survives power loss.
//
// One file holds one election group's state; bbolt locks the file, so a
// process opens it once.
type BoltStorage struct {
	db   *bolt.DB
	path string
}

// OpenBoltStorage opens (creating if needed) the bbolt file at path.
func OpenBoltStorage(path string) (*BoltStorage, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: boltOpenTimeout})
	if err != nil {
		return nil, fmt.Errorf("open leadership store %s: %w", path, err)
	}
	// Durability is the whole point of this store; make the default explicit
	// so nobody "optimizes" it away.
	db.NoSync = false
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(boltBucket)
		return err
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init leadership store %s: %w", path, err)
	}
	return &BoltStorage{db: db, path: path}, nil
}

// Load returns the saved HardState, or the zero HardState for a new file.
func (s *BoltStorage) Load() (HardState, error) {
	var hs HardState
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(boltBucket).Get(boltKey)
		if v == nil {
			return nil
		}
		if err := wire.Unmarshal(v, &hs); err != nil {
			return fmt.Errorf("%w: %w", ErrCorruptState, err)
		}
		return nil
	})
	if err != nil {
		return HardState{}, fmt.Errorf("load hard state from %s: %w", s.path, err)
	}
	return hs, nil
}

// Save writes hs and fsyncs before returning.
func (s *BoltStorage) Save(hs HardState) error {
	b, err := wire.Marshal(hs)
	if err != nil {
		return fmt.Errorf("encode hard state: %w", err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(boltBucket).Put(boltKey, b)
	})
	if err != nil {
		return fmt.Errorf("save hard state to %s: %w", s.path, err)
	}
	return nil
}

// Close releases the file.
func (s *BoltStorage) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close leadership store %s: %w", s.path, err)
	}
	return nil
}
