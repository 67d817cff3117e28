// Package integration runs the real binaries as separate processes on
// loopback, kills them with SIGKILL, restarts them, and polls for the
// outcome with deadlines.
package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tempest/api"
	"tempest/gate"
	"tempest/internal/devcluster"
	"tempest/internal/target"
	"tempest/internal/testutil"
	"tempest/security"
	"tempest/transport"
	"tempest/wire"
)

// binDir holds the binaries built once for the whole package.
var binDir string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "tempest-integration-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	for bin, pkg := range map[string]string{
		"tempest-manager": "../cmd/manager",
		"tempest-worker":  "../cmd/worker",
		"tempest-gate":    "../cmd/gate",
		"tempest":         "../cmd/tempest",
	} {
		build := exec.Command("go", "build", "-race", "-o", filepath.Join(dir, bin), pkg)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build", bin+":", err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type cluster struct {
	*devcluster.Cluster
	t      *testing.T
	client *api.Client
	// direct reaches the managers when client goes through gates.
	direct *api.Client
}

// startCluster runs managers and workers as real processes and waits until
// a leader is elected and every worker is registered.
func startCluster(t *testing.T, managers, workers, cores int) *cluster {
	t.Helper()
	return startWith(t, devcluster.Options{Managers: managers, Workers: workers, CoresPerWorker: cores})
}

// startGated runs gates in front of dcs datacenters of managers and
// workers; the cluster's client goes through the gates.
//
// The lease_ttl is the production default. The test SWIM and election
// profiles detect failures fast, so on a loaded machine (-race, many
// processes on 2 cores) gates do change leader while a job runs; a lease
// shorter than production's then lapses although nothing failed. Tests that
// are about a lapsing lease set their own.
func startGated(t *testing.T, gates, dcs, managers, workers int) *cluster {
	t.Helper()
	return startWith(t, devcluster.Options{Gates: gates, Datacenters: dcs, Managers: managers, Workers: workers,
		CoresPerWorker: 2, LeaseTTL: gate.DefaultConfig().LeaseTTL})
}

// startWith starts a cluster laid out by opts (Dir, BinDir and Logger are
// filled in) and waits until it is ready.
func startWith(t *testing.T, opts devcluster.Options) *cluster {
	t.Helper()
	opts.Dir, opts.BinDir = t.TempDir(), binDir
	if opts.WorkerConfig == nil {
		opts.WorkerConfig = testWorkerConfig(t)
	}
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := devcluster.Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	cl := &cluster{Cluster: c, t: t}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c.Stop(ctx)
		if t.Failed() {
			dumpLogs(t, c)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.WaitReady(ctx); err != nil {
		t.Fatalf("cluster not ready: %v", err)
	}
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	cl.client = client
	if opts.Gates > 0 {
		if cl.direct, err = api.NewClient(c.ManagerAPIs(""), c.Token()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.direct.Close)
	}
	return cl
}

func dumpLogs(t *testing.T, c *devcluster.Cluster) {
	for _, n := range c.Nodes() {
		b, err := os.ReadFile(n.Log)
		if err != nil {
			continue
		}
		if len(b) > 8000 {
			b = b[len(b)-8000:]
		}
		t.Logf("==== %s (%s) last log lines:\n%s", n.Name, filepath.Base(n.Log), b)
	}
}

// keepLogsOnFailure copies every node's whole log under $TEMPEST_KEEP_LOGS
// when t fails. Call it right after starting the cluster: cleanups run last
// first, so the copy is made before the cluster's cleanup removes the logs.
func keepLogsOnFailure(t *testing.T, c *cluster) {
	t.Cleanup(func() {
		dir := os.Getenv("TEMPEST_KEEP_LOGS")
		if dir == "" || !t.Failed() {
			return
		}
		// A directory of its own per failure: runs with -count keep each.
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Logf("keep logs: %v", err)
			return
		}
		sub, err := os.MkdirTemp(dir, strings.ReplaceAll(t.Name(), "/", "_")+"-")
		if err != nil {
			t.Logf("keep logs: %v", err)
			return
		}
		keepNodeLogs(t, c, sub)
	})
}

