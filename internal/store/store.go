package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"tempest/wire"
)

var (
	bucketJobs      = []byte("jobs")      // job id -> rev + storedJob
	bucketWorkflows = []byte("workflows") // job id \x00 workflow id -> rev + WorkflowRecord
	bucketMeta      = []byte("meta")      // free-form small values
)

// ErrNotFound is returned (wrapped) for a record that does not exist.
var ErrNotFound = errors.New("not found")

// Options tunes a Store. Zero fields take defaults.
type Options struct {
	// LockTimeout bounds the wait for the file lock, so a second process on
	// the same data directory fails with a clear error instead of hanging.
	LockTimeout time.Duration
	// LazyFlush bounds how long a lazy write (PutLazily) waits for a commit
	// to ride along with before it gets one of its own.
	LazyFlush time.Duration
	// OnLazyError hears of a lazy write that failed, since no caller waits
	// for it. Nil drops the error.
	OnLazyError func(error)
}

// DefaultOptions returns the options Open uses.
func DefaultOptions() Options {
	return Options{LockTimeout: 2 * time.Second, LazyFlush: 100 * time.Millisecond}
}

// Store is a manager's bbolt file. It is safe for concurrent use. Writes go
// through one group committer (commit.go).
type Store struct {
	db   *bolt.DB
	path string

	mu     sync.RWMutex // guards closed against sends on reqs
	closed bool
	reqs   chan *commitReq
	wg     sync.WaitGroup // the commit loop
	opts   Options

	lazyMu sync.Mutex
	lazy   []func(*bolt.Tx) error // writes waiting to ride along with a commit
	flush  *time.Timer            // armed while lazy is not empty
}

// Open opens (creating if needed) the store at path with DefaultOptions.
func Open(path string) (*Store, error) { return OpenWithOptions(path, DefaultOptions()) }

// OpenWithOptions opens the store at path.
func OpenWithOptions(path string, o Options) (*Store, error) {
	d := DefaultOptions()
	if o.LockTimeout <= 0 {
		o.LockTimeout = d.LockTimeout
	}
	if o.LazyFlush <= 0 {
		o.LazyFlush = d.LazyFlush
	}
	if o.OnLazyError == nil {
		o.OnLazyError = func(error) {}
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: o.LockTimeout, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketJobs, bucketWorkflows, bucketMeta} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return fmt.Errorf("bucket %s: %w", b, err)
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	st := &Store{db: db, path: path, reqs: make(chan *commitReq, commitQueue), opts: o}
	st.wg.Add(1)
	go st.commitLoop()
	return st, nil
}

// Path is the file the store lives in.
func (s *Store) Path() string { return s.path }

// Close commits the writes already queued, stops the committer and releases
// the file. Writes after Close fail with ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.reqs)
	s.mu.Unlock()
	s.wg.Wait()
	s.commit(nil) // the lazy writes left
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close store %s: %w", s.path, err)
	}
	return nil
}

// PutJob writes a job record.
func (s *Store) PutJob(job *JobRecord) error { return s.Put(job) }

// PutWorkflows writes workflow records in one batch.
func (s *Store) PutWorkflows(wfs ...*WorkflowRecord) error { return s.Put(nil, wfs...) }

// Put writes a job (nil to skip) and workflows in one batched transaction,
// so a job and the workflows it was just split into become durable together.
// Records older (lower Rev) than what is stored are skipped.
//
// Once every workflow of the job has its own record (written earlier, or in
// this same Put), the job record is stored without the submission's workflow
// specs, which reads rebuild from those records (storedJob).
func (s *Store) Put(job *JobRecord, wfs ...*WorkflowRecord) error {
	fn, err := putFn(job, wfs)
	if err != nil || fn == nil {
		return err
	}
	if err := s.write(fn); err != nil {
		return fmt.Errorf("store %s: put: %w", s.path, err)
	}
	return nil
}

