package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"tempest/api"
	"tempest/internal/devcluster"
	"tempest/internal/target"
)

// smallDisk mounts a tmpfs of size bytes and returns its path, unmounted
// when the test ends (after the cluster, whose cleanup runs first). It
// needs root: it skips, saying why, without it, and fails in CI, where the
// attack suite must run whole.
func smallDisk(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("this test mounts a small tmpfs and needs root; CI must run the attack suite as root")
		}
		t.Skip("needs root to mount a small tmpfs for the manager's data dir")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+strconv.FormatInt(size, 10), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// An upload that would fill the manager's disk is refused with 507 naming
// the free-space floor, and a small job submitted after it is stored and
// completes: the floor left the databases their room. Before the floor the
// upload took the disk and the next job failed its own write, answered
// outcome_unknown.
func TestDiskFullUploadIsRefusedAndJobsStillRun(t *testing.T) {
	disk := smallDisk(t, 64<<20)
	c := startWith(t, devcluster.Options{Managers: 1, Workers: 1, CoresPerWorker: 2,
		ManagerConfig: map[string]any{"data_dir": disk}})
	tgt := startTarget(t, target.DefaultConfig())

	blob := make([]byte, 96<<20) // more than the whole disk
	for i := range blob {
		blob[i] = byte(rand.Uint32())
	}
	h := sha256.Sum256(blob)
	sum := hex.EncodeToString(h[:])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := c.client.UploadBlob(ctx, sum, bytes.NewReader(blob), int64(len(blob)), nil)
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusInsufficientStorage ||
		apiErr.Code != api.CodeInsufficientStorage || !strings.Contains(apiErr.Message, "blob_min_free") {
		t.Fatalf("a 96 MiB upload to a 64 MiB disk: %v; want 507 insufficient_storage naming blob_min_free", err)
	}
	took := c.exactJob(tgt, "after-disk-full", 50)
	t.Logf("upload refused: %s; a job after it completed in %s", apiErr.Message, took.Round(time.Millisecond))
}

// Forty concurrent 1 MB JSON job bodies, each parsed and refused (400),
// keep the manager's peak RSS (VmHWM) within parseRSSBound: parsing runs
// under api_max_parsing (4), where before it took a manager to 2.46 GB.
// And a scrape of /metrics without the metrics token names no running job.
func TestConcurrentLargeJobBodiesKeepTheManagerSmall(t *testing.T) {
	// Measured with the race detector these binaries are built with: about
	// 110 MiB with parsing bounded at 4, 264 MiB with api_max_parsing 1000
	// (the heavier bodies took a manager to 2.46 GB unbounded).
	const parseRSSBound = 200 << 20
	// The operator's default, not tempest dev's: /metrics without a token
	// names no job.
	c := startWith(t, devcluster.Options{Managers: 1, Workers: 1, CoresPerWorker: 1,
		ManagerConfig: map[string]any{"metrics_job_series": false}})
	n, _ := c.Node(c.leader())
	running := c.submit(napJob("named-in-no-scrape", "60s", "30s"))
	c.waitRunning(running)
	if text, err := get("http://" + n.API + "/metrics"); err != nil {
		t.Fatal(err)
	} else if strings.Contains(string(text), running) || strings.Contains(string(text), `job_id="`) {
		t.Errorf("/metrics without a token names a job:\n%s", text)
	} else if !strings.Contains(string(text), "tempest_manager_is_leader") {
		t.Errorf("/metrics without a token lost the node's own series:\n%s", text)
	}
	// A job file the parser must read whole before it can refuse it: a
	// million small numbers under a key no workflow type has.
	var body bytes.Buffer
	body.WriteString(`{"name":"big","workflows":[{"name":"w","type":"sleep","duration":"1s","pad":[`)
	for body.Len() < 1<<20 {
		body.WriteString("0,")
	}
	body.WriteString("0]}]}")
	const clients = 40
	var wg sync.WaitGroup
	statuses := make(chan int, clients)
	for range clients {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", "http://"+n.API+"/v1/jobs", bytes.NewReader(body.Bytes()))
			req.Header.Set("Authorization", "Bearer "+c.Token())
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				statuses <- -1
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		})
	}
	wg.Wait()
	close(statuses)
	counts := map[int]int{}
	for s := range statuses {
		counts[s]++
	}
	if counts[http.StatusBadRequest] != clients {
		t.Errorf("answers %v, want %d × 400 (each body parsed and refused in turn)", counts, clients)
	}
	hwm, err := vmHWM(n.PID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d concurrent 1 MB bodies: manager peak RSS (VmHWM) %d MiB, bound %d MiB", clients, hwm>>20, parseRSSBound>>20)
	if hwm > parseRSSBound {
		t.Errorf("manager peak RSS %d MiB, bound %d MiB", hwm>>20, parseRSSBound>>20)
	}
}
