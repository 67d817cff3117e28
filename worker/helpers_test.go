package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/security"
	"tempest/swim"
	"tempest/transport"
	"tempest/wire"
	"tempest/workflow"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

// Polling bounds for conditions that happen within milliseconds on an idle
// machine; generous because the race detector on two shared cores is not.
const (
	waitFor  = 10 * time.Second
	pollStep = 5 * time.Millisecond
)

// testLogger sends logs to t.Log (Info and above; everything with TEMPEST_WORKER_DEBUG=1).
func testLogger(t testing.TB) *slog.Logger {
	level := slog.LevelInfo
	if os.Getenv("TEMPEST_WORKER_DEBUG") == "1" {
		level = slog.LevelDebug
	}
	return testutil.Logger(t, level)
}

func testKeyring(t testing.TB) *security.Keyring {
	t.Helper()
	secret, err := security.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	k, err := security.NewKeyring(secret, "")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// fakeMembership stands in for memberlist in hub tests: it records what the
// worker asks of SWIM and lets a test fire membership events.
type fakeMembership struct {
	mu     sync.Mutex
	cfg    swim.Config
	joined []string
	left   bool
	shut   bool
	keys   [][]byte
	lhm    int
}

func (f *fakeMembership) Addr() string { return "127.0.0.1:7946" }
func (f *fakeMembership) Join(_ context.Context, addrs []string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.joined = append(f.joined, addrs...)
	return len(addrs), nil
}
func (f *fakeMembership) Leave(time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.left = true
	return nil
}
func (f *fakeMembership) Shutdown() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shut = true
	return nil
}
func (f *fakeMembership) SetKeys(keys [][]byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys = keys
	return nil
}
func (f *fakeMembership) KeepJoined(ctx context.Context, seeds []string, base, max time.Duration, cluster string, log *slog.Logger) {
	swim.KeepJoining(ctx, f.Join, seeds, base, max, cluster, log)
}
func (f *fakeMembership) LocalHealth() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lhm
}

func (f *fakeMembership) hasLeft() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.left
}

// testManager is a TEST-ONLY stand-in for a manager on the hub: just enough
// protocol to drive a worker. It accepts registrations naming itself (or
// whatever register returns) leader and acknowledges progress (or whatever
// progress returns), recording everything it receives.
type testManager struct {
	id string
	tr transport.Transport

	mu       sync.Mutex
	regs     []wire.WorkerRegistration
	progress []wire.WorkflowProgress
	register func(*wire.WorkerRegistration) (wire.Message, error)
	onProg   func(*wire.WorkflowProgress) (wire.Message, error)
}

func newTestManager(t *testing.T, hub *transport.Hub, id string) *testManager {
	m := &testManager{id: id, tr: hub.Node(id)}
	m.tr.Handle(wire.TypeWorkerRegistration, func(_ context.Context, _ transport.Peer, msg wire.Message) (wire.Message, error) {
		r := msg.(*wire.WorkerRegistration)
		m.mu.Lock()
		m.regs = append(m.regs, *r)
		f := m.register
		m.mu.Unlock()
		if f != nil {
			return f(r)
		}
		// No election runs here: the fake's tokens are small numbers of
		// term 0, so it names no term either.
		return &wire.RegistrationAck{Accepted: true, Leader: m.id, LeaderAddr: m.id}, nil
	})
	m.tr.Handle(wire.TypeWorkflowProgress, func(_ context.Context, _ transport.Peer, msg wire.Message) (wire.Message, error) {
		p := msg.(*wire.WorkflowProgress)
		m.mu.Lock()
		m.progress = append(m.progress, *p)
		f := m.onProg
		m.mu.Unlock()
		if f != nil {
			return f(p)
		}
		return &wire.ProgressAck{WorkflowID: p.WorkflowID}, nil
	})
	t.Cleanup(func() { _ = m.tr.Close() })
	return m
}

func (m *testManager) setRegister(f func(*wire.WorkerRegistration) (wire.Message, error)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.register = f
}