// PutLazily writes like Put but returns without waiting for the write to be
// durable: it joins the next commit that another write causes, or one of
// its own within Options.LazyFlush. It is for records whose loss in a crash
// the caller can afford (what a restart relearns from elsewhere), so that
// they cost no commit of their own. A later Put of the same record wins, as
// its revision is higher. Only encoding errors are returned; a failed
// commit goes to Options.OnLazyError.
func (s *Store) PutLazily(job *JobRecord, wfs ...*WorkflowRecord) error {
	fn, err := putFn(job, wfs)
	if err != nil || fn == nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	s.lazyMu.Lock()
	s.lazy = append(s.lazy, fn)
	if s.flush == nil {
		s.flush = time.AfterFunc(s.opts.LazyFlush, s.flushLazy)
	}
	s.lazyMu.Unlock()
	return nil
}

// putFn encodes a Put's records and returns the function that writes them
// in a transaction, or nil when there is nothing to write.
func putFn(job *JobRecord, wfs []*WorkflowRecord) (func(*bolt.Tx) error, error) {
	type kv struct {
		bucket, key, val []byte
	}
	// Encode outside the commit: a group commit may run the function more
	// than once, and encoding inside would hold the other writers for nothing.
	writes := make([]kv, 0, len(wfs))
	for _, wf := range wfs {
		if err := errors.Join(checkID("job id", wf.JobID), checkID("workflow id", wf.WorkflowID)); err != nil {
			return nil, err
		}
		v, err := encode(wf.Rev, wf)
		if err != nil {
			return nil, fmt.Errorf("put workflow %s: %w", wf.WorkflowID, err)
		}
		writes = append(writes, kv{bucketWorkflows, workflowKey(wf.JobID, wf.WorkflowID), v})
	}
	var jobKey, jobApart, jobWhole []byte
	if job != nil {
		if err := checkID("job id", job.ID()); err != nil {
			return nil, err
		}
		jobKey = []byte(job.ID())
		var err error
		if jobApart, err = encodeJobApart(job); err != nil {
			return nil, fmt.Errorf("put job %s: %w", job.ID(), err)
		}
	}
	if len(writes) == 0 && job == nil {
		return nil, nil
	}
	return func(tx *bolt.Tx) error {
		for _, w := range writes {
			if err := putNewer(tx.Bucket(w.bucket), w.key, w.val); err != nil {
				return err
			}
		}
		if job == nil {
			return nil
		}
		v := jobApart
		if n := len(job.Submission.Workflows); v == nil || countWorkflows(tx, job.ID(), n+1) != n {
			// The workflow records do not match the submission one to one
			// (a job stored before it is split): the record must carry its
			// specs itself.
			if jobWhole == nil {
				var err error
				if jobWhole, err = encode(job.Rev, &storedJob{JobRecord: *job}); err != nil {
					return fmt.Errorf("job %s: %w", job.ID(), err)
				}
			}
			v = jobWhole
		}
		return putNewer(tx.Bucket(bucketJobs), jobKey, v)
	}, nil
}

// putNewer puts val under key unless a newer revision is already stored.
func putNewer(b *bolt.Bucket, key, val []byte) error {
	if old := b.Get(key); len(old) >= 8 && binary.BigEndian.Uint64(old) > binary.BigEndian.Uint64(val) {
		return nil
	}
	return b.Put(key, val)
}

// storedJob is a JobRecord as the jobs bucket holds it. A job's record is
// rewritten on every status change of any of its workflows, and a
// submission carries every workflow's spec, so with the specs inside, a job
// of n workflows wrote O(n²) bytes over its life on every manager. Its
// workflow records carry the same specs (WorkflowRecord.Spec, at Index), so
// once they are all stored the job record leaves the specs out and says how
// many there are (SpecsApart); reads put them back. Records written before
// this (SpecsApart 0) keep their specs and read as they always did, and are
// stored the new way on their next write.
type storedJob struct {
	JobRecord
	SpecsApart int `cbor:"40,keyasint,omitempty"`
}

