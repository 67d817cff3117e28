package swim

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

// testLogger sends logs to t.Log at Warn (Debug with TEMPEST_SWIM_DEBUG=1).
// Lines written after the test has finished are dropped rather than
// handed to t.Log, which panics then.
func testLogger(t testing.TB) *slog.Logger {
	return newTestLogWriter(t).logger()
}

type tWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
	// decryptFailures counts memberlist's "no installed keys could
	// decrypt" errors: the direct symptom of a key rotation dropping
	// traffic, independent of timing.
	decryptFailures atomic.Int64
}

func newTestLogWriter(t testing.TB) *tWriter {
	w := &tWriter{t: t}
	t.Cleanup(w.close)
	return w
}

func (w *tWriter) logger() *slog.Logger {
	// Warn and above always reach the writer, so decrypt failures are
	// counted even when Debug output is off.
	level := slog.LevelWarn
	if os.Getenv("TEMPEST_SWIM_DEBUG") == "1" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

func (w *tWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("could decrypt")) {
		w.decryptFailures.Add(1)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *tWriter) close() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// recorder collects membership events.
type recorder struct {
	mu      sync.Mutex
	joins   []NodeInfo
	updates []NodeInfo
	deads   []NodeInfo
	deadAt  map[string]time.Time // first OnDead per node
}

func (r *recorder) handler() EventHandler {
	add := func(list *[]NodeInfo) func(NodeInfo) {
		return func(n NodeInfo) {
			r.mu.Lock()
			*list = append(*list, n)
			r.mu.Unlock()
		}
	}
	return EventHandler{
		OnJoin:   add(&r.joins),
		OnUpdate: add(&r.updates),
		OnDead: func(n NodeInfo) {
			r.mu.Lock()
			r.deads = append(r.deads, n)
			if _, ok := r.deadAt[n.Name]; !ok {
				r.deadAt[n.Name] = time.Now()
			}
			r.mu.Unlock()
		},
	}
}

func (r *recorder) deadTime(name string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.deadAt[name]
	return at, ok
}

func (r *recorder) dead(name string) (NodeInfo, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.deads {
		if n.Name == name {
			return n, true
		}
	}
	return NodeInfo{}, false
}

func (r *recorder) deadCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.deads)
}

func (r *recorder) lastUpdate(name string) (NodeInfo, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.updates) - 1; i >= 0; i-- {
		if r.updates[i].Name == name {
			return r.updates[i], true
		}
	}
	return NodeInfo{}, false
}

// peerState is what a testEmbedder last heard from one peer.
type peerState struct {
	info    NodeInfo
	payload []byte
	rtt     time.Duration
	count   int
	at      time.Time
}

// testEmbedder publishes a heartbeat whose version advances on every ack
// and records what its probes bring back.
type testEmbedder struct {
	role    wire.NodeRole
	name    string
	version atomic.Uint64

	mu    sync.Mutex
	peers map[string]peerState
}

func newTestEmbedder(name string, role wire.NodeRole) *testEmbedder {
	return &testEmbedder{name: name, role: role, peers: make(map[string]peerState)}
}

func (e *testEmbedder) LocalState() []byte {
	v := e.version.Add(1)
	var (
		b   []byte
		err error
	)
	switch e.role {
	case wire.RoleWorker:
		b, err = EncodeWorkerHeartbeat(&wire.WorkerHeartbeat{
			NodeID: e.name, State: wire.WorkerHealthy, TotalCores: 8, AvailableCores: 5, Version: v,
		})
	default:
		b, err = EncodeManagerHeartbeat(&wire.ManagerHeartbeat{
			NodeID: e.name, Datacenter: "dc1", Version: v,
		})
	}
	if err != nil {
		panic(err) // a test bug, not a runtime condition
	}
	return b
}

func (e *testEmbedder) PeerState(node NodeInfo, state []byte, rtt time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.peers[node.Name]
	e.peers[node.Name] = peerState{info: node, payload: bytes.Clone(state), rtt: rtt, count: p.count + 1, at: time.Now()}
}

