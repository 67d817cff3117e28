package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"tempest/internal/overload"
	"time"

	"tempest/internal/lifecycle"
	"tempest/internal/obs"
	"tempest/internal/rounds"
	"tempest/rainstorm"
	"tempest/security"
	"tempest/swim"
	"tempest/transport"
	"tempest/wire"
	"tempest/workflow"
)

// Goroutines of a running Worker, every one started through its
// lifecycle.Owner (spawn) by Run or by a handler Run registered, and
// finished before Run returns; the handlers are the Owner's too (handle),
// so Run returns only after the last one answered:
//
//   - per workflow, a runner goroutine (execute) and a progress sender
//     (progressLoop) that outlives it until the final progress is
//     acknowledged;
//   - the registrar (registerLoop), the SWIM joiner (joinLoop), the health
//     monitor (monitorLoop), the self-fence (selfFenceLoop) with its
//     keep-alive sends, and the heartbeat push (pushLoop);
//   - per RainStorm task, its send and route loops, checkpoint writes and
//     progress reporter (rainstorm.go).
//
// Locks: Worker.mu guards the lifecycle flags, executions, cores, fences,
// health and the heartbeat version; leaderTracker.mu is a leaf, never taken
// with Worker.mu held nor the other way round. Neither is held across a
// network call.

// Errors of the Worker's lifecycle.
var (
	ErrAlreadyRunning = errors.New("worker already running")
	ErrNotRunning     = errors.New("worker not running")
	ErrStopped        = errors.New("worker stopped")
)

// Worker is the worker role: it registers with the managers, runs the
// workflows they dispatch on its cores, reports their progress to the
// leader, and tells SWIM probers its state.
type Worker struct {
	cfg Config
	// base is the configured logger; transport and swim add the node id to
	// it themselves. log is base with the node id and role, for our lines.
	base     *slog.Logger
	log      *slog.Logger
	keyring  *security.Keyring
	registry *workflow.Registry
	now      func() time.Time
	deps     Deps
	// execOpts are what every exec stage here starts from (rainstorm.go).
	execOpts rainstorm.ExecOptions

	leader *leaderTracker
	// progress groups progress reports by manager address (batch.go).
	progress *rounds.Keyed[string, *wire.WorkflowProgress, wire.Reply]
	// contact: when a manager leader last answered (selffence.go).
	contact contactClock
	// keepAlive: a keep-alive progress is in flight (selffence.go).
	keepAlive    atomic.Bool
	managerClock *swim.VersionedClock
	// kick asks the registrar to register again; the value is a manager
	// address to try last (the one that just failed), or "".
	kick chan string
	// heartbeat is the encoded WorkerHeartbeat handed to SWIM acks. A change
	// only marks it stale (hbStale): encoding it on every change (twice per
	// workflow, with every running workflow in it) was a sixth of a busy
	// worker's CPU. LocalState re-encodes a stale one when it can take mu
	// without waiting, and every heartbeat push does (refreshHeartbeatLocked).
	heartbeat atomic.Pointer[[]byte]
	hbStale   atomic.Bool
	hbEncodes atomic.Uint64 // heartbeats encoded for SWIM, for tests
	ready     chan struct{}
	drained   chan struct{}
	// life owns every goroutine and in-flight handler (spawn, handle).
	life *lifecycle.Owner

	mu       sync.Mutex
	running  bool            // between ready and shutdown
	draining bool            // Drain called: refuse new work
	stopping bool            // shutting down: no new goroutines
	ctx      context.Context // Run's lifetime; every execution derives from it
	tr       transport.Transport
	members  Membership
	cores    *CoreSet
	fences   *FenceTable
	execs    map[string]*execution
	blobs    blobCache // blobs.go
	rs       rsHost    // rainstorm.go
	health   healthMachine
	lag      *overload.LagProbe // scheduler lag, one input of health
	cpuPct   float64
	memPct   float64
	version  uint64
	changed  chan struct{} // closed and replaced on every bump

	// drainErr is written by the first Drain before it closes drained.
	drainErr error

	// refused counts pipeline messages refused for their sender
	// (tempest_worker_unauthorized_total, rainstorm.go).
	refused obs.Refusals[wire.MsgType]
}

