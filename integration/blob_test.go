package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"tempest/api"
	"tempest/internal/target"
	"tempest/internal/testutil"
	"tempest/wire"
)

// rssKiB reads a process's resident set size from /proc.
func rssKiB(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, errors.New("no VmRSS line")
}

// watchRSS samples the managers' RSS until stop is closed and returns the
// peak per manager.
func watchRSS(c *cluster, stop <-chan struct{}) func() map[string]int64 {
	peak := map[string]int64{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			for _, n := range c.Nodes() {
				if n.Role != "manager" || !c.Running(n.Name) {
					continue
				}
				if kb, err := rssKiB(n.PID); err == nil {
					mu.Lock()
					peak[n.Name] = max(peak[n.Name], kb)
					mu.Unlock()
				}
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	return func() map[string]int64 {
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return peak
	}
}

// writeRandomFile writes size pseudo-random bytes to path in 1 MiB pieces.
func writeRandomFile(t *testing.T, path string, size int64, seed uint64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var key [32]byte
	key[0] = byte(seed)
	r := rand.NewChaCha8(key)
	buf := make([]byte, 1<<20)
	for left := size; left > 0; left -= int64(len(buf)) {
		n := min(int64(len(buf)), left)
		_, _ = r.Read(buf[:n])
		if _, err := f.Write(buf[:n]); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// blobFile is where a manager keeps a complete blob.
func blobFile(c *cluster, manager, sum string) string {
	n, _ := c.Node(manager)
	return filepath.Join(n.DataDir, "blobs", "blobs", sum)
}

// A 256 MiB file uploads through a follower (forwarded chunk by chunk to
// the leader), is answered only once a majority of the three managers hold
// it, reaches the third in the background, and no manager's memory comes
// near the file's size.
func TestBlobUpload256MiB(t *testing.T) {
	c := startCluster(t, 3, 1, 1)
	leader := c.leader()
	var follower string
	for _, n := range c.Nodes() {
		if n.Role == "manager" && n.Name != leader {
			follower = n.Name
			break
		}
	}
	fn, _ := c.Node(follower)
	viaFollower, err := api.NewClient([]string{fn.API}, c.Token())
	if err != nil {
		t.Fatal(err)
	}
	defer viaFollower.Close()

	const size = 256 << 20
	path := filepath.Join(t.TempDir(), "input.bin")
	writeRandomFile(t, path, size, 7)
	sum, n, err := api.HashFile(path)
	if err != nil || n != size {
		t.Fatalf("hash: %v (%d bytes)", err, n)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	// Baseline: the managers' RSS before the upload, after start-up.
	base := map[string]int64{}
	for _, n := range c.Nodes() {
		if n.Role == "manager" {
			if kb, err := rssKiB(n.PID); err == nil {
				base[n.Name] = kb
			}
		}
	}
	stop := make(chan struct{})
	peaks := watchRSS(c, stop)
	var sentAt time.Time
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	info, err := viaFollower.UploadBlob(ctx, sum, f, size, func(sent, total int64) {
		if sent == total {
			sentAt = time.Now()
		}
	})
	elapsed := time.Since(start)
	if err != nil {
		close(stop)
		t.Fatalf("upload: %v", err)
	}
	if !info.Durable || info.Replicas < 2 || info.Size != size || info.SHA256 != sum {
		t.Fatalf("upload answered %+v, want durable on at least 2 of 3", info)
	}
	// Durable means on disk, complete: count the managers holding the file.
	holders := 0
	var managers []string
	for _, n := range c.Nodes() {
		if n.Role == "manager" {
			managers = append(managers, n.Name)
		}
	}
	for _, m := range managers {
		if fi, err := os.Stat(blobFile(c, m, sum)); err == nil && fi.Size() == size {
			holders++
		}
	}
	if holders < 2 {
		t.Fatalf("upload acknowledged with the blob complete on %d managers", holders)
	}
	// The third manager catches up without anyone asking.
	testutil.Eventually(t, 3*time.Minute, 500*time.Millisecond, func() error {
		for _, m := range managers {
			fi, err := os.Stat(blobFile(c, m, sum))
			if err != nil || fi.Size() != size {
				return fmt.Errorf("%s does not hold the blob yet", m)
			}
		}
		return nil
	})
	close(stop)
	peak := peaks()
	t.Logf("uploaded %d MiB in %s (%.1f MiB/s; chunks sent after %s, then commit and replication) via %s; manager RSS (MiB) before: %v, peak: %v",
		size>>20, elapsed.Round(time.Millisecond), float64(size>>20)/elapsed.Seconds(), sentAt.Sub(start).Round(time.Millisecond),
		follower, mib(base), mib(peak))
	for m, kb := range peak {
		// Memory grows with the chunks in flight (a few MiB, several
		// copies each, multiplied by -race's shadow memory and GC lag:
		// some 60 MiB measured on a loaded 2-core machine), never with
		// the file: a manager holding it would grow by 256 MiB or more.
		if grew := (kb - base[m]) * 1024; grew > size/3 {
			t.Errorf("%s's RSS grew by %d MiB during a %d MiB upload", m, grew>>20, size>>20)
		}
	}
	// A second upload of the same file is skipped: the cluster has it.
	info2, err := viaFollower.UploadBlob(ctx, sum, f, size, func(sent, total int64) {
		t.Errorf("chunk sent for a blob the cluster already holds (%d of %d)", sent, total)
	})
	if err != nil || !info2.Durable {
		t.Fatalf("second upload: %+v, %v", info2, err)
	}
	// The CLI's view of the same: `tempest blob put` prints the sum.
	cmd := exec.Command(filepath.Join(binDir, "tempest"), "blob", "put", path)
	cmd.Env = append(c.Env(), "TEMPEST_API="+strings.Join(c.APIs(), ","))
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != sum {
		t.Fatalf("tempest blob put: %v, printed %q, want %s", err, out, sum)
	}
}

func mib(m map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range m {
		out[k] = v >> 10
	}
	return out
}

// The reproduction: an http workflow with shards: 3 and a 3.6 MiB
// CSV data file, submitted by the real CLI. The data file travels once, as
// a blob, so the replicated submission stays small: the job completes with
// the target's exact count, and after the leader is killed the new leader
// knows the job and its final counts (it had the replicated submission).
func TestShardedJobWithLargeDataFile(t *testing.T) {
	c := startCluster(t, 3, 3, 2)
	tgt := startTarget(t, target.DefaultConfig())
	id := submitBigDataJob(t, c, tgt.Addr(), "")
	st := c.waitStatus(id, 90*time.Second, terminal)
	if st.Status != wire.JobCompleted {
		t.Fatalf("job ended %s: %s", st.Status, st.Error)
	}
	wf := st.Workflows[0]
	checkFencedCounts(t, st, 900, tgt.Stats().Requests)
	if workers := strings.Split(wf.Worker, ","); len(workers) != 3 {
		t.Fatalf("shards ran on %q, want three workers", wf.Worker)
	}

	old := c.leader()
	if err := c.Kill(old); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, 200*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		got, err := c.client.Job(ctx, id)
		if err != nil {
			return err
		}
		if got.Status != wire.JobCompleted || got.Workflows[0].CompletedCount != 900 {
			return fmt.Errorf("new leader shows %s with %d completed", got.Status, got.Workflows[0].CompletedCount)
		}
		return nil
	})
}

// The same job through three gates into two datacenters: the CLI uploads
// the data file to the gates (stored on a majority of them), each chosen
// datacenter's manager fetches it from the gate with the job, and both
// datacenters run it with the target's exact count.
func TestGatedJobWithLargeDataFile(t *testing.T) {
	c := startGated(t, 3, 2, 1, 3)
	tgt := startTarget(t, target.DefaultConfig())
	id := submitBigDataJob(t, c, tgt.Addr(), "datacenters: 2\n")
	st := c.waitStatus(id, 120*time.Second, terminal)
	if st.Status != wire.JobCompleted || len(st.Datacenters) != 2 {
		t.Fatalf("job ended %s in %d datacenters: %s", st.Status, len(st.Datacenters), st.Error)
	}
	checkFencedCounts(t, st, 2*900, tgt.Stats().Requests)
	held := map[string]int{}
	for _, n := range c.Nodes() {
		if n.Role != "manager" && n.Role != "gate" {
			continue
		}
		entries, _ := os.ReadDir(filepath.Join(n.DataDir, "blobs", "blobs"))
		if len(entries) > 0 {
			held[n.Role]++
		}
	}
	if held["manager"] != 2 || held["gate"] < 2 {
		t.Fatalf("blob held by %d managers (want both datacenters') and %d gates (want a majority)", held["manager"], held["gate"])
	}
}

// checkFencedCounts checks a one-step http job's counts against its
// target's: every iteration counted once as completed, and the only failures
// the requests a fenced attempt had in flight when it was stopped (on a
// loaded machine a dispatch's answer can break after the worker started
// the run; the manager then stops that attempt before it retries, keeping
// its counts, docs/load-tests.md). Those may or may not have reached the
// target, so its count lies between the completed and all counted.
func checkFencedCounts(t *testing.T, st *api.JobStatus, iterations int64, target uint64) {
	t.Helper()
	if st.TotalCompleted != iterations {
		t.Fatalf("job counted %d completed, want the %d iterations once each", st.TotalCompleted, iterations)
	}
	var lost int
	for _, wf := range st.Workflows {
		lost += len(wf.LostAttempts)
		for _, step := range wf.Steps {
			for class, n := range step.Errors {
				if class != "cancelled" {
					t.Fatalf("workflow %s step %s: %d failed as %s", wf.Name, step.Name, n, class)
				}
			}
		}
	}
	if st.TotalFailed > 0 && lost == 0 {
		t.Fatalf("%d requests cancelled without a lost attempt", st.TotalFailed)
	}
	if total := st.TotalCompleted + st.TotalFailed; target < uint64(st.TotalCompleted) || target > uint64(total) {
		t.Fatalf("target answered %d requests, the job counted %d completed and %d failed", target, st.TotalCompleted, st.TotalFailed)
	}
}

// submitBigDataJob writes a 3.6 MiB CSV data file and an http job with
// shards: 3 naming it, and submits it with the real CLI.
func submitBigDataJob(t *testing.T, c *cluster, targetAddr, extra string) string {
	t.Helper()
	dir := t.TempDir()
	var csv strings.Builder
	csv.WriteString("user,pad\n")
	for i := 0; csv.Len() < 3_600_000; i++ {
		fmt.Fprintf(&csv, "u%07d,%s\n", i, strings.Repeat("x", 40))
	}
	if err := os.WriteFile(filepath.Join(dir, "users.csv"), []byte(csv.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	job := fmt.Sprintf(`name: big-data
timeout: 120s
%sworkflows:
  - name: users
    type: http
    cores: 1
    vus: 3
    iterations: 900
    shards: 3
    data: {file: users.csv, mode: per_vu}
    steps:
      - {name: get, method: GET, url: "http://%s/u/{{data.user}}"}
`, extra, targetAddr)
	jobPath := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(jobPath, []byte(job), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, "tempest"), "submit", jobPath)
	cmd.Env = append(c.Env(), "TEMPEST_API="+strings.Join(c.APIs(), ","))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tempest submit: %v\n%s", err, out)
	}
	id := strings.TrimSpace(string(out[strings.LastIndexByte(strings.TrimSpace(string(out)), '\n')+1:]))
	if id == "" {
		t.Fatalf("tempest submit printed no job id: %s", out)
	}
	return id
}