func (e *testEmbedder) peer(name string) (peerState, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.peers[name]
	return p, ok
}

type testNode struct {
	*Node
	rec *recorder
	emb *testEmbedder
}

func newKey(t testing.TB) []byte {
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatalf("random key: %v", err)
	}
	return k
}

// testConfig is a loopback node on the test profile.
func testConfig(t testing.TB, name string, role wire.NodeRole) Config {
	cfg := DefaultConfig()
	cfg.NodeName = name
	cfg.BindAddr = "127.0.0.1"
	cfg.BindPort = testutil.FreePort(t)
	cfg.Profile = ProfileTest
	cfg.Meta = NodeMeta{Role: role, Datacenter: "dc1", QUICAddr: fmt.Sprintf("127.0.0.1:%d", 9000+len(name))}
	cfg.Logger = testLogger(t)
	return cfg
}

// startNode creates a node with a recorder and an embedder. Its cleanup
// shuts it down and waits for memberlist's stragglers (see quiesce).
func startNode(t testing.TB, cfg Config) *testNode {
	t.Helper()
	tn := &testNode{rec: &recorder{deadAt: make(map[string]time.Time)}, emb: newTestEmbedder(cfg.NodeName, cfg.Meta.Role)}
	cfg.Events = tn.rec.handler()
	if cfg.Embedder == nil {
		cfg.Embedder = tn.emb
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatalf("new %s: %v", cfg.NodeName, err)
	}
	tn.Node = n
	t.Cleanup(func() {
		if err := n.Shutdown(); err != nil {
			t.Errorf("shutdown %s: %v", cfg.NodeName, err)
		}
	})
	return tn
}

// startCluster starts n nodes (node-0 a manager, the rest workers), joins
// them through node-0 and waits until every node sees all n.
func startCluster(t testing.TB, n int, tweak func(i int, cfg *Config)) []*testNode {
	t.Helper()
	// Registered first so it runs last, after every node's Shutdown.
	t.Cleanup(func() { quiesce(t) })
	nodes := make([]*testNode, n)
	for i := range n {
		role := wire.RoleWorker
		if i == 0 {
			role = wire.RoleManager
		}
		cfg := testConfig(t, fmt.Sprintf("node-%d", i), role)
		if tweak != nil {
			tweak(i, &cfg)
		}
		nodes[i] = startNode(t, cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tn := range nodes[1:] {
		if _, err := tn.Join(ctx, []string{nodes[0].Addr()}); err != nil {
			t.Fatalf("%s join: %v", tn.Name(), err)
		}
	}
	waitMembers(t, nodes, n)
	return nodes
}

func waitMembers(t testing.TB, nodes []*testNode, want int) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		for _, tn := range nodes {
			if got := len(tn.Members()); got != want {
				return fmt.Errorf("%s sees %d members, want %d", tn.Name(), got, want)
			}
		}
		return nil
	})
}

// quiesce waits for memberlist's own goroutines to finish after every node
// in the test has shut down. memberlist.Shutdown closes its sockets and
// returns without joining its probe loop (which finishes the probe in
// flight, up to a probe interval stretched by the health score),
// its packet handler, or TCP connection handlers (bounded by TCPTimeout).
// Waiting here, rather than ignoring those goroutines in goleak, keeps
// the leak check in TestMain strict for everything else.
func quiesce(t testing.TB) {
	t.Helper()
	err := testutil.Poll(15*time.Second, 20*time.Millisecond, func() error {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		if bytes.Contains(buf, []byte("github.com/hashicorp/memberlist.")) {
			return fmt.Errorf("memberlist goroutines still running")
		}
		return nil
	})
	if err != nil {
		buf := make([]byte, 1<<20)
		t.Errorf("%v:\n%s", err, buf[:runtime.Stack(buf, true)])
	}
}
