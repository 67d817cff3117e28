package gate

import (
	"fmt"

	bolt "go.etcd.io/bbolt"

	"tempest/wire"
)

// jobStore keeps the gate's job records (submission, leases, each
// datacenter's last report) in bbolt, one key per job. A record is written
// when something a successor needs changes — a new job, a lease, a
// datacenter's status — not on every progress report: counts are rebuilt
// from the managers' next reports.
type jobStore struct{ db *bolt.DB }

var bucketJobs = []byte("jobs")

func openJobStore(path string) (*jobStore, error) {
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		return nil, fmt.Errorf("open gate store %s: %w", path, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketJobs)
		return err
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("init gate store %s: %w", path, err)
	}
	return &jobStore{db: db}, nil
}

func (s *jobStore) put(recs ...*wire.GateJobRecord) error {
	if len(recs) == 0 {
		return nil
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketJobs)
		for _, r := range recs {
			buf, err := wire.Marshal(r)
			if err != nil {
				return fmt.Errorf("encode job %s: %w", r.Submission.JobID, err)
			}
			if err := b.Put([]byte(r.Submission.JobID), buf); err != nil {
				return fmt.Errorf("store job %s: %w", r.Submission.JobID, err)
			}
		}
		return nil
	})
}

func (s *jobStore) delete(ids ...string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketJobs)
		for _, id := range ids {
			if err := b.Delete([]byte(id)); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *jobStore) load() ([]*wire.GateJobRecord, error) {
	var out []*wire.GateJobRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketJobs).ForEach(func(k, v []byte) error {
			r := new(wire.GateJobRecord)
			if err := wire.Unmarshal(v, r); err != nil {
				return fmt.Errorf("decode stored job %s: %w", k, err)
			}
			out = append(out, r)
			return nil
		})
	})
	return out, err
}

func (s *jobStore) close() error { return s.db.Close() }