// encodeJobApart encodes job without its workflow specs, or returns nil for
// a job without workflows.
func encodeJobApart(job *JobRecord) ([]byte, error) {
	n := len(job.Submission.Workflows)
	if n == 0 {
		return nil, nil
	}
	slim := storedJob{JobRecord: *job, SpecsApart: n}
	slim.Submission.Workflows = nil
	return encode(job.Rev, &slim)
}

// countWorkflows counts job's workflow records, stopping at limit.
func countWorkflows(tx *bolt.Tx, jobID string, limit int) int {
	prefix := append([]byte(jobID), 0)
	n := 0
	c := tx.Bucket(bucketWorkflows).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && n < limit; k, _ = c.Next() {
		n++
	}
	return n
}

// decodeJob decodes a jobs-bucket value, putting back the workflow specs a
// record stored apart (storedJob) from the job's workflow records in tx.
func decodeJob(tx *bolt.Tx, v []byte) (*JobRecord, error) {
	var sj storedJob
	if err := decode(v, &sj); err != nil {
		return nil, err
	}
	rec := &sj.JobRecord
	if sj.SpecsApart == 0 {
		return rec, nil
	}
	specs := make([]wire.WorkflowSpec, sj.SpecsApart)
	found := make([]bool, sj.SpecsApart)
	prefix := append([]byte(rec.ID()), 0)
	c := tx.Bucket(bucketWorkflows).Cursor()
	for k, wv := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, wv = c.Next() {
		var w struct {
			Index int               `cbor:"4,keyasint,omitempty"`
			Spec  wire.WorkflowSpec `cbor:"5,keyasint"`
		}
		if err := decode(wv, &w); err != nil {
			return nil, fmt.Errorf("workflow %q: %w", k, err)
		}
		if w.Index < 0 || w.Index >= len(specs) || found[w.Index] {
			return nil, fmt.Errorf("workflow %q: index %d does not fit a job of %d workflows", k, w.Index, len(specs))
		}
		specs[w.Index], found[w.Index] = w.Spec, true
	}
	if missing := slices.Index(found, false); missing >= 0 {
		return nil, fmt.Errorf("job %s: the record of workflow %d of %d, which holds its spec, is missing", rec.ID(), missing, len(specs))
	}
	rec.Submission.Workflows = specs
	return rec, nil
}

// Job returns one job record.
func (s *Store) Job(id string) (*JobRecord, error) {
	var rec *JobRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketJobs).Get([]byte(id))
		if v == nil {
			return fmt.Errorf("job %s: %w", id, ErrNotFound)
		}
		var err error
		if rec, err = decodeJob(tx, v); err != nil {
			return fmt.Errorf("job %s: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rec, nil
}

// Jobs returns every job record, newest first.
func (s *Store) Jobs() ([]*JobRecord, error) {
	var out []*JobRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketJobs).ForEach(func(k, v []byte) error {
			rec, err := decodeJob(tx, v)
			if err != nil {
				return fmt.Errorf("job %s: %w", k, err)
			}
			out = append(out, rec)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store %s: list jobs: %w", s.path, err)
	}
	slices.SortStableFunc(out, func(a, b *JobRecord) int {
		if c := compareInt64(b.CreatedAt, a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID(), a.ID())
	})
	return out, nil
}

// Workflow returns one workflow record.
func (s *Store) Workflow(jobID, workflowID string) (*WorkflowRecord, error) {
	var rec *WorkflowRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketWorkflows).Get(workflowKey(jobID, workflowID))
		if v == nil {
			return fmt.Errorf("workflow %s of job %s: %w", workflowID, jobID, ErrNotFound)
		}
		rec = new(WorkflowRecord)
		return decode(v, rec)
	})
	if err != nil {
		return nil, err
	}
	return rec, nil
}

// Workflows returns a job's workflow records in submission order.
func (s *Store) Workflows(jobID string) ([]*WorkflowRecord, error) {
	return s.workflows(append([]byte(jobID), 0))
}

// AllWorkflows returns every workflow record, grouped by job.
func (s *Store) AllWorkflows() ([]*WorkflowRecord, error) { return s.workflows(nil) }

