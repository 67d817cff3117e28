package manager

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"tempest/internal/jobfile"
	"tempest/internal/testutil"
	"tempest/wire"
)

// putBlob uploads b to m as a client would (chunks, then commit).
func putBlob(t *testing.T, m *Manager, b []byte) (string, error) {
	t.Helper()
	h := sha256.Sum256(b)
	sum := hex.EncodeToString(h[:])
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for off := 0; off < len(b); off += wire.MaxBlobChunk {
		end := min(off+wire.MaxBlobChunk, len(b))
		have, err := m.PutBlobChunk(ctx, sum, int64(off), b[off:end])
		if err != nil {
			t.Fatal(err)
		}
		if have != int64(end) {
			t.Fatalf("chunk at %d: leader holds %d", off, have)
		}
	}
	info, err := m.CommitBlob(ctx, sum, int64(len(b)))
	if err != nil {
		return sum, err
	}
	if !info.Durable || info.Replicas < min(2, len(m.cfg.Peers)) {
		return sum, fmt.Errorf("commit answered %+v", info)
	}
	return sum, nil
}

func holds(m *Manager, sum string) bool {
	_, err := os.Stat(filepath.Join(m.cfg.DataDir, "blobs", "blobs", sum))
	return err == nil
}

// A blob committed on the leader is durable on a majority with one
// follower cut off, and the follower gets it once back; a blob that cannot
// reach a majority is refused, and so is a job naming it or a blob nobody
// holds.
func TestBlobDurableOnMajorityAndSubmitRefusesOthers(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.leader()
	var cut *Manager
	for _, m := range c.running() {
		if m != l {
			cut = m
			break
		}
	}
	// Cut only blob traffic, so the election stays as it is.
	var mu sync.Mutex
	dropTo := map[string]bool{cut.ID(): true}
	c.hub.SetHook(func(from, to string, msg wire.Message) bool {
		mu.Lock()
		defer mu.Unlock()
		return !(dropTo[to] && msg.Type().Class() == wire.ClassBulk)
	})
	data := []byte(strings.Repeat("user,n\n", 1) + strings.Repeat("alice,1\n", 300_000))
	sum, err := putBlob(t, l, data)
	if err != nil {
		t.Fatalf("commit with one of three managers cut off: %v", err)
	}
	held := 0
	for _, m := range c.running() {
		if holds(m, sum) {
			held++
		}
	}
	if held != 2 || holds(cut, sum) {
		t.Fatalf("blob on %d managers (cut one holds it: %v), want the 2 reachable", held, holds(cut, sum))
	}

	// Both followers cut off from blobs: no majority, refused.
	mu.Lock()
	for _, m := range c.running() {
		dropTo[m.ID()] = m != l
	}
	mu.Unlock()
	lonely := []byte("user,n\nbob,2\n")
	lonelySum, err := putBlob(t, l, lonely)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeNoQuorum {
		t.Fatalf("commit without a majority: %v, want no_quorum", err)
	}
	job := func(sum string, text []byte) *wire.JobSubmission {
		sub, err := jobfile.Parse([]byte(`name: blobby
workflows:
  - {name: w, type: http, vus: 1, iterations: 1, data: {file: users.csv}, steps: [{name: s, url: "http://127.0.0.1:1/{{data.user}}"}]}
`), "job.yaml", c.reg, jobfile.WithDataFiles(jobfile.MapDataFiles(map[string][]byte{"users.csv": text})),
			jobfile.WithDataBlobs(map[string]string{"users.csv": sum}))
		if err != nil {
			t.Fatal(err)
		}
		return sub
	}
	_, err = l.Submit(context.Background(), job(lonelySum, lonely))
	if !errors.As(err, &we) || we.Code != wire.CodeNoQuorum {
		t.Fatalf("submit naming a blob on one manager: %v, want no_quorum", err)
	}
	ghost := []byte("user,n\nnobody,0\n")
	gh := sha256.Sum256(ghost)
	_, err = l.Submit(context.Background(), job(hex.EncodeToString(gh[:]), ghost))
	if !errors.As(err, &we) || we.Code != wire.CodeRejected || !strings.Contains(we.Message, "no manager holds") {
		t.Fatalf("submit naming a blob never uploaded: %v, want rejected", err)
	}

	// Healed: the submission goes through, the leader having pushed the
	// blob first, and the follower that missed the first blob gets it too.
	c.hub.SetHook(nil)
	if _, err := l.Submit(context.Background(), job(lonelySum, lonely)); err != nil {
		t.Fatalf("submit after heal: %v", err)
	}
	if _, err := l.Submit(context.Background(), job(sum, data)); err != nil {
		t.Fatalf("submit after heal: %v", err)
	}
	// Already durable, the first blob reaches the straggler in the
	// background.
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		for _, m := range c.running() {
			if !holds(m, sum) || !holds(m, lonelySum) {
				return fmt.Errorf("%s lacks a blob after the heal", m.ID())
			}
		}
		return nil
	})
}

