// Package blobstore keeps content-addressed blobs on a node's disk: files a
// job references by SHA-256 (data files today, stream inputs later).
//
// A blob is received in chunks appended to a partial file, then committed:
// the partial is fsync'd, hashed, compared with the name it was sent under,
// renamed into place and the directory fsync'd. So a visible blob is always
// complete and verified, whatever crash happens in between; a crash leaves
// at most a partial file, which a later upload resumes or GC removes.
//
// Replicator (replica.go) moves blobs between nodes over the transport.
package blobstore

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Sum is a blob's name: the SHA-256 of its content.
type Sum [sha256.Size]byte

// String is the lowercase hex form used in file names, URLs and job params.
func (s Sum) String() string { return hex.EncodeToString(s[:]) }

// ParseSum reads a 64-digit lowercase or uppercase hex sum.
func ParseSum(s string) (Sum, error) {
	var sum Sum
	if len(s) != 2*len(sum) {
		return sum, fmt.Errorf("blob sum %q: want %d hex digits", truncate(s), 2*len(sum))
	}
	if _, err := hex.Decode(sum[:], []byte(s)); err != nil {
		return sum, fmt.Errorf("blob sum %q: %w", truncate(s), err)
	}
	return sum, nil
}

// SumFromBytes reads a sum carried as 32 raw bytes (the wire form).
func SumFromBytes(b []byte) (Sum, error) {
	var sum Sum
	if len(b) != len(sum) {
		return sum, fmt.Errorf("blob sum is %d bytes, want %d", len(b), len(sum))
	}
	copy(sum[:], b)
	return sum, nil
}

// Of is the sum of b.
func Of(b []byte) Sum { return sha256.Sum256(b) }

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// MaxSize bounds one blob. Inputs of hundreds of MiB are the point; the
// bound keeps a client from filling a disk with one upload by mistake.
const MaxSize int64 = 16 << 30

// Errors callers branch on.
var (
	// ErrNotFound: no complete blob of that sum here.
	ErrNotFound = errors.New("blob not found")
	// ErrMismatch: the committed bytes do not hash to the blob's name. The
	// partial upload is discarded.
	ErrMismatch = errors.New("blob content does not match its sum")
)

// GapError says a chunk did not start where the partial upload ends; Have is
// where the next chunk must start.
type GapError struct {
	Sum  Sum
	Have int64
	Got  int64
}

func (e *GapError) Error() string {
	return fmt.Sprintf("blob %s: chunk at offset %d, but %d bytes are held: send from %d", e.Sum, e.Got, e.Have, e.Have)
}

// Info describes a complete blob.
type Info struct {
	Sum  Sum
	Size int64
	// Touched is when the blob was committed or last asked for, the start
	// of its retention period.
	Touched time.Time
}

// Partial describes an upload in progress.
type Partial struct {
	Sum      Sum
	Have     int64
	Modified time.Time
}

// Store is a directory of blobs. It is safe for concurrent use; work on one
// sum is serialized, different sums proceed in parallel.
type Store struct {
	blobs   string // complete, verified blobs, named by hex sum
	partial string // uploads in progress
	log     *slog.Logger
	now     func() time.Time
	limits  Limits
	space   func(dir string) (space, error) // statfs; tests replace it

	// unfinished is the bytes partial uploads hold, kept as they grow and
	// go rather than listed per chunk.
	unfinished atomic.Int64

	mu    sync.Mutex
	locks map[Sum]*sumLock
}

type sumLock struct {
	mu   sync.Mutex
	refs int
}

// Open opens (creating) a store under dir. A nil logger discards; now is
// time.Now when nil.
func Open(dir string, log *slog.Logger, now func() time.Time) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	s := &Store{
		blobs:   filepath.Join(dir, "blobs"),
		partial: filepath.Join(dir, "partial"),
		log:     log.With("component", "blobstore"),
		now:     now,
		space:   statfs,
		locks:   map[Sum]*sumLock{},
	}
	for _, d := range []string{s.blobs, s.partial} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("blob store: %w", err)
		}
	}
	partials, err := s.Partials()
	if err != nil {
		return nil, fmt.Errorf("blob store: %w", err)
	}
	for _, p := range partials {
		s.unfinished.Add(p.Have)
	}
	return s, nil
}