func (s *Store) workflows(prefix []byte) ([]*WorkflowRecord, error) {
	var out []*WorkflowRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketWorkflows).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			rec := new(WorkflowRecord)
			if err := decode(v, rec); err != nil {
				return fmt.Errorf("workflow %q: %w", k, err)
			}
			out = append(out, rec)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store %s: list workflows: %w", s.path, err)
	}
	slices.SortStableFunc(out, func(a, b *WorkflowRecord) int {
		if c := strings.Compare(a.JobID, b.JobID); c != 0 {
			return c
		}
		return a.Index - b.Index
	})
	return out, nil
}

// DeleteJob removes a job and its workflows.
func (s *Store) DeleteJob(id string) error {
	err := s.write(func(tx *bolt.Tx) error { return deleteJob(tx, []byte(id)) })
	if err != nil {
		return fmt.Errorf("store %s: delete job %s: %w", s.path, id, err)
	}
	return nil
}

// DeleteFinishedBefore removes every job in a terminal state that finished
// before cutoff, with its workflows, and returns their ids. It is how
// retention is enforced.
func (s *Store) DeleteFinishedBefore(cutoff time.Time) ([]string, error) {
	var ids []string
	err := s.write(func(tx *bolt.Tx) error {
		ids = ids[:0]
		var victims [][]byte
		err := tx.Bucket(bucketJobs).ForEach(func(k, v []byte) error {
			var rec JobRecord
			if err := decode(v, &rec); err != nil {
				return fmt.Errorf("job %s: %w", k, err)
			}
			if rec.Status.Terminal() && rec.FinishedAt != 0 && rec.FinishedAt < cutoff.UnixNano() {
				victims = append(victims, bytes.Clone(k))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range victims {
			if err := deleteJob(tx, k); err != nil {
				return err
			}
			ids = append(ids, string(k))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store %s: delete finished jobs: %w", s.path, err)
	}
	return ids, nil
}

// deleteJob removes a job and its workflows; deleting what is absent is not
// an error, so a repeated batch run is harmless.
func deleteJob(tx *bolt.Tx, id []byte) error {
	if err := tx.Bucket(bucketJobs).Delete(id); err != nil {
		return err
	}
	prefix := append(bytes.Clone(id), 0)
	c := tx.Bucket(bucketWorkflows).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Seek(prefix) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// PutMeta stores a small value under key.
func (s *Store) PutMeta(key string, value []byte) error {
	err := s.write(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put([]byte(key), value) })
	if err != nil {
		return fmt.Errorf("store %s: put meta %s: %w", s.path, key, err)
	}
	return nil
}

// Meta returns the value stored under key, or ErrNotFound.
func (s *Store) Meta(key string) ([]byte, error) {
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketMeta).Get([]byte(key))
		if v == nil {
			return fmt.Errorf("meta %s: %w", key, ErrNotFound)
		}
		out = bytes.Clone(v)
		return nil
	})
	return out, err
}

func workflowKey(jobID, workflowID string) []byte {
	k := make([]byte, 0, len(jobID)+1+len(workflowID))
	k = append(k, jobID...)
	k = append(k, 0)
	return append(k, workflowID...)
}

// checkID refuses ids that would break the key layout (NUL separates a job id
// from a workflow id) or could not be a real id.
func checkID(what, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%s is empty", what)
	case len(id) > 255:
		return fmt.Errorf("%s is %d bytes, more than 255", what, len(id))
	case strings.IndexByte(id, 0) >= 0:
		return fmt.Errorf("%s %q contains NUL", what, id)
	}
	return nil
}

func encode(rev uint64, v any) ([]byte, error) {
	body, err := wire.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 8, 8+len(body))
	binary.BigEndian.PutUint64(out, rev)
	return append(out, body...), nil
}

func decode(v []byte, out any) error {
	if len(v) < 8 {
		return fmt.Errorf("record of %d bytes is too short", len(v))
	}
	return wire.Unmarshal(v[8:], out)
}

func compareInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
