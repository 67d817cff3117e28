package blobstore

import (
	"errors"
	"strings"
	"testing"
)

// diskOf makes st see a filesystem of total bytes whose free space shrinks
// as the store's files grow, from free bytes at the start.
func diskOf(st *Store, total, free int64) {
	st.space = func(string) (space, error) {
		used := st.unfinished.Load()
		if blobs, err := st.List(); err == nil {
			for _, b := range blobs {
				used += b.Size
			}
		}
		return space{free: free - used, total: total}, nil
	}
}

func TestDefaultMinFreeIsTheSmallerOfAGigabyteAndFivePercent(t *testing.T) {
	for _, c := range []struct{ total, want int64 }{
		{64 << 20, 64 << 20 * 5 / 100}, // a test's tmpfs: 5 %
		{4 << 30, 4 << 30 * 5 / 100},   // a small volume: 5 %, not a quarter of it
		{1 << 40, 1 << 30},             // a large disk: 1 GiB
	} {
		if got := DefaultMinFree(c.total); got != c.want {
			t.Errorf("DefaultMinFree(%d) = %d, want %d", c.total, got, c.want)
		}
	}
}

func TestWriteChunkKeepsTheFreeSpaceFloor(t *testing.T) {
	st := openStore(t, t.TempDir(), nil)
	// 100 MiB disk, 10 MiB free: the default floor is 5 MiB, so about 5
	// MiB of chunks fit and the next is refused before it is written.
	diskOf(st, 100<<20, 10<<20)
	b := randomBytes(8*ChunkSize, 7)
	sum := Of(b)
	var off int64
	var err error
	for off = 0; off < int64(len(b)); off += ChunkSize {
		if _, err = st.WriteChunk(sum, off, b[off:off+ChunkSize]); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("writing 8 MiB with 10 MiB free under a 5 MiB floor: err %v, want ErrNoSpace", err)
	}
	if !strings.Contains(err.Error(), "blob_min_free") {
		t.Errorf("the refusal does not name the setting: %v", err)
	}
	if off != 5*ChunkSize {
		t.Errorf("refused at offset %d, want %d (the chunk that would cross the floor)", off, 5*ChunkSize)
	}
	if have, _, _ := st.Have(sum); have != off {
		t.Errorf("the refused chunk changed the upload: holds %d, want %d", have, off)
	}
	// A configured floor replaces the default.
	st.SetLimits(Limits{MinFree: 1 << 20})
	if _, err := st.WriteChunk(sum, off, b[off:off+ChunkSize]); err != nil {
		t.Fatalf("with a 1 MiB floor the chunk fits: %v", err)
	}
}

func TestUnfinishedUploadsHaveAQuota(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir, nil)
	st.SetLimits(Limits{MaxUnfinished: 3 * ChunkSize})
	a, b := randomBytes(2*ChunkSize, 1), randomBytes(2*ChunkSize, 2)
	for off := 0; off < len(a); off += ChunkSize {
		if _, err := st.WriteChunk(Of(a), int64(off), a[off:off+ChunkSize]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.WriteChunk(Of(b), 0, b[:ChunkSize]); err != nil {
		t.Fatalf("the third MiB fits the quota: %v", err)
	}
	if _, err := st.WriteChunk(Of(b), ChunkSize, b[ChunkSize:]); !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "blob_max_unfinished") {
		t.Fatalf("a fourth MiB of unfinished uploads: err %v, want ErrNoSpace naming blob_max_unfinished", err)
	}
	// Committing frees the quota, and a reopened store counts what its
	// partial files hold.
	if err := st.Commit(Of(a), int64(len(a))); err != nil {
		t.Fatal(err)
	}
	if _, err := st.WriteChunk(Of(b), ChunkSize, b[ChunkSize:]); err != nil {
		t.Fatalf("after a commit the quota has room: %v", err)
	}
	re := openStore(t, dir, nil)
	if got := re.unfinished.Load(); got != int64(len(b)) {
		t.Errorf("a reopened store counts %d unfinished bytes, want %d", got, len(b))
	}
}

func TestUnreferencedBlobsHaveAQuota(t *testing.T) {
	st := openStore(t, t.TempDir(), nil)
	refs := map[Sum]bool{}
	st.SetLimits(Limits{MaxUnreferenced: 2*ChunkSize + 10, Referenced: func() map[Sum]bool { return refs }})
	first := put(t, st, randomBytes(2*ChunkSize, 1), ChunkSize)
	c := randomBytes(ChunkSize, 3)
	if _, err := st.WriteChunk(Of(c), 0, c); !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "blob_max_unreferenced") {
		t.Fatalf("a new upload while unreferenced blobs fill the quota: err %v, want ErrNoSpace naming blob_max_unreferenced", err)
	}
	// Once a job names the first blob, the quota has room again.
	refs[first] = true
	put(t, st, c, ChunkSize)
	// A commit that would pass the quota is refused too, and the upload is
	// kept for later.
	d := randomBytes(2*ChunkSize, 4)
	if _, err := st.WriteChunk(Of(d), 0, d[:ChunkSize]); err != nil {
		t.Fatal(err)
	}
	if _, err := st.WriteChunk(Of(d), ChunkSize, d[ChunkSize:]); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(Of(d), int64(len(d))); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("a commit past the quota: err %v, want ErrNoSpace", err)
	}
	if have, complete, _ := st.Have(Of(d)); complete || have != int64(len(d)) {
		t.Errorf("the refused commit lost the upload: have %d complete %v", have, complete)
	}
	// A blob a job names (a peer fetching it for that job) is never
	// refused by the quota.
	refs[Of(d)] = true
	if err := st.Commit(Of(d), int64(len(d))); err != nil {
		t.Fatalf("a commit of a referenced blob: %v", err)
	}
}

func TestOffsetsPastTheLargestBlobAreOutOfRange(t *testing.T) {
	st := openStore(t, t.TempDir(), nil)
	sum := Of([]byte("x"))
	for _, off := range []int64{MaxSize, MaxSize - 1, -1} {
		if _, err := st.WriteChunk(sum, off, []byte("xy")); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("WriteChunk at %d: err %v, want ErrOutOfRange", off, err)
		}
	}
	if err := st.Commit(sum, MaxSize+1); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("Commit of %d bytes: err %v, want ErrOutOfRange", MaxSize+1, err)
	}
}
