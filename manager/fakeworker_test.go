package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"tempest/internal/lifecycle"
	"tempest/transport"
	"tempest/wire"
	"tempest/worker"
	"tempest/workflow"
)

// fakeWorker stands in for the worker role (package worker is being written
// in parallel): it registers, follows the leader, allocates cores, runs real
// workflow runners from the registry, fences dispatches and cancels, reports
// progress (retrying the final report until a manager takes it, re-homing to
// another manager when its own is gone) and answers state sync.
type fakeWorker struct {
	id       string
	tr       transport.Transport
	reg      *workflow.Registry
	managers []string
	cores    int
	log      *slog.Logger
	version  uint64
	// confinement is what the worker registers as allowed (nil: nothing).
	confinement *wire.Confinement

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	leader string
	next   int // index in managers to try next when the leader is gone
	// used holds each run's cores, under the run's workflow id and token
	// (a newer run of a workflow may start before the old one ends), and
	// shares a slot's as the real worker does.
	used       *worker.CoreSet
	fences     map[string]uint64 // highest token seen per workflow
	runs       map[string]*fakeRun
	dispatches map[string][]uint64 // accepted dispatch tokens per workflow
	// slowFirstAnswer, when set, holds back the answer to a workflow's
	// first dispatch this long after the run started, as a loaded worker
	// preparing a large run does.
	slowFirstAnswer time.Duration
	answered        map[string]bool
	// breakFirstAnswer, when set, starts a workflow's first dispatch and
	// then answers it with an error, as a QUIC stream that broke after the
	// request arrived does: the manager cannot tell whether it runs.
	breakFirstAnswer bool
	// brokenAfter, when set, is what the broken answer waits for (the run
	// to have got somewhere).
	brokenAfter <-chan struct{}
	// refuseFirst, when set, refuses every workflow's first dispatch as a
	// worker whose cores were taken meanwhile does.
	refuseFirst bool
	refused     map[string]bool
}

type fakeRun struct {
	jobID, wfID, name string
	token             uint64
	placement         *wire.PlacementProof // handed back in progress, as a real worker does
	cores             []int
	cancel            context.CancelFunc
	last              wire.WorkflowProgress
	// completeWith, set by complete, ends the run as completed with this
	// per-second series in its one final report.
	completeWith []wire.SecondStats
}

func newFakeWorker(hub *transport.Hub, id string, cores int, reg *workflow.Registry, managers []string, log *slog.Logger) *fakeWorker {
	ctx, cancel := context.WithCancel(context.Background())
	w := &fakeWorker{
		id: id, tr: hub.Node(id), reg: reg, managers: managers, cores: cores,
		log: log.With("fake_worker", id), version: uint64(time.Now().UnixNano()),
		ctx: ctx, cancel: cancel,
		used: worker.NewCoreSet(cores), fences: make(map[string]uint64),
		runs: make(map[string]*fakeRun), dispatches: make(map[string][]uint64),
	}
	w.tr.Handle(wire.TypeWorkflowDispatch, w.handleDispatch)
	w.tr.Handle(wire.TypeCancelJob, w.handleCancel)
	w.tr.Handle(wire.TypeStateSyncRequest, w.handleStateSync)
	return w
}

// register tries the managers in turn until one accepts, reporting running
// workflows so a new leader adopts them.
func (w *fakeWorker) register(ctx context.Context) error {
	w.mu.Lock()
	reg := &wire.WorkerRegistration{NodeID: w.id, Addr: w.id, Datacenter: "dc1", TotalCores: w.cores, Version: w.bumpLocked(),
		Confinement: w.confinement}
	for _, r := range w.runs {
		reg.ActiveWorkflows = append(reg.ActiveWorkflows, r.progressLocked(w.id))
	}
	start := w.next
	w.mu.Unlock()
	var errs []error
	for i := range w.managers {
		addr := w.managers[(start+i)%len(w.managers)]
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := w.tr.Call(cctx, addr, reg)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ack := resp.(*wire.RegistrationAck)
		if !ack.Accepted {
			errs = append(errs, errors.New(ack.Error))
			continue
		}
		w.mu.Lock()
		w.leader = addr
		if ack.LeaderAddr != "" {
			w.leader = ack.LeaderAddr
		}
		w.mu.Unlock()
		return nil
	}
	return fmt.Errorf("register %s: %w", w.id, errors.Join(errs...))
}

func (w *fakeWorker) bumpLocked() uint64 { w.version++; return w.version }

func (w *fakeWorker) freeLocked() []int {
	var free []int
	for c := range w.cores {
		if w.used.Owner(c) == "" {
			free = append(free, c)
		}
	}
	return free
}

// runKey names a run among the fake's cores.
func runKey(wfID string, token uint64) string { return fmt.Sprintf("%s#%d", wfID, token) }

