package blobstore

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed+1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// put writes b into st in chunks of size chunk and commits it.
func put(t *testing.T, st *Store, b []byte, chunk int) Sum {
	t.Helper()
	sum := Of(b)
	for off := 0; off < len(b); off += chunk {
		end := min(off+chunk, len(b))
		have, err := st.WriteChunk(sum, int64(off), b[off:end])
		if err != nil {
			t.Fatalf("WriteChunk at %d: %v", off, err)
		}
		if have != int64(end) {
			t.Fatalf("WriteChunk at %d: have %d, want %d", off, have, end)
		}
	}
	if err := st.Commit(sum, int64(len(b))); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	return sum
}

func openStore(t *testing.T, dir string, now func() time.Time) *Store {
	t.Helper()
	st, err := Open(dir, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestStoreRoundTripAndRangeRead(t *testing.T) {
	st := openStore(t, t.TempDir(), nil)
	b := randomBytes(3*ChunkSize+123, 1)
	sum := put(t, st, b, ChunkSize)
	info, err := st.Stat(sum)
	if err != nil || info.Size != int64(len(b)) {
		t.Fatalf("Stat = %+v, %v", info, err)
	}
	buf := make([]byte, 1000)
	n, err := st.ReadAt(sum, buf, int64(2*ChunkSize-500))
	if err != nil || n != 1000 || !bytes.Equal(buf, b[2*ChunkSize-500:2*ChunkSize+500]) {
		t.Fatalf("ReadAt across a chunk boundary: n=%d err=%v, bytes differ=%v", n, err, !bytes.Equal(buf, b[2*ChunkSize-500:2*ChunkSize+500]))
	}
	list, err := st.List()
	if err != nil || len(list) != 1 || list[0].Sum != sum {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if parts, _ := st.Partials(); len(parts) != 0 {
		t.Fatalf("partials after commit: %+v", parts)
	}
	// An empty blob needs no chunk.
	empty := put(t, st, nil, ChunkSize)
	if info, err := st.Stat(empty); err != nil || info.Size != 0 {
		t.Fatalf("empty blob: %+v, %v", info, err)
	}
	// Committing again, or writing chunks of a complete blob, is harmless.
	if err := st.Commit(sum, int64(len(b))); err != nil {
		t.Fatalf("second Commit: %v", err)
	}
	if have, err := st.WriteChunk(sum, 0, b[:10]); err != nil || have != int64(len(b)) {
		t.Fatalf("WriteChunk on a complete blob = %d, %v", have, err)
	}
}

func TestStoreChunksInOrderOnly(t *testing.T) {
	st := openStore(t, t.TempDir(), nil)
	b := randomBytes(3000, 2)
	sum := Of(b)
	if _, err := st.WriteChunk(sum, 0, b[:1000]); err != nil {
		t.Fatal(err)
	}
	// A repeat of the chunk (a retried call) changes nothing.
	if have, err := st.WriteChunk(sum, 0, b[:1000]); err != nil || have != 1000 {
		t.Fatalf("repeat = %d, %v", have, err)
	}
	var gap *GapError
	if _, err := st.WriteChunk(sum, 2000, b[2000:]); !errors.As(err, &gap) || gap.Have != 1000 {
		t.Fatalf("chunk past the end: %v, want a GapError with Have 1000", err)
	}
	if err := st.Commit(sum, 3000); !errors.As(err, &gap) || gap.Have != 1000 {
		t.Fatalf("short commit: %v, want a GapError", err)
	}
	if _, err := st.Stat(sum); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a short upload is visible: %v", err)
	}
	if _, err := st.WriteChunk(sum, 1000, b[1000:]); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(sum, 3000); err != nil {
		t.Fatal(err)
	}
}

func TestStoreRefusesHashMismatch(t *testing.T) {
	st := openStore(t, t.TempDir(), nil)
	b := randomBytes(5000, 3)
	sum := Of(b)
	bad := slices.Clone(b)
	bad[4321] ^= 1
	if _, err := st.WriteChunk(sum, 0, bad); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(sum, int64(len(bad))); !errors.Is(err, ErrMismatch) {
		t.Fatalf("Commit of corrupt bytes: %v, want ErrMismatch", err)
	}
	if _, err := st.Stat(sum); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a corrupt blob is visible: %v", err)
	}
	// The bad partial is gone, so a correct upload starts from zero.
	if have, complete, err := st.Have(sum); err != nil || have != 0 || complete {
		t.Fatalf("Have after mismatch = %d, %v, %v", have, complete, err)
	}
	put(t, st, b, 4096)
	// More bytes than announced is a mismatch too.
	c := randomBytes(100, 4)
	csum := Of(c)
	if _, err := st.WriteChunk(csum, 0, c); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(csum, 50); !errors.Is(err, ErrMismatch) {
		t.Fatalf("Commit with a short size: %v, want ErrMismatch", err)
	}
}

// crashChildEnv makes the test binary a child that uploads every chunk of a
// blob and then dies by SIGKILL before Commit could rename it.
const crashChildEnv = "BLOBSTORE_CRASH_CHILD_DIR"

func TestMain_crashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("only runs as the child of TestStoreCrashBeforeRenameLeavesNoBlob")
	}
	st := openStore(t, dir, nil)
	b := randomBytes(2*ChunkSize+7, 9)
	sum := Of(b)
	for off := 0; off < len(b); off += ChunkSize {
		if _, err := st.WriteChunk(sum, int64(off), b[off:min(off+ChunkSize, len(b))]); err != nil {
			t.Fatal(err)
		}
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // never reached
}

