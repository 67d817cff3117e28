package integration

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tempest/api"
	"tempest/internal/target"
	"tempest/internal/testutil"
	"tempest/security"
	"tempest/wire"
)

// TestRollingSecretRotation rotates AUTH_SECRET across a running cluster the
// way README's "Rotating AUTH_SECRET" tells an operator to: three passes
// (install, use, remove), one node at a time, each by rewriting the node's
// secret file and sending SIGHUP, or on some nodes by SIGKILL and a restart
// from the file. While it runs, an http job keeps every plane busy
// (dispatch, progress, replication, elections, SWIM). It must hold that:
//   - the job completes, and its request count equals the target's;
//   - no node other than one being restarted is ever seen dead;
//   - no manager counts an envelope it could not open;
//   - every node ends sending with the new key and accepting only it;
//   - afterwards a peer holding only the old secret is refused.
func TestRollingSecretRotation(t *testing.T) {
	c := startGated(t, 3, 1, 3, 2)
	tgt := startTarget(t, target.DefaultConfig())
	old := c.Secret()
	next, err := security.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	oldKey, nextKey := keyHex(old), keyHex(next)

	// Long enough to outlast the rotation (the 3 x 5 steps take about 8 s
	// on an idle 2-core machine; 25 s leaves room for a loaded one). The
	// test checks below that it did.
	id := c.submit(httpJob("rotation", "http://"+tgt.Addr(), 2, "25s", ""))
	// Through a gate the worker reads "dc/worker".
	busy := c.waitRunning(id).Workflows[0].Worker
	busy = busy[strings.IndexByte(busy, '/')+1:]

	var nodes, workers, managers, gates []string
	for _, n := range c.Nodes() {
		nodes = append(nodes, n.Name)
		switch n.Role {
		case "worker":
			workers = append(workers, n.Name)
		case "gate":
			gates = append(gates, n.Name)
		default:
			managers = append(managers, n.Name)
		}
	}
	idle := workers[0]
	if idle == busy {
		idle = workers[1]
	}

	w := startAliveWatch(t, c, nodes)
	began := time.Now()
	passes := []struct {
		name              string
		current, previous string
		send              string
		accept            []string
		restart           func() string // the node this pass restarts instead of reloading
	}{
		// A worker with no work restarts: nothing of the job is lost.
		{"install", old, next, oldKey, []string{oldKey, nextKey}, func() string { return idle }},
		// A manager that does not lead restarts: no election is forced.
		{"use", next, old, nextKey, []string{nextKey, oldKey}, func() string { return c.follower() }},
		// So does a gate that does not lead.
		{"remove", next, "", nextKey, []string{nextKey}, func() string { return c.followerGate() }},
	}
	for _, p := range passes {
		restart := ""
		if p.restart != nil {
			restart = p.restart()
		}
		for _, name := range slices.Concat(managers, workers, gates) {
			if err := c.SetSecrets(name, p.current, p.previous); err != nil {
				t.Fatal(err)
			}
			if name == restart {
				w.exempt(name, true)
				if err := c.Kill(name); err != nil {
					t.Fatal(err)
				}
				if err := c.Restart(name); err != nil {
					t.Fatal(err)
				}
			} else if err := c.Signal(name, syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			// The operator's check before the next node: `tempest
			// cluster` shows this one on the pass's keys.
			c.waitKeys(p.name, name, p.send, p.accept)
			if name == restart {
				w.exempt(name, false)
			}
		}
		t.Logf("pass %s done on every node at +%s", p.name, time.Since(began).Round(100*time.Millisecond))
	}
	w.stop()

	if st, err := c.client.Job(context.Background(), id); err != nil || st.Status.Terminal() {
		t.Fatalf("the job should still run after the rotation, or it did not cover it (lengthen it): %+v, %v", st, err)
	}
	st := c.waitStatus(id, 60*time.Second, terminal)
	if st.Status != wire.JobCompleted || st.Workflows[0].Attempts != 1 {
		t.Fatalf("job ended %s after %d attempts: %+v", st.Status, st.Workflows[0].Attempts, st)
	}
	if got, want := uint64(st.Workflows[0].CompletedCount+st.Workflows[0].FailedCount), tgt.Stats().Requests; got != want {
		t.Errorf("job counted %d requests, the target answered %d", got, want)
	}
	for _, m := range slices.Concat(managers, gates) {
		n, _ := c.Node(m)
		if v := authFailures(t, "http://"+n.API); v != 0 {
			t.Errorf("%s counted %d envelopes it could not open during the rotation", m, v)
		}
	}

	// After the remove pass a node still on the old secret alone is
	// refused by workers and managers alike.
	tr := wireNode(t, "left-behind", old)
	for _, name := range []string{busy, managers[0], gates[0]} {
		n, _ := c.Node(name)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := tr.Call(ctx, n.QUIC, &wire.Ping{Seq: 1})
		cancel()
		if wire.CodeOf(err) != wire.CodeUnauthenticated {
			t.Errorf("%s: old-secret ping answered %v, want %s", name, err, wire.CodeUnauthenticated)
		}
	}
}

func keyHex(secret string) string { return fmt.Sprintf("%08x", security.KeyID(secret)) }

// follower is a manager that runs and does not lead.
func (c *cluster) follower() string {
	c.t.Helper()
	leader := c.leader()
	for _, n := range c.Nodes() {
		if n.Role == "manager" && n.Name != leader && c.Running(n.Name) {
			return n.Name
		}
	}
	c.t.Fatal("no follower manager")
	return ""
}

// followerGate is a gate that runs and does not lead.
func (c *cluster) followerGate() string {
	c.t.Helper()
	leader := c.gateLeader()
	for _, n := range c.Nodes() {
		if n.Role == "gate" && n.Name != leader && c.Running(n.Name) {
			return n.Name
		}
	}
	c.t.Fatal("no follower gate")
	return ""
}

// views is the cluster view through the entry points and, behind gates,
// the managers' own (gates do not list workers), merged by node name; the
// datacenter's view wins for its own nodes.
func (c *cluster) views(ctx context.Context) (*api.ClusterView, error) {
	view, err := c.client.Cluster(ctx)
	if err != nil || c.direct == nil {
		return view, err
	}
	dv, err := c.direct.Cluster(ctx)
	if err != nil {
		return nil, err
	}
	out := &api.ClusterView{Nodes: dv.Nodes}
	seen := map[string]bool{}
	for _, n := range dv.Nodes {
		seen[n.Name] = true
	}
	for _, n := range view.Nodes {
		if !seen[n.Name] {
			out.Nodes = append(out.Nodes, n)
		}
	}
	return out, nil
}

// waitKeys polls the cluster view until node shows the wanted send key and
// accept list.
func (c *cluster) waitKeys(pass, node, send string, accept []string) {
	c.t.Helper()
	testutil.Eventually(c.t, 20*time.Second, 50*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		view, err := c.views(ctx)
		if err != nil {
			return err
		}
		for _, n := range view.Nodes {
			if n.Name == node {
				if n.SendKey != send || !slices.Equal(n.AcceptKeys, accept) {
					return fmt.Errorf("%s pass: %s shows send %q accept %q, want %q %q", pass, node, n.SendKey, n.AcceptKeys, send, accept)
				}
				return nil
			}
		}
		return fmt.Errorf("%s not in the cluster view", node)
	})
}