// New checks cfg and deps and returns a Worker ready to Run.
func New(cfg Config, deps Deps) (*Worker, error) {
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if deps.Keyring == nil {
		errs = append(errs, errors.New("Deps.Keyring: required"))
	}
	if deps.Registry == nil {
		errs = append(errs, errors.New("Deps.Registry: required"))
	}
	if deps.Transport != nil && deps.Transport.LocalID() != cfg.ID {
		errs = append(errs, fmt.Errorf("Deps.Transport: LocalID %q is not Config.ID %q", deps.Transport.LocalID(), cfg.ID))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("new worker: %w", errors.Join(errs...))
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.NewMembership == nil {
		deps.NewMembership = func(c swim.Config) (Membership, error) { return swim.New(c) }
	}
	if deps.CPU == nil {
		deps.CPU = ReadProcStat
	}
	if deps.Memory == nil {
		deps.Memory = ReadProcMeminfo
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	w := &Worker{
		lag:          overload.NewLagProbe(0, 0),
		cfg:          cfg,
		base:         log,
		log:          log.With("node", cfg.ID, "role", wire.RoleWorker),
		keyring:      deps.Keyring,
		registry:     deps.Registry,
		now:          deps.Now,
		deps:         deps,
		leader:       newLeaderTracker(),
		managerClock: swim.NewVersionedClock(deps.Now),
		kick:         make(chan string, 1),
		ready:        make(chan struct{}),
		drained:      make(chan struct{}),
		life:         lifecycle.New(),
		cores:        NewCoreSet(cfg.Cores),
		fences:       NewFenceTable(cfg.FenceRetention),
		execs:        make(map[string]*execution),
		health:       newHealthMachine(cfg.HealthSamples),
		// Versions start from the wall clock so a restarted worker's
		// heartbeats are newer than its previous life's (swim.VersionedClock).
		version: uint64(deps.Now().UnixNano()),
		changed: make(chan struct{}),
	}
	var err error
	if w.execOpts, err = newExecOptions(&cfg, &deps, w.log); err != nil {
		return nil, fmt.Errorf("new worker: %w", err)
	}
	w.progress = rounds.NewKeyed(progressInFlight, maxProgressBatch, w.progressRound)
	// An ack must never carry an empty payload: a manager cannot tell that
	// from garbage, and the first acks go out before anything else takes mu.
	w.bumpLocked()
	w.refreshHeartbeatLocked()
	return w, nil
}

// Ready is closed once Run has started serving.
func (w *Worker) Ready() <-chan struct{} { return w.ready }

// Addr is the worker's data-plane address, known once Run has started.
func (w *Worker) Addr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tr == nil {
		return ""
	}
	return w.tr.Addr()
}

// Run starts the transport, SWIM, registration and health monitoring, and
// serves until ctx ends (a hard stop: running workflows are cancelled) or a
// Drain completes. It returns an error only if the worker could not start.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.life.Start(); err != nil {
		return ErrAlreadyRunning
	}
	tr, err := w.openTransport()
	if err != nil {
		w.life.Close()
		return err
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w.mu.Lock()
	w.tr, w.ctx = tr, runCtx
	w.mu.Unlock()
	handle(w, tr, wire.TypeWorkflowDispatch, w.handleDispatch)
	handle(w, tr, wire.TypeWorkflowDispatchBatch, w.handleDispatchBatch)
	handle(w, tr, wire.TypeCancelJob, w.handleCancel)
	handle(w, tr, wire.TypeStateSyncRequest, w.handleStateSync)
	w.registerRainstorm(tr)

	members, err := w.deps.NewMembership(w.swimConfig(tr.Addr()))
	if err != nil {
		w.life.Close()
		_ = tr.Close()
		return fmt.Errorf("worker %s: start swim: %w", w.cfg.ID, err)
	}
	w.mu.Lock()
	w.members = members
	w.running = true
	w.bumpLocked()
	w.refreshHeartbeatLocked()
	w.mu.Unlock()

	w.contact.touch(w.now())
	// The loops take the run's context, not the Owner's: a Drain or the
	// caller's ctx ends them before shutdown closes the Owner.
	w.spawn(nil, func() { w.registerLoop(runCtx) })
	w.spawn(nil, func() { w.joinLoop(runCtx, members) })
	w.spawn(nil, func() { w.lag.Run(runCtx) })
	w.spawn(nil, func() { w.monitorLoop(runCtx) })
	w.spawn(nil, func() { w.selfFenceLoop(runCtx) })
	if w.cfg.HeartbeatPush > 0 {
		w.spawn(nil, func() { w.pushLoop(runCtx) })
	}
	close(w.ready)
	w.log.Info("worker started", "addr", tr.Addr(), "swim", members.Addr(), "cores", w.cfg.Cores, "datacenter", w.cfg.Datacenter)

	select {
	case <-runCtx.Done():
	case <-w.drained:
	}
	w.shutdown(cancel, tr, members)
	return nil
}

