package store

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"tempest/internal/testutil"
	"tempest/wire"
)

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(testutil.DataDir(t, "store"), "manager.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func job(id string, rev uint64, status wire.JobStatus, created time.Time) *JobRecord {
	return &JobRecord{
		Rev:        rev,
		Submission: wire.JobSubmission{JobID: id, Name: "n-" + id, Workflows: []wire.WorkflowSpec{{Name: "a", Type: "sleep", Cores: 1}}},
		Status:     status,
		CreatedAt:  created.UnixNano(),
	}
}

func wf(jobID string, i int, rev uint64, status wire.WorkflowStatus) *WorkflowRecord {
	return &WorkflowRecord{
		Rev: rev, JobID: jobID, WorkflowID: fmt.Sprintf("%s-w%d", jobID, i), Index: i,
		Spec:   wire.WorkflowSpec{Name: fmt.Sprintf("w%d", i), Type: "sleep", Cores: 1},
		Status: status, Worker: "worker-1", FenceToken: 1<<32 | uint64(i+1), Attempts: 1,
		Excluded: []string{"worker-0"}, DispatchBytes: []byte{0xa0}, Cores: []int{i},
		LastProgress: wire.WorkflowProgress{JobID: jobID, WorkflowID: fmt.Sprintf("%s-w%d", jobID, i), Status: status, CompletedCount: 7},
	}
}

func TestPutGetAndReopen(t *testing.T) {
	s, path := openTemp(t)
	now := time.Unix(1700000000, 0)
	j := job("j1", 1, wire.JobRunning, now)
	if err := s.Put(j, wf("j1", 0, 1, wire.WorkflowRunning), wf("j1", 1, 1, wire.WorkflowAssigned)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutMeta("term", []byte{7}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	got, err := s2.Job("j1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != wire.JobRunning || got.Submission.Name != "n-j1" || !got.Created().Equal(now) {
		t.Fatalf("job after reopen = %+v", got)
	}
	wfs, err := s2.Workflows("j1")
	if err != nil {
		t.Fatal(err)
	}
	if len(wfs) != 2 || wfs[0].Index != 0 || wfs[1].Status != wire.WorkflowAssigned ||
		wfs[0].LastProgress.CompletedCount != 7 || wfs[0].Excluded[0] != "worker-0" || wfs[1].FenceToken != 1<<32|2 {
		t.Fatalf("workflows after reopen = %+v", wfs)
	}
	if v, err := s2.Meta("term"); err != nil || len(v) != 1 || v[0] != 7 {
		t.Fatalf("meta = %v, %v", v, err)
	}
}

func TestNotFound(t *testing.T) {
	s, _ := openTemp(t)
	if _, err := s.Job("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Job: %v", err)
	}
	if _, err := s.Workflow("nope", "w"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Workflow: %v", err)
	}
	if _, err := s.Meta("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Meta: %v", err)
	}
}

func TestBadIDsRefused(t *testing.T) {
	s, _ := openTemp(t)
	for _, tc := range []struct {
		name string
		job  *JobRecord
		wf   *WorkflowRecord
	}{
		{"empty job id", job("", 1, wire.JobQueued, time.Now()), nil},
		{"nul in job id", job("a\x00b", 1, wire.JobQueued, time.Now()), nil},
		{"empty workflow id", nil, &WorkflowRecord{JobID: "j"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var wfs []*WorkflowRecord
			if tc.wf != nil {
				wfs = append(wfs, tc.wf)
			}
			if err := s.Put(tc.job, wfs...); err == nil {
				t.Fatal("Put succeeded")
			}
		})
	}
}

// TestRevisionOrdering: an older revision written after a newer one must
// not overwrite it, whatever order concurrent writers commit in.
func TestRevisionOrdering(t *testing.T) {
	s, _ := openTemp(t)
	now := time.Now()
	for _, tc := range []struct {
		name  string
		revs  []uint64
		final wire.JobStatus
	}{
		{"in order", []uint64{1, 2, 3}, "S3"},
		{"newest first", []uint64{3, 2, 1}, "S3"},
		{"repeat of newest", []uint64{2, 2}, "S2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "j-" + tc.name
			for _, r := range tc.revs {
				if err := s.PutJob(job(id, r, wire.JobStatus(fmt.Sprintf("S%d", r)), now)); err != nil {
					t.Fatal(err)
				}
			}
			got, err := s.Job(id)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != tc.final {
				t.Fatalf("status = %s, want %s", got.Status, tc.final)
			}
		})
	}
}