func (m *testManager) setProgress(f func(*wire.WorkflowProgress) (wire.Message, error)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onProg = f
}

func (m *testManager) registrations() []wire.WorkerRegistration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]wire.WorkerRegistration(nil), m.regs...)
}

// progressOf returns every progress message received for workflow wf.
func (m *testManager) progressOf(wf string) []wire.WorkflowProgress {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []wire.WorkflowProgress
	for _, p := range m.progress {
		if p.WorkflowID == wf {
			out = append(out, p)
		}
	}
	return out
}

func (m *testManager) final(wf string) (wire.WorkflowProgress, bool) {
	for _, p := range m.progressOf(wf) {
		if p.Final {
			return p, true
		}
	}
	return wire.WorkflowProgress{}, false
}

// waitFinal polls until the final progress of wf has arrived.
func (m *testManager) waitFinal(t *testing.T, wf string) wire.WorkflowProgress {
	t.Helper()
	var p wire.WorkflowProgress
	testutil.Eventually(t, waitFor, pollStep, func() error {
		var ok bool
		if p, ok = m.final(wf); !ok {
			return fmt.Errorf("%s: no final progress for %s yet (%d messages)", m.id, wf, len(m.progressOf(wf)))
		}
		return nil
	})
	return p
}

func (m *testManager) call(t *testing.T, to string, msg wire.Message) (wire.Message, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	return m.tr.Call(ctx, to, msg)
}

// dispatch sends d and requires a WorkflowDispatchAck (or a typed error).
func (m *testManager) dispatch(t *testing.T, to string, d *wire.WorkflowDispatch) (*wire.WorkflowDispatchAck, error) {
	t.Helper()
	resp, err := m.call(t, to, d)
	if err != nil {
		return nil, err
	}
	ack, ok := resp.(*wire.WorkflowDispatchAck)
	if !ok {
		t.Fatalf("dispatch answered with %T", resp)
	}
	return ack, nil
}

// mustStart dispatches d and fails the test unless it is accepted.
func (m *testManager) mustStart(t *testing.T, to string, d *wire.WorkflowDispatch) *wire.WorkflowDispatchAck {
	t.Helper()
	ack, err := m.dispatch(t, to, d)
	if err != nil {
		t.Fatalf("dispatch %s: %v", d.WorkflowID, err)
	}
	if !ack.Accepted {
		t.Fatalf("dispatch %s refused: %s", d.WorkflowID, ack.Error)
	}
	return ack
}

func (m *testManager) cancel(t *testing.T, to string, c *wire.CancelJob) (*wire.CancelAck, error) {
	t.Helper()
	resp, err := m.call(t, to, c)
	if err != nil {
		return nil, err
	}
	return resp.(*wire.CancelAck), nil
}

// harness runs one worker on a hub with a fake SWIM and a test manager.
type harness struct {
	hub     *transport.Hub
	w       *Worker
	m       *testManager
	members *fakeMembership
	stop    context.CancelFunc
	exited  chan struct{} // closed when Run returned, with runErr set
	runErr  error
}

// testConfig is a worker config for hub tests: 4 cores, manager "m1",
// quick health ticks, short timeouts.
func testConfig(t testing.TB) Config {
	cfg := DefaultConfig()
	cfg.ID = "w1"
	cfg.Managers = []string{"m1"}
	cfg.Cores = 4
	cfg.HealthInterval = 20 * time.Millisecond
	cfg.HealthSamples = 1
	cfg.CallTimeout = 2 * time.Second
	cfg.DrainTimeout = 5 * time.Second
	cfg.Logger = testLogger(t)
	return cfg
}

type harnessOption struct {
	cfg      func(*Config)
	registry *workflow.Registry
	memory   func() (float64, error)
	// before runs once the hub and manager m1 exist, before the worker
	// starts: to set up managers' behaviour for the very first messages.
	before func(h *harness)
}

