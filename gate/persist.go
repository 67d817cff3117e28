package gate

import (
	"fmt"

	"tempest/internal/store"
	"tempest/wire"
)

// jobStore keeps the gate's job records (submission, leases, each
// datacenter's last report) in bbolt, one key per job, each stored with its
// record version. A record is written when something a successor needs
// changes — a new job, a lease, a datacenter's status — not on every
// progress report: counts are rebuilt from the managers' next reports.
//
// Records are written from several goroutines (the submit path, replicated
// records, state syncs, lease and status changes), each after letting go of
// Gate.mu, so two writes of one job can reach the disk in either order. The
// store orders them by version instead: a write older than what is stored
// is skipped (store.RevFile), so version 5 never lands over version 6.
type jobStore struct{ f *store.RevFile }

const (
	bucketRecords = "gate_jobs"
	// bucketLegacy held records without their version in front (before
	// writes were ordered); openJobStore moves them over.
	bucketLegacy = "jobs"
)

func openJobStore(path string) (*jobStore, error) {
	f, err := store.OpenRevFile(path, bucketRecords, store.DefaultOptions())
	if err != nil {
		return nil, fmt.Errorf("open gate store: %w", err)
	}
	if _, err := f.Migrate(bucketLegacy, func(k, v []byte) (uint64, error) {
		var r wire.GateJobRecord
		if err := wire.Unmarshal(v, &r); err != nil {
			return 0, fmt.Errorf("decode stored job %s: %w", k, err)
		}
		return r.Version, nil
	}); err != nil {
		f.Close()
		return nil, fmt.Errorf("open gate store: %w", err)
	}
	return &jobStore{f: f}, nil
}

// put writes records; one older than the stored copy is skipped.
func (s *jobStore) put(recs ...*wire.GateJobRecord) error {
	if len(recs) == 0 {
		return nil
	}
	revs := make([]store.Rev, 0, len(recs))
	for _, r := range recs {
		buf, err := wire.Marshal(r)
		if err != nil {
			return fmt.Errorf("encode job %s: %w", r.Submission.JobID, err)
		}
		revs = append(revs, store.Rev{Key: r.Submission.JobID, Rev: r.Version, Value: buf})
	}
	return s.f.Put(revs...)
}

func (s *jobStore) delete(ids ...string) error { return s.f.Delete(ids...) }

func (s *jobStore) load() ([]*wire.GateJobRecord, error) {
	var out []*wire.GateJobRecord
	err := s.f.ForEach(func(r store.Rev) error {
		rec := new(wire.GateJobRecord)
		if err := wire.Unmarshal(r.Value, rec); err != nil {
			return fmt.Errorf("decode stored job %s: %w", r.Key, err)
		}
		out = append(out, rec)
		return nil
	})
	return out, err
}

func (s *jobStore) close() error { return s.f.Close() }