// TestConcurrentBatches: many writers at once all land, and each record ends
// at its highest revision.
func TestConcurrentBatches(t *testing.T) {
	s, _ := openTemp(t)
	const writers, perWriter = 16, 20
	now := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, writers*perWriter)
	for w := range writers {
		wg.Go(func() {
			id := fmt.Sprintf("job-%02d", w)
			for r := 1; r <= perWriter; r++ {
				j := job(id, uint64(r), wire.JobRunning, now.Add(time.Duration(w)*time.Second))
				j.Progress.TotalCompleted = int64(r)
				if err := s.Put(j, wf(id, 0, uint64(r), wire.WorkflowRunning), wf(id, 1, uint64(r), wire.WorkflowRunning)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	jobs, err := s.Jobs()
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != writers {
		t.Fatalf("%d jobs, want %d", len(jobs), writers)
	}
	for i, j := range jobs {
		// Newest first.
		if want := fmt.Sprintf("job-%02d", writers-1-i); j.ID() != want {
			t.Fatalf("jobs[%d] = %s, want %s", i, j.ID(), want)
		}
		if j.Rev != perWriter || j.Progress.TotalCompleted != perWriter {
			t.Fatalf("%s at rev %d completed %d, want %d", j.ID(), j.Rev, j.Progress.TotalCompleted, perWriter)
		}
	}
	all, err := s.AllWorkflows()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2*writers {
		t.Fatalf("%d workflows, want %d", len(all), 2*writers)
	}
}

func TestDeleteFinishedBefore(t *testing.T) {
	s, _ := openTemp(t)
	base := time.Unix(1700000000, 0)
	put := func(id string, status wire.JobStatus, finished time.Time) {
		j := job(id, 1, status, base)
		if !finished.IsZero() {
			j.FinishedAt = finished.UnixNano()
		}
		if err := s.Put(j, wf(id, 0, 1, wire.WorkflowCompleted)); err != nil {
			t.Fatal(err)
		}
	}
	put("old-done", wire.JobCompleted, base.Add(time.Minute))
	put("old-failed", wire.JobFailed, base.Add(2*time.Minute))
	put("new-done", wire.JobCompleted, base.Add(time.Hour))
	put("running", wire.JobRunning, time.Time{})
	// A job whose id is a prefix of another's must not take the other's
	// workflows with it.
	put("old-done2", wire.JobRunning, time.Time{})

	ids, err := s.DeleteFinishedBefore(base.Add(30 * time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 {
		t.Fatalf("deleted %v, want old-done and old-failed", ids)
	}
	for _, id := range []string{"old-done", "old-failed"} {
		if _, err := s.Job(id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s still there: %v", id, err)
		}
		if wfs, _ := s.Workflows(id); len(wfs) != 0 {
			t.Fatalf("%s workflows still there: %v", id, wfs)
		}
	}
	for _, id := range []string{"new-done", "running", "old-done2"} {
		if _, err := s.Job(id); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if wfs, _ := s.Workflows(id); len(wfs) != 1 {
			t.Fatalf("%s has %d workflows, want 1", id, len(wfs))
		}
	}
}

func TestSecondOpenFailsFast(t *testing.T) {
	_, path := openTemp(t)
	start := time.Now()
	_, err := OpenWithOptions(path, Options{LockTimeout: 100 * time.Millisecond})
	if err == nil {
		t.Fatal("second Open of a locked file succeeded")
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("second Open took %s", time.Since(start))
	}
}

// TestKill9KeepsAcknowledgedWrites runs a child process that writes records
// and prints each one's number once Put has returned, kills it with SIGKILL
// mid-stream, and checks every acknowledged record survived and the file
// opens cleanly. bbolt's commit protocol (data pages, fsync, meta page,
// fsync) is what makes this hold; the test guards against anyone setting
// NoSync or writing outside a transaction.
func TestKill9KeepsAcknowledgedWrites(t *testing.T) {
	if path := os.Getenv("TEMPEST_STORE_CHILD"); path != "" {
		childWriter(path)
		return
	}
	if testing.Short() {
		t.Skip("spawns a child process")
	}
	path := filepath.Join(testutil.DataDir(t, "kill9"), "manager.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestKill9KeepsAcknowledgedWrites$")
	cmd.Env = append(os.Environ(), "TEMPEST_STORE_CHILD="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := -1
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		n, err := strconv.Atoi(sc.Text())
		if err != nil {
			continue // test framework output
		}
		acked = n
		if acked >= 40 {
			break
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if acked < 0 {
		t.Fatal("child acknowledged nothing")
	}
	s, err := Open(path)
	if err != nil {
		t.Fatalf("reopen after kill -9: %v", err)
	}
	defer s.Close()
	for i := 0; i <= acked; i++ {
		if _, err := s.Job(fmt.Sprintf("job-%04d", i)); err != nil {
			t.Fatalf("acknowledged job %d lost: %v", i, err)
		}
	}
}

func childWriter(path string) {
	s, err := Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for i := 0; ; i++ {
		id := fmt.Sprintf("job-%04d", i)
		if err := s.Put(job(id, 1, wire.JobRunning, time.Now()), wf(id, 0, 1, wire.WorkflowRunning)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(i)
	}
}

// A job's record, rewritten on each of its workflows' changes, leaves out
// the specs its workflow records already hold, and reads put them back.
func TestJobRecordKeepsSpecsInWorkflowRecords(t *testing.T) {
	s, path := openTemp(t)
	const n = 50
	j := &JobRecord{Rev: 1, Status: wire.JobRunning, CreatedAt: time.Now().UnixNano(),
		Submission: wire.JobSubmission{JobID: "big", Name: "big"}}
	var wfs []*WorkflowRecord
	for i := range n {
		w := wf("big", i, 1, wire.WorkflowRunning)
		w.Spec.Params = []byte(fmt.Sprintf("params of workflow %d, long enough to matter", i))
		j.Submission.Workflows = append(j.Submission.Workflows, w.Spec)
		wfs = append(wfs, w)
	}
	// Stored before its workflows: the record must carry the specs itself.
	if err := s.Put(j); err != nil {
		t.Fatal(err)
	}
	whole := rawJob(t, s, "big")
	if got, err := s.Job("big"); err != nil || len(got.Submission.Workflows) != n {
		t.Fatalf("job stored alone: %v workflows, %v", got, err)
	}
	j.Rev = 2
	if err := s.Put(j, wfs...); err != nil {
		t.Fatal(err)
	}
	apart := rawJob(t, s, "big")
	if len(apart)*5 > len(whole) {
		t.Fatalf("job record with its workflows stored is %d bytes, with the specs inside %d", len(apart), len(whole))
	}
	j.Rev, j.Status = 3, wire.JobCompleted
	if err := s.PutJob(j); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for _, get := range []func() (*JobRecord, error){
		func() (*JobRecord, error) { return s2.Job("big") },
		func() (*JobRecord, error) {
			all, err := s2.Jobs()
			if err != nil || len(all) != 1 {
				return nil, fmt.Errorf("jobs: %d, %v", len(all), err)
			}
			return all[0], nil
		},
	} {
		got, err := get()
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != wire.JobCompleted || got.Rev != 3 || len(got.Submission.Workflows) != n {
			t.Fatalf("job = status %s rev %d, %d workflows", got.Status, got.Rev, len(got.Submission.Workflows))
		}
		for i, spec := range got.Submission.Workflows {
			if string(spec.Params) != string(j.Submission.Workflows[i].Params) || spec.Name != j.Submission.Workflows[i].Name {
				t.Fatalf("workflow %d spec = %+v, want %+v", i, spec, j.Submission.Workflows[i])
			}
		}
	}
}

// Records stored with the specs inside (as every job was before they were
// kept apart) still read whole, and take the new form on their next write.
func TestJobStoreReadsRecordsWithSpecsInside(t *testing.T) {
	s, _ := openTemp(t)
	j := job("old", 1, wire.JobRunning, time.Now())
	w := wf("old", 0, 1, wire.WorkflowRunning)
	w.Spec = j.Submission.Workflows[0]
	if err := s.PutWorkflows(w); err != nil {
		t.Fatal(err)
	}
	v, err := encode(j.Rev, j) // the plain JobRecord, as stored before
	if err != nil {
		t.Fatal(err)
	}
	if err := s.write(func(tx *bolt.Tx) error { return tx.Bucket(bucketJobs).Put([]byte("old"), v) }); err != nil {
		t.Fatal(err)
	}
	got, err := s.Job("old")
	if err != nil || len(got.Submission.Workflows) != 1 || got.Submission.Workflows[0].Name != "a" {
		t.Fatalf("old record = %+v, %v", got, err)
	}
	j.Rev = 2
	if err := s.PutJob(j); err != nil {
		t.Fatal(err)
	}
	var sj storedJob
	if err := decode(rawJob(t, s, "old"), &sj); err != nil || sj.SpecsApart != 1 || len(sj.Submission.Workflows) != 0 {
		t.Fatalf("rewritten record = %+v, %v", sj, err)
	}
	if got, err := s.Job("old"); err != nil || len(got.Submission.Workflows) != 1 || got.Submission.Workflows[0].Name != "a" || got.Rev != 2 {
		t.Fatalf("rewritten job = %+v, %v", got, err)
	}
}

func rawJob(t *testing.T, s *Store, id string) []byte {
	t.Helper()
	var v []byte
	if err := s.db.View(func(tx *bolt.Tx) error {
		v = bytes.Clone(tx.Bucket(bucketJobs).Get([]byte(id)))
		return nil
	}); err != nil || v == nil {
		t.Fatalf("raw job %s: %v", id, err)
	}
	return v
}