// keepNodeLogs copies every node's whole log into dir: the failure dump
// shows only their tails.
func keepNodeLogs(t *testing.T, c *cluster, dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("keep logs: %v", err)
		return
	}
	for _, n := range c.Nodes() {
		if b, err := os.ReadFile(n.Log); err == nil {
			_ = os.WriteFile(filepath.Join(dir, n.Name+".log"), b, 0o644)
		}
	}
	t.Logf("node logs kept in %s", dir)
}

// wireNode is a bare QUIC transport holding secret, for tests that speak to
// nodes as another (deposed, or not rotated) cluster member would.
func wireNode(t *testing.T, id, secret string) *transport.QUIC {
	t.Helper()
	kr, err := security.NewKeyring(secret, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := transport.DefaultConfig()
	cfg.NodeID = id
	cfg.Keyring = kr
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	tr, err := transport.NewQUIC(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// startTarget runs the built-in HTTP target in-process.
func startTarget(t *testing.T, cfg target.Config) *target.Server {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	srv, err := target.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return srv
}

// submit sends a job file and returns the job id.
func (c *cluster) submit(job string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id, err := c.client.Submit(ctx, []byte(job), "job.yaml")
	if err != nil {
		c.t.Fatalf("submit: %v", err)
	}
	return id
}

// waitStatus polls a job until cond holds.
func (c *cluster) waitStatus(id string, within time.Duration, cond func(*api.JobStatus) error) *api.JobStatus {
	c.t.Helper()
	var last *api.JobStatus
	testutil.Eventually(c.t, within, 100*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		st, err := c.client.Job(ctx, id)
		if err != nil {
			return err
		}
		last = st
		return cond(st)
	})
	return last
}

// waitRunning polls until every workflow of a job is RUNNING.
func (c *cluster) waitRunning(id string) *api.JobStatus {
	c.t.Helper()
	return c.waitStatus(id, 20*time.Second, func(st *api.JobStatus) error {
		if len(st.Workflows) == 0 {
			return fmt.Errorf("job %s has no workflows yet (%s)", id, st.Status)
		}
		for _, wf := range st.Workflows {
			if wf.Status != wire.WorkflowRunning {
				return fmt.Errorf("%s is %s", wf.Name, wf.Status)
			}
		}
		return nil
	})
}

func terminal(st *api.JobStatus) error {
	if !st.Status.Terminal() {
		return fmt.Errorf("job %s is %s", st.JobID, st.Status)
	}
	return nil
}

// nodeClient is a client of n's API alone, with no failover to another
// node: for asking one manager what it, itself, knows.
func (c *cluster) nodeClient(n *devcluster.Node) (*api.Client, error) {
	return api.NewClient([]string{"http://" + n.API}, c.Token())
}

// leader returns the name of the manager that leads now.
func (c *cluster) leader() string {
	c.t.Helper()
	var name string
	testutil.Eventually(c.t, 20*time.Second, 100*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		view, err := c.views(ctx)
		if err != nil {
			return err
		}
		for _, n := range view.Nodes {
			if n.Role == "manager" && n.IsLeader && c.Running(n.Name) {
				name = n.Name
				return nil
			}
		}
		return fmt.Errorf("no live leader in %d nodes", len(view.Nodes))
	})
	return name
}

// testWorkerConfig is what the workers of an integration cluster allow
// unless a test says otherwise (exec and path: sources are off by
// default): path: sources under the shared data directory and exec of the
// example program, by its path and uploaded, plus programs.
func testWorkerConfig(t *testing.T, programs ...string) map[string]any {
	t.Helper()
	example, err := filepath.Abs("../examples/rainstorm-upper.sh")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	// path: sources read the shared data beside the module (testutil.SharedData).
	data := filepath.Join(filepath.Dir(root), "shared", "data")
	execCfg := map[string]any{"enabled": true, "programs": append([]string{example}, programs...),
		"program_sums": []string{hex.EncodeToString(sum[:])}}
	if os.Geteuid() == 0 {
		// A root worker refuses exec without exec.user; these tests' programs
		// live in the checkout, which another user may not reach.
		execCfg["user"] = "root"
	}
	return map[string]any{"source_dirs": []string{data}, "exec": execCfg}
}