func (w *fakeWorker) freeCores() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.freeLocked())
}

func (w *fakeWorker) dispatchTokens(wfID string) []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.dispatches[wfID])
}

func (w *fakeWorker) running(wfID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.runs[wfID]
	return ok
}

func (w *fakeWorker) handleDispatch(ctx context.Context, from transport.Peer, msg wire.Message) (wire.Message, error) {
	d := msg.(*wire.WorkflowDispatch)
	reply, err := w.accept(d)
	w.mu.Lock()
	delay := w.slowFirstAnswer
	if w.answered == nil {
		w.answered = map[string]bool{}
	}
	first := !w.answered[d.WorkflowID]
	if !first {
		delay = 0
	}
	w.answered[d.WorkflowID] = true
	broken, after := first && w.breakFirstAnswer, w.brokenAfter
	w.mu.Unlock()
	if broken {
		if after != nil {
			select {
			case <-after:
			case <-ctx.Done():
			}
		}
		return nil, errors.New("stream 12 reset by peer")
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
		}
	}
	return reply, err
}

func (w *fakeWorker) accept(d *wire.WorkflowDispatch) (wire.Message, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// The same dispatch again (the manager's answer got lost or late):
	// the run it started answers, as on a real worker.
	if r, ok := w.runs[d.WorkflowID]; ok && r.token == d.FenceToken {
		return &wire.WorkflowDispatchAck{WorkflowID: d.WorkflowID, Accepted: true, CoresAssigned: r.cores, AvailableCores: len(w.freeLocked())}, nil
	}
	if d.FenceToken < w.fences[d.WorkflowID] {
		return nil, &wire.Error{Code: wire.CodeStaleFence, Message: fmt.Sprintf("token %d older than %d", d.FenceToken, w.fences[d.WorkflowID])}
	}
	w.fences[d.WorkflowID] = d.FenceToken
	if old, ok := w.runs[d.WorkflowID]; ok {
		old.cancel()
	}
	free := w.freeLocked()
	if w.refuseFirst && !w.refused[d.WorkflowID] {
		if w.refused == nil {
			w.refused = map[string]bool{}
		}
		w.refused[d.WorkflowID] = true
		return &wire.WorkflowDispatchAck{WorkflowID: d.WorkflowID, Error: "cores taken meanwhile", AvailableCores: len(free)}, nil
	}
	runner, err := w.reg.New(d.Workflow)
	if err != nil {
		return &wire.WorkflowDispatchAck{WorkflowID: d.WorkflowID, Error: err.Error(), AvailableCores: len(free)}, nil
	}
	cores, err := w.used.AllocateIn(runKey(d.WorkflowID, d.FenceToken), d.Slot, d.Cores)
	if err != nil {
		return &wire.WorkflowDispatchAck{WorkflowID: d.WorkflowID, Error: err.Error(), AvailableCores: len(free)}, nil
	}
	ctx, cancel := context.WithCancel(w.ctx)
	r := &fakeRun{jobID: d.JobID, wfID: d.WorkflowID, name: d.Workflow.Name, token: d.FenceToken, placement: d.Placement, cores: cores, cancel: cancel}
	r.last = r.progressLocked(w.id)
	w.runs[d.WorkflowID] = r
	w.dispatches[d.WorkflowID] = append(w.dispatches[d.WorkflowID], d.FenceToken)
	w.bumpLocked()
	w.wg.Go(func() { w.run(ctx, r, runner) })
	return &wire.WorkflowDispatchAck{WorkflowID: d.WorkflowID, Accepted: true, CoresAssigned: cores, AvailableCores: w.used.Available()}, nil
}

func (r *fakeRun) progressLocked(worker string) wire.WorkflowProgress {
	p := r.last
	p.JobID, p.WorkflowID, p.WorkflowName = r.jobID, r.wfID, r.name
	p.WorkerID, p.FenceToken, p.AssignedCores, p.Placement = worker, r.token, r.cores, r.placement
	if p.Status == "" {
		p.Status = wire.WorkflowRunning
	}
	return p
}

