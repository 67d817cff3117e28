package leadership

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/transport"
	"tempest/wire"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

// Generous deadlines: failover under TestProfile takes well under a second,
// but CI machines running -race can stall for a while.
const (
	waitFor = 10 * time.Second
	pollGap = 10 * time.Millisecond
)

// recorder keeps one node's callbacks in order.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

type testNode struct {
	id  string
	e   *Elector
	tr  transport.Transport
	rec *recorder
	err chan error
}

type testCluster struct {
	t     *testing.T
	hub   *transport.Hub
	nodes []*testNode
}

func newTestCluster(t *testing.T, n int) *testCluster {
	t.Helper()
	c := &testCluster{t: t, hub: transport.NewHub(transport.WithSeed(1))}
	peers := make(map[string]string, n)
	for i := range n {
		id := fmt.Sprintf("m%d", i+1)
		peers[id] = id // hub addresses are node ids
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := range n {
		id := fmt.Sprintf("m%d", i+1)
		store, err := OpenBoltStorage(filepath.Join(testutil.DataDir(t, id), "leadership.db"))
		if err != nil {
			t.Fatalf("storage for %s: %v", id, err)
		}
		tn := &testNode{id: id, tr: c.hub.Node(id), rec: &recorder{}, err: make(chan error, 1)}
		tn.e, err = New(ElectorConfig{
			Cluster:          "managers/test",
			Transport:        tn.tr,
			Peers:            peers,
			Profile:          TestProfile(),
			Storage:          store,
			Logger:           logger.With("node", id),
			OnBecomeLeader:   func(term uint64) { tn.rec.add("become %d", term) },
			OnLoseLeadership: func(term uint64) { tn.rec.add("lose %d", term) },
			OnLeaderChange:   func(l string, term uint64) { tn.rec.add("leader %s %d", l, term) },
		})
		if err != nil {
			t.Fatalf("New(%s): %v", id, err)
		}
		c.nodes = append(c.nodes, tn)
		go func() { tn.err <- tn.e.Run(context.Background()) }()
		t.Cleanup(func() {
			tn.e.Stop()
			if err := <-tn.err; err != nil {
				t.Errorf("%s: Run = %v", id, err)
			}
			tn.tr.Close()
			store.Close()
		})
	}
	return c
}

func (c *testCluster) node(id string) *testNode {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	c.t.Fatalf("no node %s", id)
	return nil
}

// agreedLeader returns the leader that every node in ids follows, or an
// error saying why there is none yet.
func (c *testCluster) agreedLeader(ids ...string) (Status, error) {
	var lead Status
	leaders := 0
	for _, id := range ids {
		if st := c.node(id).e.Status(); st.State == Leader {
			lead = st
			leaders++
		}
	}
	if leaders != 1 {
		return Status{}, fmt.Errorf("%d leaders among %v", leaders, ids)
	}
	for _, id := range ids {
		if st := c.node(id).e.Status(); st.Leader != lead.ID || st.Term != lead.Term {
			return Status{}, fmt.Errorf("%s follows %q in term %d; leader is %s in term %d", id, st.Leader, st.Term, lead.ID, lead.Term)
		}
	}
	return lead, nil
}

func (c *testCluster) ids() []string {
	var ids []string
	for _, n := range c.nodes {
		ids = append(ids, n.id)
	}
	return ids
}

func (c *testCluster) waitLeader(ids ...string) Status {
	c.t.Helper()
	var lead Status
	testutil.Eventually(c.t, waitFor, pollGap, func() error {
		var err error
		lead, err = c.agreedLeader(ids...)
		return err
	})
	return lead
}

func TestElectorThreeNodesElectOneLeader(t *testing.T) {
	c := newTestCluster(t, 3)
	lead := c.waitLeader(c.ids()...)

	n := c.node(lead.ID)
	if !n.e.IsLeader() || n.e.FenceToken() != lead.Term {
		t.Fatalf("leader %s: IsLeader=%v FenceToken=%d, want true and %d", lead.ID, n.e.IsLeader(), n.e.FenceToken(), lead.Term)
	}
	for _, other := range c.nodes {
		id, addr := other.e.Leader()
		if id != lead.ID || addr != lead.ID {
			t.Errorf("%s: Leader() = %q, %q; want %q at %q", other.id, id, addr, lead.ID, lead.ID)
		}
		if other.id != lead.ID {
			if other.e.IsLeader() || other.e.FenceToken() != 0 {
				t.Errorf("follower %s: IsLeader=%v FenceToken=%d", other.id, other.e.IsLeader(), other.e.FenceToken())
			}
			werr := other.e.NotLeaderError()
			if !errors.Is(werr, wire.ErrNotLeader) || werr.Leader != lead.ID || werr.LeaderAddr != lead.ID {
				t.Errorf("follower %s: NotLeaderError = %v", other.id, werr)
			}
		}
	}
	testutil.Eventually(t, waitFor, pollGap, func() error {
		want := fmt.Sprintf("become %d", lead.Term)
		if ev := n.rec.list(); !slices.Contains(ev, want) {
			return fmt.Errorf("leader callbacks %v lack %q", ev, want)
		}
		return nil
	})
}

func TestElectorIsolatedLeaderIsReplaced(t *testing.T) {
	c := newTestCluster(t, 3)
	old := c.waitLeader(c.ids()...)

	c.hub.Isolate(old.ID)
	var rest []string
	for _, id := range c.ids() {
		if id != old.ID {
			rest = append(rest, id)
		}
	}
	next := c.waitLeader(rest...)
	if next.Term <= old.Term {
		t.Fatalf("new leader %s has term %d, want > %d", next.ID, next.Term, old.Term)
	}
	// Check-quorum: the isolated leader gives up on its own.
	oldNode := c.node(old.ID)
	testutil.Eventually(t, waitFor, pollGap, func() error {
		if st := oldNode.e.Status(); st.State == Leader {
			return fmt.Errorf("isolated %s still leads term %d", old.ID, st.Term)
		}
		return nil
	})
	testutil.Eventually(t, waitFor, pollGap, func() error {
		want := fmt.Sprintf("lose %d", old.Term)
		if ev := oldNode.rec.list(); !slices.Contains(ev, want) {
			return fmt.Errorf("old leader's callbacks %v lack %q", ev, want)
		}
		return nil
	})

	c.hub.Heal()
	healed := c.waitLeader(c.ids()...)
	if healed.Term < next.Term {
		t.Fatalf("after heal leader %s term %d, want >= %d", healed.ID, healed.Term, next.Term)
	}
}

func TestElectorCallbacksPairUp(t *testing.T) {
	c := newTestCluster(t, 3)
	lead := c.waitLeader(c.ids()...)
	c.hub.Isolate(lead.ID)
	c.waitLeader(func() []string {
		var ids []string
		for _, id := range c.ids() {
			if id != lead.ID {
				ids = append(ids, id)
			}
		}
		return ids
	}()...)
	c.hub.Heal()
	c.waitLeader(c.ids()...)
	for _, n := range c.nodes {
		n.e.Stop()
	}
	// After Stop: every become has its lose, in order, with growing terms.
	for _, n := range c.nodes {
		var leading uint64
		var lastTerm uint64
		for _, ev := range n.rec.list() {
			var term uint64
			switch {
			case strings.HasPrefix(ev, "become "):
				fmt.Sscanf(ev, "become %d", &term)
				if leading != 0 {
					t.Errorf("%s: %q while still leading term %d", n.id, ev, leading)
				}
				if term <= lastTerm {
					t.Errorf("%s: became leader for term %d after term %d", n.id, term, lastTerm)
				}
				leading, lastTerm = term, term
			case strings.HasPrefix(ev, "lose "):
				fmt.Sscanf(ev, "lose %d", &term)
				if term != leading {
					t.Errorf("%s: %q but was leading term %d", n.id, ev, leading)
				}
				leading = 0
			}
		}
		if leading != 0 {
			t.Errorf("%s: still leading term %d after Stop; events %v", n.id, leading, n.rec.list())
		}
		if n.e.IsLeader() {
			t.Errorf("%s: IsLeader after Stop", n.id)
		}
	}
}

func TestElectorLifecycle(t *testing.T) {
	hub := transport.NewHub()
	tr := hub.Node("a")
	defer tr.Close()
	cfg := ElectorConfig{
		Cluster: "gates", Transport: tr, Peers: map[string]string{"a": "a"},
		Profile: TestProfile(), Storage: NewMemoryStorage(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- e.Run(context.Background()) }()
	// A group of one elects itself.
	testutil.Eventually(t, waitFor, pollGap, func() error {
		if !e.IsLeader() {
			return fmt.Errorf("status %+v", e.Status())
		}
		return nil
	})
	// Leading proves the first Run is under way.
	if err := e.Run(context.Background()); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second Run = %v, want ErrAlreadyRunning", err)
	}
	e.Stop()
	e.Stop() // idempotent
	if err := <-errc; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if err := e.Run(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Run after Stop = %v, want ErrStopped", err)
	}

	// Stop before Run: Run refuses rather than starting a zombie.
	e2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e2.Stop()
	if err := e2.Run(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Run after early Stop = %v, want ErrStopped", err)
	}
}

// manualClock hands out a ticker the test fires by hand.
type manualClock struct{ c chan time.Time }

func (m manualClock) NewTicker(time.Duration) (<-chan time.Time, func()) { return m.c, func() {} }

func TestElectorManualClockAndLHM(t *testing.T) {
	hub := transport.NewHub()
	tr := hub.Node("a")
	defer tr.Close()
	clock := manualClock{c: make(chan time.Time)}
	lost := make(chan uint64, 4) // never blocks the callback goroutine
	e, err := New(ElectorConfig{
		Cluster: "gates", Transport: tr, Peers: map[string]string{"a": "a"},
		Profile: TestProfile(), Storage: NewMemoryStorage(), Clock: clock,
		Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnLoseLeadership: func(term uint64) { lost <- term },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- e.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	tick := func(n int) {
		for range n {
			clock.c <- time.Time{}
		}
	}
	// Nothing happens without ticks; 2*ElectionTicks always suffices.
	if e.IsLeader() {
		t.Fatal("leader before any tick")
	}
	tick(2 * TestProfile().ElectionTicks)
	testutil.Eventually(t, waitFor, pollGap, func() error {
		if !e.IsLeader() {
			return fmt.Errorf("not leader after %d ticks: %+v", 2*TestProfile().ElectionTicks, e.Status())
		}
		return nil
	})
	term := e.Status().Term
	e.SetLHM(TestProfile().MaxLeaderLHM + 1)
	select {
	case got := <-lost:
		if got != term {
			t.Fatalf("OnLoseLeadership(%d), want %d", got, term)
		}
	case <-time.After(waitFor):
		t.Fatal("unhealthy leader did not step down")
	}
	// Unhealthy, it must not campaign however long it waits.
	tick(5 * TestProfile().ElectionTicks)
	if st := e.Status(); st.State != Follower || st.Term != term {
		t.Fatalf("unhealthy node: %+v", st)
	}
}

func TestElectorConfigValidate(t *testing.T) {
	hub := transport.NewHub()
	tr := hub.Node("a")
	defer tr.Close()
	good := ElectorConfig{Cluster: "c", Transport: tr, Peers: map[string]string{"a": "a", "b": "b"}, Storage: NewMemoryStorage()}
	tests := []struct {
		name string
		edit func(*ElectorConfig)
		want []string
	}{
		{"valid", func(*ElectorConfig) {}, nil},
		{"no cluster", func(c *ElectorConfig) { c.Cluster = "" }, []string{"Cluster"}},
		{"self not a peer", func(c *ElectorConfig) { c.Peers = map[string]string{"b": "b"} }, []string{`include this node "a"`}},
		{"empty address", func(c *ElectorConfig) { c.Peers = map[string]string{"a": "a", "b": ""} }, []string{"empty id or address"}},
		{"everything", func(c *ElectorConfig) { c.Cluster = ""; c.Transport = nil; c.Storage = nil },
			[]string{"Cluster", "Transport", "Storage"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.edit(&cfg)
			err := cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %v", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, missing %q", err, w)
				}
			}
			if _, err := New(cfg); err == nil {
				t.Error("New accepted an invalid config")
			}
		})
	}
}

