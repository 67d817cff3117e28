package store

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
)

func openLazy(t *testing.T, flush time.Duration) (*Store, string) {
	t.Helper()
	path := filepath.Join(testutil.DataDir(t, "store"), "manager.db")
	o := DefaultOptions()
	o.LazyFlush = flush
	o.OnLazyError = func(err error) { t.Errorf("lazy write failed: %v", err) }
	s, err := OpenWithOptions(path, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func statusOf(t *testing.T, s *Store, jobID, wfID string) wire.WorkflowStatus {
	t.Helper()
	rec, err := s.Workflow(jobID, wfID)
	if errors.Is(err, ErrNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return rec.Status
}

// A lazy write costs no commit of its own while others come: it is on disk
// with the next write's commit, and not before.
func TestLazyWriteRidesWithTheNextCommit(t *testing.T) {
	s, _ := openLazy(t, time.Hour)
	if err := s.PutLazily(nil, wf("j1", 0, 1, wire.WorkflowRunning)); err != nil {
		t.Fatal(err)
	}
	if got := statusOf(t, s, "j1", "j1-w0"); got != "" {
		t.Fatalf("a lazy write was committed on its own: %q", got)
	}
	if err := s.Put(nil, wf("j2", 0, 2, wire.WorkflowAssigned)); err != nil {
		t.Fatal(err)
	}
	if got := statusOf(t, s, "j1", "j1-w0"); got != wire.WorkflowRunning {
		t.Fatalf("after the next commit the lazy write reads %q, want RUNNING", got)
	}
}

// With no other write coming, a lazy write gets a commit of its own within
// LazyFlush.
func TestLazyWriteIsFlushedAlone(t *testing.T) {
	s, _ := openLazy(t, 5*time.Millisecond)
	if err := s.PutLazily(nil, wf("j1", 0, 1, wire.WorkflowRunning)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if got := statusOf(t, s, "j1", "j1-w0"); got != wire.WorkflowRunning {
			return errors.New("the lazy write is not on disk yet")
		}
		return nil
	})
}

// A lazy write and a durable one of the same record keep the newer
// revision, in either order.
func TestLazyAndDurableWritesKeepTheNewerRevision(t *testing.T) {
	s, _ := openLazy(t, time.Hour)
	// The older lazy write is committed together with the newer durable one.
	if err := s.PutLazily(nil, wf("j1", 0, 5, wire.WorkflowRunning)); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(nil, wf("j1", 0, 6, wire.WorkflowCompleted)); err != nil {
		t.Fatal(err)
	}
	if got := statusOf(t, s, "j1", "j1-w0"); got != wire.WorkflowCompleted {
		t.Fatalf("older lazy write beside a newer durable one: %q, want COMPLETED", got)
	}
	// An older lazy write after the newer record is stored changes nothing.
	if err := s.PutLazily(nil, wf("j1", 0, 4, wire.WorkflowAssigned)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutMeta("k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if got := statusOf(t, s, "j1", "j1-w0"); got != wire.WorkflowCompleted {
		t.Fatalf("older lazy write after a newer record: %q, want COMPLETED", got)
	}
}

// Close commits the lazy writes waiting; after it they are refused.
func TestCloseCommitsLazyWrites(t *testing.T) {
	s, path := openLazy(t, time.Hour)
	if err := s.PutLazily(job("j1", 1, wire.JobRunning, time.Unix(1700000000, 0)), wf("j1", 0, 1, wire.WorkflowRunning)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.PutLazily(nil, wf("j1", 0, 2, wire.WorkflowCompleted)); !errors.Is(err, ErrClosed) {
		t.Fatalf("lazy write after Close: %v, want ErrClosed", err)
	}
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got := statusOf(t, s2, "j1", "j1-w0"); got != wire.WorkflowRunning {
		t.Fatalf("after Close and reopen the lazy write reads %q, want RUNNING", got)
	}
	if _, err := s2.Job("j1"); err != nil {
		t.Fatalf("the lazy job record: %v", err)
	}
}