func (w *Worker) openTransport() (transport.Transport, error) {
	if w.deps.Transport != nil {
		return w.deps.Transport, nil
	}
	tr, err := transport.NewQUIC(w.cfg.TransportConfig(w.keyring, w.base))
	if err != nil {
		return nil, fmt.Errorf("worker %s: listen on %s: %w", w.cfg.ID, w.cfg.QUICListen, err)
	}
	return tr, nil
}

// errShutdown is the cause given to workflows still running at a hard stop.
var errShutdown = &stopReason{status: wire.WorkflowFailed, reason: "worker stopped before the workflow finished"}

func (w *Worker) shutdown(cancel context.CancelCauseFunc, tr transport.Transport, members Membership) {
	w.mu.Lock()
	w.stopping = true
	w.running = false
	running := w.countLocked(false)
	w.bumpLocked()
	w.mu.Unlock()
	if running > 0 {
		w.log.Warn("worker stopping with workflows still running", "workflows", running)
	}
	cancel(errShutdown)
	// From here handlers answer "worker shutting down" and nothing new
	// starts; Wait then covers the handlers in flight too, so the
	// transport closes under none of them.
	w.life.Close()
	w.life.Wait()
	if err := members.Shutdown(); err != nil {
		w.log.Warn("swim shutdown", "err", err)
	}
	if err := tr.Close(); err != nil {
		w.log.Warn("transport close", "err", err)
	}
	w.log.Info("worker stopped")
}

// ReloadSecrets replaces the keyring's secrets (SIGHUP during a rotation)
// and installs the matching gossip keys, so both planes rotate together.
func (w *Worker) ReloadSecrets(current, previous string) error {
	if err := w.keyring.Reload(current, previous); err != nil {
		return fmt.Errorf("reload secrets: %w", err)
	}
	w.mu.Lock()
	members := w.members
	w.mu.Unlock()
	if members != nil {
		if err := members.SetKeys(w.keyring.MemberlistKeys()); err != nil {
			return fmt.Errorf("reload secrets: gossip keys: %w", err)
		}
	}
	// The heartbeat carries the key ids: re-encode it now, not when an ack
	// finds the lock free, so managers (and `tempest cluster`) see the pass
	// land on this worker at the next ack.
	w.mu.Lock()
	w.bumpLocked()
	w.refreshHeartbeatLocked()
	w.mu.Unlock()
	w.log.Info("secrets reloaded", "key_ids", w.keyring.AcceptedKeyIDs())
	return nil
}

// spawn runs f on a goroutine the worker's Owner waits for; group, when not
// nil, also counts it (one RainStorm task waits for its own helpers). It
// reports false, running nothing, once shutdown closed the Owner.
func (w *Worker) spawn(group *sync.WaitGroup, f func()) bool {
	if group != nil {
		group.Add(1)
	}
	ok := w.life.Go(func(context.Context) {
		if group != nil {
			defer group.Done()
		}
		f()
	})
	if !ok && group != nil {
		group.Done()
	}
	return ok
}

// handle registers a typed handler the Owner counts and refuses once
// shutdown began. Its context also ends when the Owner closes, so a
// handler waiting on the network (a blob fetch) does not hold up shutdown
// until its call times out.
func handle[T wire.Message](w *Worker, tr transport.Transport, t wire.MsgType,
	f func(ctx context.Context, from transport.Peer, msg T) (wire.Message, error)) {
	lifecycle.Handle(w.life, tr, "worker", t, func(ctx context.Context, from transport.Peer, msg T) (wire.Message, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(w.life.Context(), cancel)()
		return f(ctx, from, msg)
	})
}

// bumpLocked records a change of anything a heartbeat or snapshot shows:
// the version moves, the SWIM payload goes stale and waiters wake.
func (w *Worker) bumpLocked() {
	w.version++
	w.hbStale.Store(true)
	close(w.changed)
	w.changed = make(chan struct{})
}

// refreshHeartbeatLocked re-encodes the SWIM payload if a change made it
// stale.
func (w *Worker) refreshHeartbeatLocked() {
	if !w.hbStale.Load() {
		return
	}
	if b := encodeHeartbeat(w.heartbeatLocked()); b != nil {
		w.heartbeat.Store(&b)
	}
	w.hbEncodes.Add(1)
	w.hbStale.Store(false)
}

// waitFor waits until cond (called with w.mu held) holds, ctx ends or
// timeout fires, reporting whether cond held.
func (w *Worker) waitFor(ctx context.Context, timeout <-chan time.Time, cond func() bool) bool {
	for {
		w.mu.Lock()
		ok, ch := cond(), w.changed
		w.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		case <-timeout:
			return false
		}
	}
}