func startHarness(t *testing.T, opt harnessOption) *harness {
	t.Helper()
	hub := transport.NewHub()
	h := &harness{hub: hub, members: &fakeMembership{}, exited: make(chan struct{})}
	h.m = newTestManager(t, hub, "m1")
	if opt.before != nil {
		opt.before(h)
	}
	cfg := testConfig(t)
	if opt.cfg != nil {
		opt.cfg(&cfg)
	}
	reg := opt.registry
	if reg == nil {
		reg = workflow.DefaultRegistry()
	}
	mem := opt.memory
	if mem == nil {
		mem = func() (float64, error) { return 10, nil }
	}
	w, err := New(cfg, Deps{
		Keyring:   testKeyring(t),
		Registry:  reg,
		Transport: hub.Node(cfg.ID),
		NewMembership: func(c swim.Config) (Membership, error) {
			h.members.mu.Lock()
			h.members.cfg = c
			h.members.mu.Unlock()
			return h.members, nil
		},
		CPU:    func() (CPUSample, error) { return CPUSample{}, errors.New("no cpu in tests") },
		Memory: mem,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.w = w
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	go func() {
		h.runErr = w.Run(ctx)
		close(h.exited)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.exited:
			if h.runErr != nil {
				t.Errorf("Run: %v", h.runErr)
			}
		case <-time.After(waitFor):
			t.Errorf("Run did not return after cancel")
		}
	})
	select {
	case <-w.Ready():
	case <-h.exited:
		t.Fatalf("Run: %v", h.runErr)
	}
	return h
}

// waitRegistered polls until manager m has a registration from the worker.
func (h *harness) waitRegistered(t *testing.T, m *testManager) {
	t.Helper()
	testutil.Eventually(t, waitFor, pollStep, func() error {
		if len(m.registrations()) == 0 {
			return fmt.Errorf("%s has no registration yet", m.id)
		}
		return nil
	})
}

// waitIdle polls until the worker has no workflows left (running or
// waiting for a final ack) and every core is free.
func (h *harness) waitIdle(t *testing.T) {
	t.Helper()
	testutil.Eventually(t, waitFor, pollStep, func() error {
		s := h.w.Snapshot()
		if len(s.ActiveWorkflows) > 0 || s.AvailableCores != s.TotalCores {
			return fmt.Errorf("%d workflows, %d of %d cores free", len(s.ActiveWorkflows), s.AvailableCores, s.TotalCores)
		}
		return nil
	})
}

func sleepSpec(t testing.TB, d time.Duration, cores int) wire.WorkflowSpec {
	t.Helper()
	params, err := wire.Marshal(&workflow.SleepParams{Duration: d})
	if err != nil {
		t.Fatal(err)
	}
	return wire.WorkflowSpec{Name: "nap", Type: "sleep", Cores: cores, Params: params}
}

func dispatchOf(job, wf string, spec wire.WorkflowSpec, fence uint64) *wire.WorkflowDispatch {
	return &wire.WorkflowDispatch{JobID: job, WorkflowID: wf, Workflow: spec, Cores: spec.Cores, FenceToken: fence}
}

// funcType is a workflow type whose runs call fn: for tests that need a
// workflow to misbehave (report too often, panic, ignore its context).
type funcType struct {
	name string
	fn   func(ctx context.Context, env workflow.Env) (workflow.Result, error)
}

func (f funcType) Name() string                                 { return f.name }
func (f funcType) ParseParams(*workflow.Fields) []byte          { return nil }
func (f funcType) DecodeParams([]byte) (workflow.Params, error) { return nil, nil }
func (f funcType) New(wire.WorkflowSpec) (workflow.Runner, error) {
	return runnerFunc(f.fn), nil
}

type runnerFunc func(ctx context.Context, env workflow.Env) (workflow.Result, error)

func (r runnerFunc) Run(ctx context.Context, env workflow.Env) (workflow.Result, error) {
	return r(ctx, env)
}

func registryWith(t testing.TB, types ...workflow.Type) *workflow.Registry {
	t.Helper()
	reg := workflow.DefaultRegistry()
	for _, ty := range types {
		if err := reg.Register(ty); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}