// SetLimits sets what uploads may take of the disk; call it before the
// store is used (OpenNode does).
func (s *Store) SetLimits(l Limits) { s.limits = l }

// lock serializes work on one sum and returns its unlock.
func (s *Store) lock(sum Sum) func() {
	s.mu.Lock()
	l := s.locks[sum]
	if l == nil {
		l = &sumLock{}
		s.locks[sum] = l
	}
	l.refs++
	s.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		s.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(s.locks, sum)
		}
		s.mu.Unlock()
	}
}

func (s *Store) blobPath(sum Sum) string    { return filepath.Join(s.blobs, sum.String()) }
func (s *Store) partialPath(sum Sum) string { return filepath.Join(s.partial, sum.String()) }

// Stat returns a complete blob's info, or ErrNotFound.
func (s *Store) Stat(sum Sum) (Info, error) {
	fi, err := os.Stat(s.blobPath(sum))
	if errors.Is(err, fs.ErrNotExist) {
		return Info{}, fmt.Errorf("blob %s: %w", sum, ErrNotFound)
	}
	if err != nil {
		return Info{}, fmt.Errorf("blob %s: %w", sum, err)
	}
	return Info{Sum: sum, Size: fi.Size(), Touched: fi.ModTime()}, nil
}

// Touch restarts a complete blob's retention period: a client that found
// the blob here is about to submit a job naming it.
func (s *Store) Touch(sum Sum) error {
	now := s.now()
	if err := os.Chtimes(s.blobPath(sum), now, now); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("blob %s: %w", sum, ErrNotFound)
		}
		return fmt.Errorf("touch blob %s: %w", sum, err)
	}
	return nil
}

// Have is how many bytes of an upload of sum are held: the size of a
// complete blob (complete true), else of its partial upload (0: none).
func (s *Store) Have(sum Sum) (have int64, complete bool, err error) {
	if info, err := s.Stat(sum); err == nil {
		return info.Size, true, nil
	} else if !errors.Is(err, ErrNotFound) {
		return 0, false, err
	}
	fi, err := os.Stat(s.partialPath(sum))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("blob %s partial: %w", sum, err)
	}
	return fi.Size(), false, nil
}

