package gate

import (
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"tempest/wire"
)

func rec(id string, version uint64, st wire.JobStatus) *wire.GateJobRecord {
	return &wire.GateJobRecord{Submission: wire.JobSubmission{JobID: id}, Status: st, Version: version}
}

// Two writes of one job that reach the store out of order (the later
// change first) leave the later one on disk.
func TestJobStoreNeverWritesAnOlderVersionOverANewer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gate.db")
	s, err := openJobStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.put(rec("j-1", 6, wire.JobCompleted)); err != nil {
		t.Fatal(err)
	}
	if err := s.put(rec("j-1", 5, wire.JobRunning)); err != nil {
		t.Fatal(err)
	}
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	if s, err = openJobStore(path); err != nil {
		t.Fatal(err)
	}
	defer s.close()
	recs, err := s.load()
	if err != nil || len(recs) != 1 || recs[0].Version != 6 || recs[0].Status != wire.JobCompleted {
		t.Fatalf("loaded %+v, %v; want version 6 COMPLETED alone", recs, err)
	}
}

// A gate.db written before records carried their version in the store is
// moved over on open, nothing lost.
func TestJobStoreMigratesUnversionedRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gate.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte(bucketLegacy))
		if err != nil {
			return err
		}
		for _, r := range []*wire.GateJobRecord{rec("j-1", 3, wire.JobRunning), rec("j-2", 9, wire.JobFailed)} {
			buf, err := wire.Marshal(r)
			if err != nil {
				return err
			}
			if err := b.Put([]byte(r.Submission.JobID), buf); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := openJobStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	// An older write after the move is still refused: the version came along.
	if err := s.put(rec("j-2", 8, wire.JobRunning)); err != nil {
		t.Fatal(err)
	}
	recs, err := s.load()
	if err != nil || len(recs) != 2 {
		t.Fatalf("loaded %d records, %v; want 2", len(recs), err)
	}
	for _, r := range recs {
		if r.Submission.JobID == "j-2" && (r.Version != 9 || r.Status != wire.JobFailed) {
			t.Fatalf("j-2 = version %d %s, want 9 FAILED", r.Version, r.Status)
		}
	}
}
