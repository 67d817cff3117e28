package blobstore

import (
	"errors"
	"fmt"
	"syscall"
)

// Limits bound what uploads may take of a node's disk. The blob store
// shares its filesystem with the node's databases: an upload that took the
// last free byte would turn the next job's intake into a failed write. So
// every chunk must leave a floor free, and two quotas bound what a client
// can pin without running anything: bytes of uploads not yet committed, and
// bytes of committed blobs no kept job names.
type Limits struct {
	// MinFree is the free space, in bytes, a blob write must leave on the
	// store's filesystem. Zero: DefaultMinFree of the filesystem's size.
	MinFree int64
	// MaxUnfinished bounds the bytes held by uploads not yet committed.
	// Zero: DefaultMaxUnfinished.
	MaxUnfinished int64
	// MaxUnreferenced bounds the bytes of complete blobs that Referenced
	// does not name. Zero: DefaultMaxUnreferenced.
	MaxUnreferenced int64
	// Referenced returns the blobs kept jobs name, read when an upload
	// starts or commits; nil names none, so every complete blob counts
	// against MaxUnreferenced.
	Referenced func() map[Sum]bool
}

// referenced is the set Limits.Referenced returns, or none.
func (l Limits) referenced() map[Sum]bool {
	if l.Referenced == nil {
		return nil
	}
	return l.Referenced()
}

// Defaults. The floor is the smaller of 1 GiB and 5 % of the filesystem: a
// gigabyte is years of job records and logs at any rate a manager takes
// jobs, and on a small volume (a 4 GiB disk, a test's tmpfs) a fixed
// gigabyte would be most of it, while 5 % still leaves the databases
// hundreds of times the room one job takes. The quotas let one upload of
// the largest blob (MaxSize) through at a time and keep a few of them
// waiting for the job that names them.
const (
	DefaultMinFreeCap      int64 = 1 << 30
	DefaultMinFreePercent        = 5
	DefaultMaxUnfinished         = MaxSize
	DefaultMaxUnreferenced       = 4 * MaxSize
)

// DefaultMinFree is the floor for a filesystem of total bytes.
func DefaultMinFree(total int64) int64 {
	return min(DefaultMinFreeCap, total*DefaultMinFreePercent/100)
}

// Errors callers branch on.
var (
	// ErrNoSpace: the write would cross the free-space floor or a quota,
	// or the filesystem itself is full. Nothing was written.
	ErrNoSpace = errors.New("not enough blob storage")
	// ErrOutOfRange: an offset or size past MaxSize.
	ErrOutOfRange = errors.New("outside the largest blob size")
)

// space is what a filesystem has: free bytes an unprivileged writer may
// use, and its size.
type space struct{ free, total int64 }

// noSpace wraps ErrNoSpace with why.
func noSpace(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrNoSpace, fmt.Sprintf(format, args...))
}

// isENOSPC reports whether a write failed on a full filesystem or quota.
func isENOSPC(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// floor is the free space writes must leave on a filesystem of sp.total.
func (s *Store) floor(sp space) int64 {
	if s.limits.MinFree > 0 {
		return s.limits.MinFree
	}
	return DefaultMinFree(sp.total)
}

// checkRoom refuses a write of n more bytes that would leave less than the
// floor free. Called under the sum's lock; two sums writing at once may
// each pass with room for one, which costs at most a chunk each below the
// floor, not the disk.
func (s *Store) checkRoom(n int64) error {
	sp, err := s.space(s.partial)
	if err != nil {
		return err
	}
	if fl := s.floor(sp); sp.free-n < fl {
		return noSpace("writing %s more would leave %s free on the blob store's disk, under the %s it keeps for the node's databases (blob_min_free); "+
			"free space by submitting or removing jobs that name uploaded blobs, or give the node more disk",
			formatBytes(n), formatBytes(max(sp.free-n, 0)), formatBytes(fl))
	}
	return nil
}

// checkUnfinished refuses n more bytes of uploads in progress past the
// quota.
func (s *Store) checkUnfinished(n int64) error {
	limit := s.limits.MaxUnfinished
	if limit <= 0 {
		limit = DefaultMaxUnfinished
	}
	if held := s.unfinished.Load(); held+n > limit {
		return noSpace("uploads not yet committed hold %s, and %s more would pass the %s allowed (blob_max_unfinished); "+
			"finish or abandon them (an upload nobody appends to is removed after %s)",
			formatBytes(held), formatBytes(n), formatBytes(limit), PartialTTL)
	}
	return nil
}

// checkUnreferenced refuses adding sum's n bytes as a complete blob when
// the blobs no kept job names would then pass the quota. A blob a job names
// (a peer fetching one a job it stores needs) is never refused by it.
func (s *Store) checkUnreferenced(sum Sum, n int64) error {
	refs := s.limits.referenced()
	if refs[sum] {
		return nil
	}
	limit := s.limits.MaxUnreferenced
	if limit <= 0 {
		limit = DefaultMaxUnreferenced
	}
	blobs, err := s.List()
	if err != nil {
		return err
	}
	var held int64
	for _, b := range blobs {
		if !refs[b.Sum] {
			held += b.Size
		}
	}
	if held+n > limit {
		return noSpace("blobs no job names hold %s, and %s more would pass the %s allowed (blob_max_unreferenced); "+
			"submit the jobs that name them, or wait for their retention to end", formatBytes(held), formatBytes(n), formatBytes(limit))
	}
	return nil
}

// formatBytes renders n in binary units, as the config takes them.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