// WriteChunk appends data at offset to sum's partial upload and returns the
// bytes now held. A chunk that ends at or before the held bytes is a repeat
// (a retried call) and changes nothing; one that starts past them, or
// overlaps them partly, is a *GapError naming where to resume. Writing to a
// blob that is already complete is a no-op reporting its size. A chunk that
// would cross the free-space floor or a quota (Limits) writes nothing and
// is ErrNoSpace; one past MaxSize is ErrOutOfRange.
func (s *Store) WriteChunk(sum Sum, offset int64, data []byte) (int64, error) {
	if offset < 0 || offset > MaxSize-int64(len(data)) {
		return 0, fmt.Errorf("blob %s: chunk of %d bytes at offset %d: %w (%d bytes)", sum, len(data), offset, ErrOutOfRange, MaxSize)
	}
	unlock := s.lock(sum)
	defer unlock()
	if info, err := s.Stat(sum); err == nil {
		return info.Size, nil
	}
	f, err := os.OpenFile(s.partialPath(sum), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return 0, fmt.Errorf("blob %s: open partial: %w", sum, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("blob %s: stat partial: %w", sum, err)
	}
	have := fi.Size()
	end := offset + int64(len(data))
	switch {
	case end <= have && offset <= have:
		return have, nil // a repeat
	case offset != have:
		return have, &GapError{Sum: sum, Have: have, Got: offset}
	}
	n := int64(len(data))
	if err := s.checkUnfinished(n); err != nil {
		return have, fmt.Errorf("blob %s: %w", sum, err)
	}
	if have == 0 {
		// A new upload: refused while blobs no job names already fill
		// their quota, before it takes any disk.
		if err := s.checkUnreferenced(sum, n); err != nil {
			return have, fmt.Errorf("blob %s: %w", sum, err)
		}
	}
	if err := s.checkRoom(n); err != nil {
		return have, fmt.Errorf("blob %s: %w", sum, err)
	}
	if _, err := f.WriteAt(data, offset); err != nil {
		// Whatever part landed is cut off again, so the partial stays a
		// prefix the upload resumes from.
		_ = f.Truncate(have)
		if isENOSPC(err) {
			err = fmt.Errorf("%w: %w", ErrNoSpace, err)
		}
		return have, fmt.Errorf("blob %s: write partial: %w", sum, err)
	}
	s.unfinished.Add(n)
	return end, nil
}

// Commit verifies that sum's partial upload is size bytes hashing to sum and
// makes it a complete blob: fsync, rename, fsync of the directory. A
// mismatch discards the partial (ErrMismatch); a short upload keeps it (a
// *GapError says how much is held). Committing a complete blob of that size
// is a no-op.
func (s *Store) Commit(sum Sum, size int64) error {
	if size < 0 || size > MaxSize {
		return fmt.Errorf("blob %s: size %d: %w (%d bytes)", sum, size, ErrOutOfRange, MaxSize)
	}
	unlock := s.lock(sum)
	defer unlock()
	if info, err := s.Stat(sum); err == nil {
		if info.Size != size {
			return fmt.Errorf("blob %s is %d bytes, not %d: %w", sum, info.Size, size, ErrMismatch)
		}
		return nil
	}
	path := s.partialPath(sum)
	if size == 0 {
		// An empty blob has no chunk to create its partial file.
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			return fmt.Errorf("blob %s: create: %w", sum, err)
		}
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &GapError{Sum: sum, Have: 0, Got: size}
	}
	if err != nil {
		return fmt.Errorf("blob %s: open partial: %w", sum, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("blob %s: stat partial: %w", sum, err)
	}
	switch {
	case fi.Size() < size:
		return &GapError{Sum: sum, Have: fi.Size(), Got: size}
	case fi.Size() > size:
		s.discard(sum, path)
		return fmt.Errorf("blob %s: %d bytes received, %d announced: %w", sum, fi.Size(), size, ErrMismatch)
	}
	// Refused, the upload stays a partial: it may commit once jobs name
	// the blobs that fill the quota, or GC removes it.
	if err := s.checkUnreferenced(sum, size); err != nil {
		return fmt.Errorf("blob %s: %w", sum, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("blob %s: fsync: %w", sum, err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("blob %s: hash: %w", sum, err)
	}
	if got := Sum(h.Sum(nil)); got != sum {
		s.discard(sum, path)
		return fmt.Errorf("blob %s: the %d bytes received hash to %s: %w", sum, size, got, ErrMismatch)
	}
	if err := os.Rename(path, s.blobPath(sum)); err != nil {
		return fmt.Errorf("blob %s: rename into place: %w", sum, err)
	}
	s.unfinished.Add(-size)
	if err := syncDir(s.blobs); err != nil {
		return fmt.Errorf("blob %s: %w", sum, err)
	}
	now := s.now()
	_ = os.Chtimes(s.blobPath(sum), now, now) // retention starts now, not at the first chunk
	s.log.Info("blob stored", "sum", sum.String(), "bytes", size)
	return nil
}

func (s *Store) discard(sum Sum, path string) {
	fi, err := os.Stat(path)
	if err != nil {
		return
	}
	if err := os.Remove(path); err != nil {
		s.log.Warn("cannot remove partial blob", "sum", sum.String(), "err", err)
		return
	}
	s.unfinished.Add(-fi.Size())
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir for fsync: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}

// ReadAt reads a complete blob's bytes from off into p, like io.ReaderAt.
func (s *Store) ReadAt(sum Sum, p []byte, off int64) (int, error) {
	f, err := os.Open(s.blobPath(sum))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("blob %s: %w", sum, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("blob %s: %w", sum, err)
	}
	defer f.Close()
	return f.ReadAt(p, off)
}

// Open opens a complete blob for reading; the caller closes it. A blob
// removed by GC while open stays readable until closed.
func (s *Store) Open(sum Sum) (*os.File, error) {
	f, err := os.Open(s.blobPath(sum))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("blob %s: %w", sum, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", sum, err)
	}
	return f, nil
}

// List returns every complete blob, ordered by sum.
func (s *Store) List() ([]Info, error) {
	var out []Info
	err := s.scan(s.blobs, func(sum Sum, fi fs.FileInfo) {
		out = append(out, Info{Sum: sum, Size: fi.Size(), Touched: fi.ModTime()})
	})
	return out, err
}

// Partials returns every upload in progress, ordered by sum.
func (s *Store) Partials() ([]Partial, error) {
	var out []Partial
	err := s.scan(s.partial, func(sum Sum, fi fs.FileInfo) {
		out = append(out, Partial{Sum: sum, Have: fi.Size(), Modified: fi.ModTime()})
	})
	return out, err
}

func (s *Store) scan(dir string, f func(Sum, fs.FileInfo)) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range entries {
		sum, err := ParseSum(e.Name())
		if err != nil || !e.Type().IsRegular() {
			continue // not ours; left alone
		}
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		f(sum, fi)
	}
	return nil
}

// GCPolicy says what GC may remove.
type GCPolicy struct {
	// Live reports whether a job that is not finished references sum; such
	// a blob is never removed.
	Live func(Sum) bool
	// Retention keeps an unreferenced blob this long after it was committed
	// or last touched: a client uploads before it submits the job naming it.
	Retention time.Duration
	// PartialTTL removes an upload nobody appended to for this long.
	PartialTTL time.Duration
}

// GCResult lists what one GC pass removed.
type GCResult struct {
	Blobs    []Sum
	Partials []Sum
	Bytes    int64
}

// GC removes complete blobs that no live job references and whose retention
// has passed, and partial uploads abandoned for PartialTTL.
func (s *Store) GC(p GCPolicy) (GCResult, error) {
	var res GCResult
	now := s.now()
	blobs, err := s.List()
	if err != nil {
		return res, err
	}
	for _, b := range blobs {
		if now.Sub(b.Touched) < p.Retention || (p.Live != nil && p.Live(b.Sum)) {
			continue
		}
		if _, ok := s.removeIf(b.Sum, s.blobPath(b.Sum), func(fi fs.FileInfo) bool { return now.Sub(fi.ModTime()) >= p.Retention }); ok {
			res.Blobs = append(res.Blobs, b.Sum)
			res.Bytes += b.Size
		}
	}
	partials, err := s.Partials()
	if err != nil {
		return res, err
	}
	for _, pt := range partials {
		if now.Sub(pt.Modified) < p.PartialTTL {
			continue
		}
		if size, ok := s.removeIf(pt.Sum, s.partialPath(pt.Sum), func(fi fs.FileInfo) bool { return now.Sub(fi.ModTime()) >= p.PartialTTL }); ok {
			s.unfinished.Add(-size)
			res.Partials = append(res.Partials, pt.Sum)
			res.Bytes += size
		}
	}
	if len(res.Blobs)+len(res.Partials) > 0 {
		s.log.Info("blob gc", "blobs", len(res.Blobs), "partials", len(res.Partials), "bytes", res.Bytes)
	}
	return res, nil
}

// removeIf removes path under sum's lock if still stale: an upload or a
// touch may have happened since the listing. It returns the size removed.
func (s *Store) removeIf(sum Sum, path string, stale func(fs.FileInfo) bool) (int64, bool) {
	unlock := s.lock(sum)
	defer unlock()
	fi, err := os.Stat(path)
	if err != nil || !stale(fi) {
		return 0, false
	}
	if err := os.Remove(path); err != nil {
		s.log.Warn("blob gc: cannot remove", "path", path, "err", err)
		return 0, false
	}
	return fi.Size(), true
}