func TestProfiles(t *testing.T) {
	for _, name := range []string{"lan", "local", "test"} {
		t.Run(name, func(t *testing.T) {
			p, err := ProfileByName(name)
			if err != nil {
				t.Fatal(err)
			}
			if p.Name != name {
				t.Fatalf("ProfileByName(%q).Name = %q", name, p.Name)
			}
			cfg := Config{
				ID: "a", Peers: []string{"a"}, ElectionTicks: p.ElectionTicks, HeartbeatTicks: p.HeartbeatTicks,
				MaxLeaderLHM: p.MaxLeaderLHM, FlapMaxChanges: p.FlapMaxChanges,
				FlapWindowTicks: p.FlapWindowTicks, FlapCooldownTicks: p.FlapCooldownTicks,
			}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("profile %s is invalid: %v", name, err)
			}
			if p.HeartbeatInterval()*3 > p.ElectionTimeout() {
				t.Fatalf("profile %s: heartbeat %s leaves too little slack in election timeout %s",
					name, p.HeartbeatInterval(), p.ElectionTimeout())
			}
		})
	}
	if _, err := ProfileByName("wan"); !errors.Is(err, ErrUnknownProfile) {
		t.Fatalf("ProfileByName(wan) = %v, want ErrUnknownProfile", err)
	}
}

