package store

import (
	"bytes"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// RevFile is a bbolt file holding one bucket of opaque values, each under a
// string key with a revision, written by the same rule and through the same
// group committer as a manager's records: a write whose revision is lower
// than the stored one is skipped, so writers on many goroutines can never
// land an older state over a newer one. Gates keep their job records in one.
type RevFile struct {
	s      *Store
	bucket []byte
}

// Rev is one value with its revision.
type Rev struct {
	Key   string
	Rev   uint64
	Value []byte
}

// OpenRevFile opens (creating if needed) the file at path with one bucket.
func OpenRevFile(path, bucket string, o Options) (*RevFile, error) {
	if o.LockTimeout <= 0 {
		o.LockTimeout = DefaultOptions().LockTimeout
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: o.LockTimeout})
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists([]byte(bucket))
		return err
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s: bucket %s: %w", path, bucket, err)
	}
	st := &Store{db: db, path: path, reqs: make(chan *commitReq, commitQueue)}
	st.wg.Add(1)
	go st.commitLoop()
	return &RevFile{s: st, bucket: []byte(bucket)}, nil
}

// Close commits what is queued and releases the file.
func (f *RevFile) Close() error { return f.s.Close() }

// Put writes values in one transaction; a value whose revision is lower than
// the one stored under its key is skipped (equal revisions overwrite, as for
// a manager's records).
func (f *RevFile) Put(revs ...Rev) error {
	if len(revs) == 0 {
		return nil
	}
	vals := make([][]byte, len(revs))
	for i, r := range revs {
		if err := checkID("key", r.Key); err != nil {
			return err
		}
		v := make([]byte, 8, 8+len(r.Value))
		binary.BigEndian.PutUint64(v, r.Rev)
		vals[i] = append(v, r.Value...)
	}
	err := f.s.write(func(tx *bolt.Tx) error {
		b := tx.Bucket(f.bucket)
		for i, r := range revs {
			if old := b.Get([]byte(r.Key)); len(old) >= 8 && binary.BigEndian.Uint64(old) > r.Rev {
				continue // a newer revision is already stored
			}
			if err := b.Put([]byte(r.Key), vals[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store %s: put: %w", f.s.path, err)
	}
	return nil
}

// Delete removes keys; deleting what is absent is not an error.
func (f *RevFile) Delete(keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	err := f.s.write(func(tx *bolt.Tx) error {
		b := tx.Bucket(f.bucket)
		for _, k := range keys {
			if err := b.Delete([]byte(k)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store %s: delete: %w", f.s.path, err)
	}
	return nil
}

// Get returns the value and revision under key, or ErrNotFound.
func (f *RevFile) Get(key string) (Rev, error) {
	var out Rev
	err := f.s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(f.bucket).Get([]byte(key))
		if v == nil {
			return fmt.Errorf("%s: %w", key, ErrNotFound)
		}
		if len(v) < 8 {
			return fmt.Errorf("%s: record of %d bytes is too short", key, len(v))
		}
		out = Rev{Key: key, Rev: binary.BigEndian.Uint64(v), Value: bytes.Clone(v[8:])}
		return nil
	})
	return out, err
}

// ForEach calls fn for every value, in key order. Value is only valid
// during the call.
func (f *RevFile) ForEach(fn func(Rev) error) error {
	return f.s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(f.bucket).ForEach(func(k, v []byte) error {
			if len(v) < 8 {
				return fmt.Errorf("%s: record of %d bytes is too short", k, len(v))
			}
			return fn(Rev{Key: string(k), Rev: binary.BigEndian.Uint64(v), Value: v[8:]})
		})
	})
}

// Migrate moves every value of bucket legacy, which holds values without a
// revision, into this file's bucket, with the revision rev reads from each,
// and drops legacy: all in one transaction, so a crash leaves either the old
// layout or the new. A file without legacy is left as it is.
func (f *RevFile) Migrate(legacy string, rev func(key, value []byte) (uint64, error)) (int, error) {
	n := 0
	err := f.s.write(func(tx *bolt.Tx) error {
		n = 0
		old := tx.Bucket([]byte(legacy))
		if old == nil {
			return nil
		}
		b := tx.Bucket(f.bucket)
		if err := old.ForEach(func(k, v []byte) error {
			r, err := rev(k, v)
			if err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
			val := make([]byte, 8, 8+len(v))
			binary.BigEndian.PutUint64(val, r)
			n++
			return b.Put(bytes.Clone(k), append(val, v...))
		}); err != nil {
			return err
		}
		return tx.DeleteBucket([]byte(legacy))
	})
	if err != nil {
		return 0, fmt.Errorf("store %s: migrate bucket %s: %w", f.s.path, legacy, err)
	}
	return n, nil
}