func (w *fakeWorker) run(ctx context.Context, r *fakeRun, runner workflow.Runner) {
	defer r.cancel()
	res, err := runner.Run(ctx, workflow.Env{Cores: r.cores, Report: func(s workflow.Snapshot) {
		steps, _ := s.StepStats()
		w.mu.Lock()
		r.last.CompletedCount, r.last.FailedCount, r.last.Elapsed, r.last.StepStats = s.Completed, s.Failed, s.Elapsed, steps
		r.last.Iterations = s.Iterations
		p := r.progressLocked(w.id)
		w.mu.Unlock()
		w.report(ctx, &p, false)
	}})
	status := wire.WorkflowCompleted
	w.mu.Lock()
	forced := r.completeWith
	w.mu.Unlock()
	switch {
	case forced != nil:
		err = nil
	case err != nil && ctx.Err() != nil:
		status = wire.WorkflowCancelled
	case err != nil:
		status = wire.WorkflowFailed
	}
	steps, _ := res.StepStats()
	w.mu.Lock()
	w.used.Free(runKey(r.wfID, r.token))
	if w.runs[r.wfID] == r {
		delete(w.runs, r.wfID)
	}
	w.bumpLocked()
	r.last.CompletedCount, r.last.FailedCount, r.last.StepStats = res.Completed, res.Failed, steps
	r.last.Iterations, r.last.Elapsed = res.Iterations, res.Elapsed
	r.last.Status, r.last.Final = status, true
	if forced != nil {
		r.last.Series = forced
	}
	if err != nil {
		r.last.Error = err.Error()
	}
	// As the real worker does: a failure another attempt would repeat.
	var perm *workflow.PermanentError
	r.last.Permanent = status == wire.WorkflowFailed && errors.As(err, &perm)
	final := r.progressLocked(w.id)
	w.mu.Unlock()
	// The final report must not be lost: retry until a manager takes it
	// or the worker itself stops.
	for w.ctx.Err() == nil {
		if w.report(w.ctx, &final, true) {
			return
		}
		if !lifecycle.Sleep(w.ctx, 20*time.Millisecond) {
			return
		}
	}
}

// report sends one progress message to the leader, following redirects and
// re-homing when the leader is unreachable. It reports whether a manager
// acknowledged it.
func (w *fakeWorker) report(ctx context.Context, p *wire.WorkflowProgress, final bool) bool {
	for range 2 * len(w.managers) {
		w.mu.Lock()
		addr := w.leader
		w.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := w.tr.Call(cctx, addr, p)
		cancel()
		var we *wire.Error
		switch {
		case err == nil:
			ack := resp.(*wire.ProgressAck)
			if ack.Cancel && !final {
				w.mu.Lock()
				if r, ok := w.runs[p.WorkflowID]; ok && r.token == p.FenceToken {
					r.cancel()
				}
				w.mu.Unlock()
			}
			return true
		case errors.As(err, &we) && we.Code == wire.CodeNotLeader && we.LeaderAddr != "":
			w.mu.Lock()
			w.leader = we.LeaderAddr
			w.mu.Unlock()
		case ctx.Err() != nil:
			return false
		default:
			// The leader is gone or still being elected: re-home with the
			// next manager, reporting running work.
			w.mu.Lock()
			w.next = (slices.Index(w.managers, addr) + 1) % len(w.managers)
			w.mu.Unlock()
			if w.register(ctx) != nil || !final {
				return false
			}
		}
	}
	return false
}

// complete ends wfID's run now as completed, its final report carrying
// series: the worker's own single last word on the attempt, as a real
// worker's would be, so nothing it reports later can replace it.
func (w *fakeWorker) complete(t testing.TB, wfID string, series []wire.SecondStats) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.runs[wfID]
	if !ok {
		t.Fatalf("%s runs no %s", w.id, wfID)
	}
	r.completeWith = slices.Clone(series)
	if r.completeWith == nil {
		r.completeWith = []wire.SecondStats{}
	}
	r.cancel()
}

func (w *fakeWorker) handleCancel(_ context.Context, _ transport.Peer, msg wire.Message) (wire.Message, error) {
	c := msg.(*wire.CancelJob)
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for id, r := range w.runs {
		if r.jobID != c.JobID || (c.WorkflowID != "" && id != c.WorkflowID) {
			continue
		}
		if c.FenceToken < w.fences[id] {
			return nil, &wire.Error{Code: wire.CodeStaleFence, Message: "cancel with an old token"}
		}
		r.cancel()
		n++
	}
	return &wire.CancelAck{JobID: c.JobID, Cancelled: n > 0, WorkflowsCancelled: n}, nil
}

func (w *fakeWorker) handleStateSync(context.Context, transport.Peer, wire.Message) (wire.Message, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ws := &wire.WorkerStateSnapshot{NodeID: w.id, State: wire.WorkerHealthy, TotalCores: w.cores,
		AvailableCores: len(w.freeLocked()), Version: w.version, Addr: w.id, ActiveWorkflows: map[string]wire.WorkflowProgress{}}
	for id, r := range w.runs {
		ws.ActiveWorkflows[id] = r.progressLocked(w.id)
	}
	return &wire.StateSyncResponse{ResponderID: w.id, CurrentVersion: w.version, WorkerState: ws}, nil
}

// kill stops the worker as a crash would: its transport disappears and its
// runs end without reporting.
func (w *fakeWorker) kill() {
	w.tr.Close()
	w.cancel()
	w.wg.Wait()
}