// switchStorage is a Storage whose saves fail while fail is set.
type switchStorage struct {
	mem  MemoryStorage
	fail atomic.Bool
}

func (s *switchStorage) Load() (HardState, error) { return s.mem.Load() }
func (s *switchStorage) Save(hs HardState) error {
	if s.fail.Load() {
		return errors.New("disk failed")
	}
	return s.mem.Save(hs)
}

// A leader whose election storage fails just as it learns of a newer term
// still steps down: OnLoseLeadership runs and IsLeader turns false, so the
// role stops placing work under a deposed token.
func TestElectorStepsDownWhenSaveFails(t *testing.T) {
	hub := transport.NewHub()
	trA, trB := hub.Node("a"), hub.Node("b")
	defer trA.Close()
	defer trB.Close()
	// b is played by the test: it grants every pre-vote and vote.
	grant := func(ctx context.Context, _ transport.Peer, msg wire.Message) (wire.Message, error) {
		var out wire.Message
		switch m := msg.(type) {
		case *wire.PreVoteRequest:
			out = &wire.PreVoteResponse{Cluster: m.Cluster, Term: m.Term, Voter: "b", Granted: true}
		case *wire.VoteRequest:
			out = &wire.VoteResponse{Cluster: m.Cluster, Term: m.Term, Voter: "b", Granted: true}
		default:
			return nil, nil
		}
		go trB.Send(context.Background(), "a", out)
		return nil, nil
	}
	for _, typ := range []wire.MsgType{wire.TypePreVoteRequest, wire.TypeVoteRequest, wire.TypeLeaderHeartbeat} {
		trB.Handle(typ, grant)
	}
	st := &switchStorage{}
	lost := make(chan uint64, 4)
	e, err := New(ElectorConfig{
		Cluster: "managers/test", Transport: trA, Peers: map[string]string{"a": "a", "b": "b"},
		Profile: TestProfile(), Storage: st,
		Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnLoseLeadership: func(term uint64) { lost <- term },
	})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- e.Run(context.Background()) }()
	defer func() {
		e.Stop()
		if err := <-errc; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	testutil.Eventually(t, waitFor, pollGap, func() error {
		if !e.IsLeader() {
			return fmt.Errorf("not leader: %+v", e.Status())
		}
		return nil
	})
	term := e.Status().Term
	st.fail.Store(true)
	if err := trB.Send(context.Background(), "a", &wire.LeaderHeartbeat{Cluster: "managers/test", Term: term + 3, Leader: "b"}); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-lost:
		if got != term {
			t.Fatalf("OnLoseLeadership(%d), want %d", got, term)
		}
	case <-time.After(waitFor):
		t.Fatalf("a leader whose storage failed kept leading: %+v", e.Status())
	}
	if e.IsLeader() {
		t.Fatalf("still leader: %+v", e.Status())
	}
}