func TestStoreCrashBeforeRenameLeavesNoBlob(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMain_crashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v\n%s", err, out)
	}
	st := openStore(t, dir, nil)
	b := randomBytes(2*ChunkSize+7, 9)
	sum := Of(b)
	if _, err := st.Stat(sum); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after a crash before the rename the blob is visible: %v", err)
	}
	if list, _ := st.List(); len(list) != 0 {
		t.Fatalf("List after crash = %+v", list)
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "blobs")); len(entries) != 0 {
		t.Fatalf("files in blobs/ after crash: %v", entries)
	}
	parts, _ := st.Partials()
	if len(parts) != 1 || parts[0].Have != int64(len(b)) {
		t.Fatalf("Partials after crash = %+v, want the whole upload", parts)
	}
	// The upload resumes: committing what is there verifies and publishes it.
	if err := st.Commit(sum, int64(len(b))); err != nil {
		t.Fatalf("Commit after restart: %v", err)
	}
	got := make([]byte, len(b))
	if _, err := st.ReadAt(sum, got, 0); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("content after resume differs (err %v)", err)
	}
}

func TestStoreGC(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	dir := t.TempDir()
	st := openStore(t, dir, clock)
	live := put(t, st, randomBytes(100, 10), 64)
	dead := put(t, st, randomBytes(200, 11), 64)
	fresh := randomBytes(300, 12)
	abandoned := Of(randomBytes(400, 13))
	if _, err := st.WriteChunk(abandoned, 0, randomBytes(50, 14)); err != nil {
		t.Fatal(err)
	}
	// Files carry real mtimes; age them as the store's clock sees them.
	old := now.Add(-2 * time.Hour)
	for _, p := range []string{st.blobPath(live), st.blobPath(dead), st.partialPath(abandoned)} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	freshSum := put(t, st, fresh, 64) // committed "now": within retention
	policy := GCPolicy{
		Live:       func(s Sum) bool { return s == live },
		Retention:  time.Hour,
		PartialTTL: time.Hour,
	}
	res, err := st.GC(policy)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Blobs, []Sum{dead}) || !slices.Equal(res.Partials, []Sum{abandoned}) {
		t.Fatalf("GC removed blobs %v partials %v; want only %s and partial %s", res.Blobs, res.Partials, dead, abandoned)
	}
	for _, s := range []Sum{live, freshSum} {
		if _, err := st.Stat(s); err != nil {
			t.Errorf("GC removed %s: %v", s, err)
		}
	}
	if _, err := st.Stat(dead); !errors.Is(err, ErrNotFound) {
		t.Errorf("unreferenced old blob survived: %v", err)
	}
	// A touch (a client found the blob before submitting) restarts the
	// retention period.
	if err := os.Chtimes(st.blobPath(freshSum), old, old); err != nil {
		t.Fatal(err)
	}
	if err := st.Touch(freshSum); err != nil {
		t.Fatal(err)
	}
	if res, _ := st.GC(policy); len(res.Blobs) != 0 {
		t.Fatalf("GC removed a touched blob: %v", res.Blobs)
	}
}

func TestParseSum(t *testing.T) {
	s := Of([]byte("x"))
	got, err := ParseSum(s.String())
	if err != nil || got != s {
		t.Fatalf("ParseSum(String()) = %v, %v", got, err)
	}
	for _, bad := range []string{"", "abc", s.String()[:63] + "g", s.String() + "00"} {
		if _, err := ParseSum(bad); err == nil {
			t.Errorf("ParseSum(%q) accepted", bad)
		}
	}
}