// aliveWatch polls the cluster view in the background and records every
// sighting of a node that is not alive, except nodes exempted while the
// test restarts them.
type aliveWatch struct {
	t      *testing.T
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	exempts map[string]bool
	bad     []string
	views   int
	stopped bool
}

func startAliveWatch(t *testing.T, c *cluster, nodes []string) *aliveWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &aliveWatch{t: t, cancel: cancel, exempts: make(map[string]bool)}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			vctx, vcancel := context.WithTimeout(ctx, 2*time.Second)
			view, err := c.views(vctx)
			vcancel()
			if err != nil {
				continue // a proxied request during a leader change; the next tick retries
			}
			w.check(view, nodes)
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *aliveWatch) check(view *api.ClusterView, nodes []string) {
	seen := make(map[string]api.NodeView, len(view.Nodes))
	for _, n := range view.Nodes {
		seen[n.Name] = n
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.views++
	for _, name := range nodes {
		if w.exempts[name] {
			continue
		}
		n, ok := seen[name]
		switch {
		case !ok:
			w.bad = append(w.bad, name+" missing from the view")
		case (n.Role == "manager" || n.Role == "gate") && n.State != "alive",
			n.Role == "worker" && n.State != string(wire.WorkerHealthy) && n.State != string(wire.WorkerDegraded):
			w.bad = append(w.bad, fmt.Sprintf("%s %s", name, n.State))
		}
	}
}

func (w *aliveWatch) exempt(name string, on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.exempts[name] = on
}

// stop ends the watch and fails the test if any node was seen not alive.
func (w *aliveWatch) stop() {
	w.cancel()
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	w.stopped = true
	if w.views == 0 {
		w.t.Errorf("the alive watch never got a cluster view")
	}
	if len(w.bad) > 0 {
		w.t.Errorf("nodes seen not alive during the rotation (%d views): %s", w.views, strings.Join(w.bad, "; "))
	}
}

// authFailures reads tempest_transport_auth_failures_total from a manager's
// /metrics.
func authFailures(t *testing.T, base string) uint64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "tempest_transport_auth_failures_total "); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("%s/metrics: %q", base, sc.Text())
			}
			return n
		}
	}
	t.Fatalf("%s/metrics has no tempest_transport_auth_failures_total", base)
	return 0
}