// An http workflow whose data file is a blob, split in shards, runs on real
// workers: each worker reads the blob from the manager and the requests
// carry the file's rows. The params carry no CSV text.
func TestShardsShareADataBlob(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.addRealWorker("rw1", 2)
	c.addRealWorker("rw2", 2)
	l := waitWorkers(t, c, 2)
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path]++
		mu.Unlock()
	}))
	defer srv.Close()
	var csv strings.Builder
	csv.WriteString("user,pad\n")
	for i := range 4 {
		fmt.Fprintf(&csv, "u%d,%s\n", i, strings.Repeat("x", 200_000)) // 800 kB: one chunk, four rows
	}
	text := []byte(csv.String())
	sum, err := putBlob(t, l, text)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := jobfile.Parse([]byte(`name: shared
workflows:
  - name: w
    type: http
    vus: 4
    iterations: 40
    shards: 2
    data: {file: users.csv, mode: per_vu}
    steps: [{name: s, url: "`+srv.URL+`/{{data.user}}"}]
`), "job.yaml", c.reg, jobfile.WithDataFiles(jobfile.MapDataFiles(map[string][]byte{"users.csv": text})),
		jobfile.WithDataBlobs(map[string]string{"users.csv": sum}))
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range sub.Workflows {
		if len(spec.Params) > 4096 {
			t.Fatalf("shard params are %d bytes: the data file travels inside them", len(spec.Params))
		}
	}
	ack, err := l.Submit(context.Background(), sub)
	if err != nil {
		t.Fatal(err)
	}
	st := waitJob(t, l, ack.JobID, wire.JobCompleted, 30*time.Second)
	if st.Workflows[0].CompletedCount != 40 {
		t.Fatalf("completed %d, want 40", st.Workflows[0].CompletedCount)
	}
	mu.Lock()
	defer mu.Unlock()
	// per_vu: VU n (numbered across shards) reads row n-1, ten iterations each.
	for i := range 4 {
		if got := seen[fmt.Sprintf("/u%d", i)]; got != 10 {
			t.Errorf("/u%d requested %d times, want 10 (seen %v)", i, got, seen)
		}
	}
}

// GC keeps a blob a kept job names and removes one nobody names once the
// retention has passed.
func TestBlobGCKeepsReferencedBlobs(t *testing.T) {
	c := newTestCluster(t, 1, func(cfg *Config) { cfg.Retention = 50 * time.Millisecond })
	l := c.leader()
	used := []byte("user,n\nalice,1\n")
	usedSum, err := putBlob(t, l, used)
	if err != nil {
		t.Fatal(err)
	}
	unused := []byte("user,n\nbob,2\n")
	unusedSum, err := putBlob(t, l, unused)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := jobfile.Parse([]byte(`name: kept
workflows:
  - {name: w, type: http, vus: 1, iterations: 1, data: {file: users.csv}, steps: [{name: s, url: "http://127.0.0.1:1/{{data.user}}"}]}
`), "job.yaml", c.reg, jobfile.WithDataFiles(jobfile.MapDataFiles(map[string][]byte{"users.csv": used})),
		jobfile.WithDataBlobs(map[string]string{"users.csv": usedSum}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Submit(context.Background(), sub); err != nil { // no workers: it stays queued, and kept
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		l.collectBlobs()
		if holds(l, unusedSum) {
			return fmt.Errorf("unreferenced blob still stored")
		}
		return nil
	})
	if !holds(l, usedSum) {
		t.Fatal("GC removed the blob a queued job names")
	}
}

// A follower that missed a blob (the leader's pushes to it were lost) gets
// it from the other follower once it stores a replicated job naming it.
func TestFollowerFetchesMissingBlobOfReplicatedJob(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.leader()
	var f *Manager
	for _, m := range c.running() {
		if m != l {
			f = m
			break
		}
	}
	c.hub.SetHook(func(from, to string, msg wire.Message) bool {
		return !(from == l.ID() && to == f.ID() && msg.Type().Class() == wire.ClassBulk)
	})
	data := []byte("user,n\n" + strings.Repeat("carol,3\n", 200_000))
	sum, err := putBlob(t, l, data)
	if err != nil {
		t.Fatal(err)
	}
	if holds(f, sum) {
		t.Fatal("the follower got the blob although the leader's pushes to it are dropped")
	}
	sub, err := jobfile.Parse([]byte(`name: fetched
workflows:
  - {name: w, type: http, vus: 1, iterations: 1, data: {file: users.csv}, steps: [{name: s, url: "http://127.0.0.1:1/{{data.user}}"}]}
`), "job.yaml", c.reg, jobfile.WithDataFiles(jobfile.MapDataFiles(map[string][]byte{"users.csv": data})),
		jobfile.WithDataBlobs(map[string]string{"users.csv": sum}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Submit(context.Background(), sub); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if !holds(f, sum) {
			return fmt.Errorf("follower %s lacks the blob", f.ID())
		}
		return nil
	})
}
