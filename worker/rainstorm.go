package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"tempest/rainstorm"
	"tempest/rainstorm/ckpt"
	"tempest/transport"
	"tempest/wire"
	"tempest/workflow"
)

// RainStorm host (docs/rainstorm.md, runtime): each task of a pipeline is a
// dispatched part of its workflow, run here by a driver that owns the
// task's pure state machine (rainstorm.SourceMachine or TaskMachine) on one
// goroutine and does its I/O: batches and acks to other tasks over the
// transport, checkpoints to the manager leader, and the route table from it.

const (
	rsTick       = 50 * time.Millisecond // the machines' clock
	rsRouteEvery = time.Second           // route table refresh without a failure
	rsRetry      = 200 * time.Millisecond
	// rsResendTicks: the machines' first resend timeout, 1 s. Acks wait
	// for a checkpoint to reach a majority of managers, which takes a
	// good part of a second on a loaded machine; the machines measure
	// that delay and adapt their timeouts to it, never below half this
	// (rainstorm/resend.go).
	rsResendTicks = 20
	rsInbox       = 4096 // messages queued for one task; more are dropped (resent later)
	rsOutbox      = 8192
)

// errRSFenced ends a task that a newer incarnation replaced: CANCELLED,
// not FAILED, since the pipeline goes on without it.
var errRSFenced = &stopReason{status: wire.WorkflowCancelled, reason: "replaced by a newer incarnation of the task"}

type rsKey struct {
	job, wf      string
	stage, index int
}

// rsHost maps the tasks running on this worker to their inboxes.
type rsHost struct {
	mu    sync.Mutex
	tasks map[rsKey]*rsTask
}

type rsTask struct {
	key rsKey
	inc uint64
	in  chan wire.Message
	// records counts tuples in, emitted tuples out, as the task's machine
	// counts them, for /metrics: for the source the input records read
	// and the records it sent after its chain, from the input's start;
	// for a stage the records of the batches it processed and the records
	// it emitted, since its first checkpoint (a restart resumes both from
	// the checkpoint, so resends and redone work are not counted twice).
	records, emitted atomic.Int64
	// opened tells the task that tasks of its pipeline opened: fetch the
	// routes now, then resend to those downstream.
	opened func([]wire.RainstormTask)
	// sentBy reports whether from hosts task (stage, index) of the
	// pipeline, by the task's routes (rsDriver.sentBy).
	sentBy func(ctx context.Context, from transport.Peer, stage, index int) bool
}

func (h *rsHost) add(t *rsTask) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tasks == nil {
		h.tasks = map[rsKey]*rsTask{}
	}
	if old := h.tasks[t.key]; old == nil || old.inc < t.inc {
		h.tasks[t.key] = t
	}
}

// each calls fn with every task running here, under the host's lock.
func (h *rsHost) each(fn func(*rsTask)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range h.tasks {
		fn(t)
	}
}

func (h *rsHost) remove(t *rsTask) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tasks[t.key] == t {
		delete(h.tasks, t.key)
	}
}

// routesChanged tells every task of a pipeline here which tasks opened.
func (h *rsHost) routesChanged(job, wf string, opened []wire.RainstormTask) {
	h.mu.Lock()
	var tell []func([]wire.RainstormTask)
	for k, t := range h.tasks {
		if k.job == job && k.wf == wf && t.opened != nil {
			tell = append(tell, t.opened)
		}
	}
	h.mu.Unlock()
	for _, f := range tell {
		f(opened)
	}
}

func (h *rsHost) get(k rsKey) *rsTask {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.tasks[k]
}

// deliver queues msg for task k, dropping it when the task is not here or
// its inbox is full: senders resend what is not acknowledged.
func (h *rsHost) deliver(k rsKey, inc uint64, msg wire.Message) bool {
	h.mu.Lock()
	t := h.tasks[k]
	h.mu.Unlock()
	if t == nil || (inc != 0 && t.inc != inc) {
		return false
	}
	select {
	case t.in <- msg:
		return true
	default:
		return false
	}
}

// Pipeline data is authorized by its sender. Every worker holds the same
// worker key, and a stolen one says hello under any node id, so the key
// alone would let its holder feed a running task forged tuples, or acks
// that make its upstream drop batches it never processed, by guessing the
// channel's incarnation and sequence numbers upwards. A task takes a batch
// only from the node its routes show hosting the upstream task that sent
// it, and an ack only from the node hosting the downstream task. Routes
// change when a task is replaced elsewhere, so a sender the table does not
// show gets one refresh of the table before it is refused; refusals are
// dropped (nothing answers a one-way message), counted and logged, paced.

// rsAccept reports whether a batch or ack (type t) for task to, claiming
// to come from task (stage, index) of its pipeline, comes from the node
// hosting that task; it counts and logs a refusal.
func (w *Worker) rsAccept(ctx context.Context, from transport.Peer, t wire.MsgType, to rsKey, stage, index int) bool {
	task := w.rs.get(to)
	if task == nil || task.sentBy == nil {
		return true // no such task here: deliver drops it anyway
	}
	if task.sentBy(ctx, from, stage, index) {
		return true
	}
	if log, skipped := w.refused.Add(t, w.now()); log {
		w.log.Warn("pipeline message refused for its sender", "type", t.String(), "sender", from.NodeID, "remote", from.Addr,
			"job_id", to.job, "workflow", to.wf, "stage", to.stage, "task", to.index, "claimed_stage", stage, "claimed_task", index,
			"reason", "the routes show another node hosting the sending task", "unlogged_before", skipped)
	}
	return false
}

func (w *Worker) registerRainstorm(tr transport.Transport) {
	handle(w, tr, wire.TypeRainstormBatch, func(ctx context.Context, from transport.Peer, b *wire.RainstormBatch) (wire.Message, error) {
		to := rsKey{b.From.Job, b.From.Workflow, b.From.Stage + 1, b.To}
		if w.rsAccept(ctx, from, wire.TypeRainstormBatch, to, b.From.Stage, b.From.Index) {
			w.rs.deliver(to, 0, b)
		}
		return nil, nil
	})
	handle(w, tr, wire.TypeRainstormBatchAck, func(ctx context.Context, from transport.Peer, a *wire.RainstormBatchAck) (wire.Message, error) {
		to := rsKey{a.From.Job, a.From.Workflow, a.From.Stage - 1, a.To}
		if w.rsAccept(ctx, from, wire.TypeRainstormBatchAck, to, a.From.Stage, a.From.Index) {
			w.rs.deliver(to, 0, a)
		}
		return nil, nil
	})
	// Only a hint: the tasks ask the leader for the routes themselves, so a
	// forged one costs a route request and nothing else.
	tr.Handle(wire.TypeRainstormRoutesChanged, func(_ context.Context, _ transport.Peer, msg wire.Message) (wire.Message, error) {
		if c, ok := msg.(*wire.RainstormRoutesChanged); ok {
			w.rs.routesChanged(c.Job, c.Workflow, c.Opened)
		}
		return nil, nil
	})
}

// newRunner returns the runner of a dispatched workflow: a RainStorm task
// runs on this worker's host, anything else comes from the registry.
func (w *Worker) newRunner(d *wire.WorkflowDispatch, spec wire.WorkflowSpec) (workflow.Runner, error) {
	if spec.Type != rainstorm.TypeName {
		return w.registry.New(spec)
	}
	if err := w.registry.Validate(spec); err != nil {
		return nil, err
	}
	p, err := rainstorm.DecodeTaskParams(spec.Params)
	if err != nil {
		return nil, fmt.Errorf("workflow %q: %w", spec.Name, err)
	}
	// Managers place a task only where it is allowed; this worker's own
	// config is what decides, whatever a manager believed.
	conf := w.cfg.Exec.Confinement(w.cfg.SourceDirs)
	for _, n := range p.Needs() {
		if err := rainstorm.Permits(conf, n); err != nil {
			return nil, fmt.Errorf("workflow %q: %s: %w", spec.Name, n, err)
		}
	}
	return &rsRunner{w: w, p: p, inc: d.FenceToken,
		task: wire.RainstormTask{Job: d.JobID, Workflow: spec.Name, Stage: p.Stage, Index: p.Index}}, nil
}

type rsRunner struct {
	w    *Worker
	p    *rainstorm.TaskParams
	task wire.RainstormTask
	inc  uint64
}

// Run implements workflow.Runner.
func (r *rsRunner) Run(ctx context.Context, env workflow.Env) (workflow.Result, error) {
	env = withDefaultEnv(env)
	cleanup, err := installPrograms(r.p, &r.w.cfg.Exec)
	if err != nil {
		return workflow.Result{}, err
	}
	defer cleanup()
	d := &rsDriver{
		w: r.w, p: r.p, task: r.task, inc: r.inc, env: env,
		t:       &rsTask{key: rsKey{r.task.Job, r.task.Workflow, r.task.Stage, r.task.Index}, inc: r.inc, in: make(chan wire.Message, rsInbox)},
		out:     make(chan rsOut, rsOutbox),
		kick:    make(chan struct{}, 1),
		ckptRes: make(chan *wire.RainstormCheckpointAck, 16),
		reroute: make(chan int, 64),
		rz:      newRSResize(),
		start:   env.Now(),
		log:     env.Logger.With("stage", r.task.Stage, "task", r.task.Index, "incarnation", r.inc),
	}
	d.t.opened = d.downstreamOpened
	d.t.sentBy = d.sentBy
	d.fetchRoutes = d.leaderRoutes
	r.w.rs.add(d.t)
	defer r.w.rs.remove(d.t)
	stopReports := d.reportLoop()
	err = d.run(ctx)
	stopReports()
	snap := d.snapshot()
	if env.Report != nil {
		env.Report(snap)
	}
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return workflow.Result{Snapshot: snap}, err
}

// installPrograms writes the exec programs uploaded with the job (their
// bytes came with the dispatch) to a private directory and points the
// stages' commands at them, and points every other exec command at the
// listed program it resolves to; a program the worker's exec policy does
// not allow (an upload by the SHA-256 of the bytes received) stops the
// task before anything runs. cleanup removes the directory.
func installPrograms(p *rainstorm.TaskParams, policy *rainstorm.ExecPolicy) (cleanup func(), err error) {
	cleanup = func() {}
	for s := range p.Spec.Stages {
		st := &p.Spec.Stages[s]
		// Only this task's own stage runs here (its program alone came
		// with the dispatch); the others' commands are never started.
		if s != p.Stage-1 || st.Op != rainstorm.OpExec || len(st.Command) == 0 || p.ProgramData[st.Command[0]] != nil {
			continue
		}
		prog, err := policy.Resolve(st.Command[0], "")
		if err != nil {
			return nil, fmt.Errorf("stage %s: %w", st.Name, err)
		}
		st.Command = append([]string{prog}, st.Command[1:]...)
	}
	if len(p.ProgramData) == 0 {
		return cleanup, nil
	}
	dir, err := os.MkdirTemp("", "tempest-rainstorm-")
	if err != nil {
		return nil, fmt.Errorf("install exec programs: %w", err)
	}
	cleanup = func() { _ = os.RemoveAll(dir) }
	for i, name := range slices.Sorted(maps.Keys(p.ProgramData)) {
		sum := sha256.Sum256(p.ProgramData[name])
		if _, err := policy.Resolve(name, hex.EncodeToString(sum[:])); err != nil {
			cleanup()
			return nil, err
		}
		file := filepath.Join(dir, fmt.Sprintf("%d-%s", i, filepath.Base(name)))
		if err := os.WriteFile(file, p.ProgramData[name], 0o755); err != nil {
			cleanup()
			return nil, fmt.Errorf("install exec program %s: %w", name, err)
		}
		for s := range p.Spec.Stages {
			st := &p.Spec.Stages[s]
			if st.Op == rainstorm.OpExec && len(st.Command) > 0 && st.Command[0] == name {
				st.Command = append([]string{file}, st.Command[1:]...)
			}
		}
	}
	if policy.User != "" {
		// The programs run as another user, who must reach them.
		_ = os.Chmod(dir, 0o755)
	}
	return cleanup, nil
}

// execWorkDir makes the private working directory of one task's exec
// program: empty, 0700, owned by the user the program runs as (cred; nil:
// the worker's), so the program starts somewhere it can write and that
// holds nothing of the worker's (the worker's own working directory may be
// its data directory). cleanup removes it and whatever the program left.
func execWorkDir(cred *syscall.Credential) (dir string, cleanup func(), err error) {
	dir, err = os.MkdirTemp("", "tempest-exec-")
	if err != nil {
		return "", nil, fmt.Errorf("working directory: %w", err)
	}
	cleanup = func() { _ = os.RemoveAll(dir) }
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			cleanup()
			return "", nil, fmt.Errorf("working directory for uid %d: %w", cred.Uid, err)
		}
	}
	return dir, cleanup, nil
}

// newExecOptions are what every exec stage on this worker starts from:
// the policy's environment, PATH, line cap and limits, its user, and a
// cgroup parent where the host has a writable cgroup v2.
func newExecOptions(cfg *Config, deps *Deps, log *slog.Logger) (rainstorm.ExecOptions, error) {
	p := &cfg.Exec
	o := rainstorm.ExecOptions{Path: p.Path, MaxLine: p.MaxLineBytes, Limits: p.Limits, Shim: deps.ExecShim, Logger: log}
	for _, name := range p.Env {
		if v, ok := os.LookupEnv(name); ok {
			o.Env = append(o.Env, name+"="+v)
		}
	}
	cred, err := p.Credential()
	if err != nil {
		return o, fmt.Errorf("exec.user: %w", err)
	}
	if cred != nil && os.Geteuid() != 0 {
		return o, fmt.Errorf("exec.user %s: the worker must run as root to run programs as another user", p.User)
	}
	o.Credential = cred
	if p.Enabled && p.Cgroup != "off" {
		dir, err := rainstorm.DetectCgroupParent()
		if err != nil {
			log.Warn("exec: no cgroup v2 to confine programs in; process groups and rlimits only", "err", err)
		} else {
			o.CgroupParent = dir
			log.Info("exec: each program runs in a cgroup of its own", "parent", dir)
			// A worker killed outright left its programs running: end them.
			if n, err := rainstorm.SweepCgroups(dir); err != nil || n > 0 {
				log.Warn("exec: ended the programs of a worker that is gone", "cgroups", n, "err", err)
			}
		}
	}
	return o, nil
}

func withDefaultEnv(env workflow.Env) workflow.Env {
	if env.Now == nil {
		env.Now = time.Now
	}
	if env.ReportInterval <= 0 {
		env.ReportInterval = workflow.DefaultReportInterval
	}
	if env.Logger == nil {
		env.Logger = slog.New(slog.DiscardHandler)
	}
	return env
}

type rsOut struct {
	stage, index int
	msg          wire.Message
}

// rsDriver runs one task. Its machine is touched only by run's goroutine;
// the sender, route refresher and checkpoint calls talk to it by channel.
type rsDriver struct {
	w    *Worker
	p    *rainstorm.TaskParams
	task wire.RainstormTask
	inc  uint64
	env  workflow.Env
	log  *slog.Logger
	t    *rsTask
	out  chan rsOut
	// flush, once closed, has the send loop send what is queued and
	// close flushed (flushSends).
	flush, flushed chan struct{}
	kick           chan struct{}
	ckptRes        chan *wire.RainstormCheckpointAck
	routes         atomic.Pointer[map[[2]int]wire.RainstormRoute]
	// reroute carries the downstream tasks the route loop saw replaced,
	// for the machine to resend to at once (dropped when full: the resend
	// timer covers it).
	reroute chan int
	routeMu sync.Mutex // one route table update at a time; guards hinted
	// refreshMu serialises the route refreshes a sender the table does not
	// show asks for, and guards refreshedAt, when the last one ended: a
	// flood of forged messages costs the leader one route request per
	// rsRefreshEvery, and concurrent refusals share one.
	refreshMu   sync.Mutex
	refreshedAt time.Time
	// fetchRoutes asks the leader for the pipeline's routes (callLeader;
	// tests replace it).
	fetchRoutes func(ctx context.Context) ([]wire.RainstormRoute, error)
	// hinted are downstream tasks that opened since the last route fetch:
	// the next fetch reroutes to them whatever their incarnation was.
	hinted map[int]bool
	start  time.Time

	bad atomic.Int64
	// wellFormed is a source's well-formed records read, its progress.
	wellFormed atomic.Int64
	// paceFrom is, for a paced generate source once it runs, where its
	// schedule starts (the due time of the record it resumed at); nil
	// otherwise, the zero value.
	paceFrom atomic.Pointer[time.Duration]
	wg       sync.WaitGroup
	// file identifies a path: source's input as opened (nil otherwise).
	file *wire.RainstormFileID
	// rz is the driver's side of resizing (rainstorm_resize.go).
	rz rsResize
}

// reportLoop reports progress every ReportInterval until the returned
// function is called (which waits for a report in progress).
func (d *rsDriver) reportLoop() (stop func()) {
	if d.env.Report == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	d.w.spawn(&wg, func() { // refused only at shutdown: no reports then
		t := time.NewTicker(d.env.ReportInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				d.env.Report(d.snapshot())
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

func (d *rsDriver) snapshot() workflow.Snapshot {
	// A pipeline's count is its input records, once: the source reports
	// the well-formed records it read, a stage only its own bad records.
	s := workflow.Snapshot{Elapsed: d.env.Now().Sub(d.start), Failed: d.bad.Load()}
	if d.task.Stage == 0 {
		s.Completed = d.wellFormed.Load()
		if at := d.paceFrom.Load(); at != nil {
			// Due by now on the schedule the source paces itself by
			// (from where it resumed), and never less than it read.
			g := d.p.Spec.Source.Generate
			s.Offered = max(int64(g.DueBy(*at+s.Elapsed)), s.Completed)
		}
	}
	return s
}

// needsHeader: the stages name CSV columns the source learns from the
// input's first record.
func needsHeader(s *rainstorm.Spec) bool {
	return s.Source.Generate == nil && s.Source.SourceFormat() == rainstorm.FormatCSV && s.Source.Header
}

func (d *rsDriver) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		d.wg.Wait()
	}()
	spec := &d.p.Spec
	var (
		input  io.ReadCloser
		header []string
	)
	if d.task.Stage == 0 && spec.Source.Generate == nil {
		f, err := d.openInput(ctx)
		if err != nil {
			return err
		}
		input = f
		defer input.Close()
		if file, ok := f.(*os.File); ok && spec.Source.Path != "" && spec.Source.Splits() == 1 {
			// A file on this worker's disk can change under the pipeline,
			// or differ on the worker a replacement lands on: identify it
			// (a range of a split one identifies its part, sourceRange).
			if d.file, err = rainstorm.IdentifyFile(ctx, file); err != nil {
				return fmt.Errorf("source %s: %w", d.sourceName(), err)
			}
		}
		if needsHeader(spec) {
			rd, err := rainstorm.NewReader(f, rainstorm.ReaderOptions{Format: rainstorm.FormatCSV, Header: true})
			if err != nil {
				return fmt.Errorf("source %s: %w", d.sourceName(), err)
			}
			header = rd.Header()
		}
	}
	reply, err := d.open(ctx, header)
	if err != nil {
		return err
	}
	if d.task.Stage > 0 {
		header = reply.Header
	}
	d.setRoutes(reply.Routes)
	d.rz.epochs = d.rz.machineEpochs(spec, reply.Epochs)
	pipe, err := rainstorm.Compile(spec, header)
	if err != nil {
		return fmt.Errorf("pipeline: %w", err)
	}
	d.flush, d.flushed = make(chan struct{}), make(chan struct{})
	if !d.w.spawn(&d.wg, func() { d.sendLoop(ctx) }) || !d.w.spawn(&d.wg, func() { d.routeLoop(ctx) }) {
		return errShutdown
	}
	if d.task.Stage == 0 {
		return d.runSource(ctx, pipe, input, header, reply.Checkpoint)
	}
	return d.runTask(ctx, pipe, header, reply.Checkpoint)
}

func (d *rsDriver) sourceName() string {
	if d.p.Spec.Source.Path != "" {
		return d.p.Spec.Source.Path
	}
	return d.p.Spec.Source.File
}

func (d *rsDriver) openInput(ctx context.Context) (io.ReadCloser, error) {
	src := d.p.Spec.Source
	if src.File != "" {
		if d.p.Blob == "" {
			return nil, fmt.Errorf("source %q was not uploaded with the job", src.File)
		}
		return d.w.openBlob(ctx, d.p.Blob)
	}
	f, err := rainstorm.OpenSource(src.Path, d.w.cfg.SourceDirs)
	if err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	return f, nil
}

// open fences the task at the manager leader and fetches its checkpoint,
// retrying while the leader is unknown, syncing, or waiting for the
// source's header.
func (d *rsDriver) open(ctx context.Context, header []string) (*wire.RainstormOpenReply, error) {
	req := &wire.RainstormOpen{Task: d.task, Incarnation: d.inc}
	if d.task.Stage == 0 {
		req.Header, req.HasHeader = header, true
	}
	// A state too large for one message comes in parts, asked for one
	// by one; a part that does not follow (a leader changed between
	// parts and holds another version) starts the reading over.
	var parts ckpt.Joiner
	for attempt := 0; ; attempt++ {
		resp, err := d.w.callLeader(ctx, req)
		var we *wire.Error
		switch {
		case errors.As(err, &we) && we.Code == wire.CodeStaleFence:
			return nil, fmt.Errorf("%w: %s", errRSFenced, we.Message)
		case err != nil:
			if attempt%25 == 0 {
				d.log.Debug("rainstorm open: retrying", "err", err, "part", req.Part)
			}
		default:
			reply, ok := resp.(*wire.RainstormOpenReply)
			if !ok {
				return nil, fmt.Errorf("rainstorm open: manager answered %s", resp.Type())
			}
			whole, more, err := d.joinPart(&parts, req, reply)
			switch {
			case err != nil:
				return nil, err
			case more:
				continue // the next part, at once
			}
			reply.Checkpoint = whole
			if d.task.Stage == 0 || reply.HasHeader || !needsHeader(&d.p.Spec) {
				return reply, nil
			}
		}
		if err := sleepCtx(ctx, rsRetry); err != nil {
			return nil, err
		}
	}
}

// joinPart adds reply's part of the checkpoint to parts and sets which
// part req asks for next. more says to ask again at once: the checkpoint
// continues in another part, or a part did not follow the ones before (a
// leader changed between parts) and the reading starts over at part 0.
// Otherwise whole is the checkpoint, nil for a fresh start.
func (d *rsDriver) joinPart(parts *ckpt.Joiner, req *wire.RainstormOpen, reply *wire.RainstormOpenReply) (whole *wire.RainstormCheckpoint, more bool, err error) {
	asked := req.Part
	req.Part = 0
	if reply.Checkpoint == nil {
		if asked > 0 {
			d.log.Info("rainstorm open: no checkpoint part where one was; reading again", "part", asked)
			return nil, true, nil
		}
		return nil, false, nil
	}
	whole, err = parts.Add(reply.Checkpoint)
	switch {
	case err != nil:
		d.log.Info("rainstorm open: reading the checkpoint again", "err", err)
		return nil, true, nil
	case whole == nil:
		req.Part = reply.Checkpoint.Part + 1
		return nil, true, nil
	}
	if err := rainstorm.UnpackPending(whole); err != nil {
		return nil, false, fmt.Errorf("rainstorm open: checkpoint %d: %w", whole.Version, err)
	}
	return whole, false, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// callLeader sends a request to the manager leader, following redirects
// as the progress path does.
func (w *Worker) callLeader(ctx context.Context, msg wire.Message) (wire.Message, error) {
	_, addr := w.leader.current()
	if addr == "" {
		w.requestRegistration("")
		return nil, errors.New("no manager leader known")
	}
	cctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
	resp, err := w.tr.Call(cctx, addr, msg)
	cancel()
	if err == nil {
		w.leader.callSucceeded(addr)
		return resp, nil
	}
	var we *wire.Error
	if !errors.As(err, &we) {
		if ctx.Err() == nil && w.leader.callFailed(addr, failoverAfter) && w.leader.lost(addr) {
			w.requestRegistration(addr)
		}
		return nil, err
	}
	w.leader.callSucceeded(addr)
	if we.Code == wire.CodeNotLeader {
		if we.LeaderAddr != "" && we.LeaderAddr != addr {
			w.leader.set(we.Leader, we.LeaderAddr, 0)
		} else {
			w.leader.lost(addr)
			w.requestRegistration(addr)
		}
	}
	return nil, err
}

// setRoutes installs a route table from the leader and tells the machine
// which downstream tasks now run under a new incarnation: a replacement
// that opened, which should get its unacknowledged batches now.
func (d *rsDriver) setRoutes(rs []wire.RainstormRoute) {
	d.routeMu.Lock()
	defer d.routeMu.Unlock()
	old := d.routes.Load()
	m := make(map[[2]int]wire.RainstormRoute, len(rs))
	for _, r := range rs {
		m[[2]int{r.Stage, r.Index}] = r
	}
	d.routes.Store(&m)
	hinted := d.hinted
	d.hinted = nil
	if old == nil && len(hinted) == 0 {
		return // the first table: nothing was sent yet
	}
	for _, r := range rs {
		if r.Stage != d.task.Stage+1 || r.Addr == "" || r.Incarnation == 0 {
			continue
		}
		if !hinted[r.Index] {
			if old == nil {
				continue
			}
			if was, ok := (*old)[[2]int{r.Stage, r.Index}]; ok && was.Incarnation == r.Incarnation {
				continue
			}
		}
		select {
		case d.reroute <- r.Index:
		default:
		}
	}
}

// rsRefreshEvery bounds how often a sender the routes do not show makes a
// task fetch them again.
const rsRefreshEvery = 250 * time.Millisecond

// sentBy reports whether from hosts task (stage, index) of this pipeline.
// The routes may be older than a replacement that moved the task to
// another node, so a sender they do not show gets one fresh table first.
func (d *rsDriver) sentBy(ctx context.Context, from transport.Peer, stage, index int) bool {
	if d.hosts(from, stage, index) {
		return true
	}
	d.refreshMu.Lock()
	defer d.refreshMu.Unlock()
	if d.hosts(from, stage, index) { // another refusal's refresh showed it
		return true
	}
	if now := d.env.Now(); d.refreshedAt.IsZero() || now.Sub(d.refreshedAt) >= rsRefreshEvery {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		rs, err := d.fetchRoutes(ctx)
		cancel()
		if err == nil {
			d.setRoutes(rs)
		}
		d.refreshedAt = d.env.Now()
	}
	return d.hosts(from, stage, index)
}

// hosts reports whether the routes show from hosting task (stage, index):
// by node id, or by address from a leader that sends no node ids.
func (d *rsDriver) hosts(from transport.Peer, stage, index int) bool {
	m := d.routes.Load()
	if m == nil {
		return false
	}
	r, ok := (*m)[[2]int{stage, index}]
	switch {
	case !ok:
		return false
	case r.Node != "":
		return r.Node == from.NodeID
	default:
		return r.Addr != "" && r.Addr == from.Addr
	}
}

// leaderRoutes fetches the pipeline's routes from the manager leader.
// It carries the task's handover requests, and takes their answers and
// the sizes the leader wants (rainstorm_resize.go).
func (d *rsDriver) leaderRoutes(ctx context.Context) ([]wire.RainstormRoute, error) {
	resp, err := d.w.callLeader(ctx, &wire.RainstormRoutesRequest{Job: d.task.Job, Workflow: d.task.Workflow, Handovers: d.rz.pending()})
	if err != nil {
		return nil, err
	}
	rr, ok := resp.(*wire.RainstormRoutes)
	if !ok {
		return nil, fmt.Errorf("routes request answered with %T", resp)
	}
	if d.rz.answered(d.task.Stage == 0, rr) {
		d.kickRoutes() // the next page of a handover
	}
	return rr.Routes, nil
}

func (d *rsDriver) route(stage, index int) (wire.RainstormRoute, bool) {
	m := d.routes.Load()
	if m == nil {
		return wire.RainstormRoute{}, false
	}
	r, ok := (*m)[[2]int{stage, index}]
	return r, ok && r.Addr != ""
}

// downstreamOpened takes the leader's hint that tasks opened: the routes
// are fetched now, and that fetch resends to the downstream ones among
// them, even when an earlier fetch already showed their incarnation (a
// resend that reached a replacement before its inbox existed was lost).
func (d *rsDriver) downstreamOpened(opened []wire.RainstormTask) {
	d.routeMu.Lock()
	for _, t := range opened {
		if t.Stage == d.task.Stage+1 {
			if d.hinted == nil {
				d.hinted = map[int]bool{}
			}
			d.hinted[t.Index] = true
		}
	}
	d.routeMu.Unlock()
	d.kickRoutes()
}

func (d *rsDriver) kickRoutes() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// routeLoop keeps the route table fresh: on a send failure at once, else
// every rsRouteEvery. A downstream task that completed has made durable
// every batch it will ever take, so its completion stands for an ack of
// all of them (its last acks may have been lost with it).
func (d *rsDriver) routeLoop(ctx context.Context) {
	t := time.NewTicker(rsRouteEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.kick:
		}
		routes, err := d.fetchRoutes(ctx)
		if err != nil {
			continue
		}
		d.setRoutes(routes)
		for _, r := range routes {
			if r.Stage == d.task.Stage+1 && r.Done {
				// Of the epoch the downstream task ended in: a task
				// retired by a resize is done after its last epoch.
				a := &wire.RainstormBatchAck{From: wire.RainstormTask{Job: d.task.Job, Workflow: d.task.Workflow, Stage: r.Stage, Index: r.Index},
					To: d.task.Index, UpTo: math.MaxUint64, Epoch: r.Epoch}
				select {
				case d.t.in <- a:
				default:
				}
			}
		}
	}
}

// sendLoop moves batches and acks to their tasks: to a task on this worker
// directly, else over the transport.
//
// Once d.flush is closed it sends what is still queued and returns: a
// finished task's last acks are queued just before it ends, and dropped
// with the loop they would leave its upstream to learn it is done from
// its resend timer and the routes, which kept every pipeline's end most
// of a second behind its output. It closes d.flushed as it returns.
func (d *rsDriver) sendLoop(ctx context.Context) {
	defer close(d.flushed)
	self := d.w.Addr()
	for {
		select {
		case <-ctx.Done():
			return
		case o := <-d.out:
			d.send(ctx, self, o)
		case <-d.flush:
			for {
				select {
				case <-ctx.Done():
					return
				case o := <-d.out:
					d.send(ctx, self, o)
				default:
					return
				}
			}
		}
	}
}

func (d *rsDriver) send(ctx context.Context, self string, o rsOut) {
	r, ok := d.route(o.stage, o.index)
	if !ok {
		d.kickRoutes()
		return
	}
	if r.Addr == self && d.w.rs.deliver(rsKey{d.task.Job, d.task.Workflow, o.stage, o.index}, r.Incarnation, o.msg) {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err := d.w.tr.Send(cctx, r.Addr, o.msg)
	cancel()
	if err != nil && ctx.Err() == nil {
		d.log.Debug("rainstorm send failed", "to_stage", o.stage, "to_task", o.index, "err", err)
		d.kickRoutes()
	}
}

// flushSends has the send loop send what is queued and waits until it
// has (or ctx ends): a finished task's last words.
func (d *rsDriver) flushSends(ctx context.Context) {
	close(d.flush)
	select {
	case <-d.flushed:
	case <-ctx.Done():
	}
}

func (d *rsDriver) queue(stage, index int, msg wire.Message) {
	select {
	case d.out <- rsOut{stage, index, msg}:
	default: // dropped: resent when unacknowledged
	}
}

// checkpoint writes c to the manager leader on its own goroutine; the
// answer comes back to the machine through ckptRes.
func (d *rsDriver) checkpoint(ctx context.Context, c *wire.RainstormCheckpoint) {
	d.w.spawn(&d.wg, func() { // refused only at shutdown, when nothing needs it
		// Batches go encoded, once: the managers keep them as bytes.
		packed, err := rainstorm.PackPending(c)
		if err != nil {
			d.log.Warn("rainstorm checkpoint not encoded", "version", c.Version, "err", err)
			return
		}
		resp, err := d.w.callLeader(ctx, packed)
		if err != nil {
			d.log.Debug("rainstorm checkpoint not stored", "version", c.Version, "err", err)
			return // the machine resends it
		}
		if a, ok := resp.(*wire.RainstormCheckpointAck); ok {
			select {
			case d.ckptRes <- a:
			case <-ctx.Done():
			}
		}
	})
}

// apply does what a machine asked; it reports a failure, a fence, or done.
func (d *rsDriver) apply(ctx context.Context, r rainstorm.Ready) (done bool, err error) {
	for _, b := range r.Batches {
		d.queue(d.task.Stage+1, b.To, b)
	}
	for _, a := range r.Acks {
		d.queue(d.task.Stage-1, a.To, a)
	}
	if r.Checkpoint != nil {
		d.checkpoint(ctx, r.Checkpoint)
	}
	if d.rz.want(r.Handovers) {
		d.kickRoutes()
	}
	switch {
	case r.Failed != nil:
		return false, r.Failed
	case r.Fenced:
		return false, errRSFenced
	}
	return r.Done, nil
}

func (d *rsDriver) runSource(ctx context.Context, pipe *rainstorm.Pipeline, input io.ReadCloser, header []string, ckpt *wire.RainstormCheckpoint) error {
	spec := &d.p.Spec
	ropts := rainstorm.ReaderOptions{Format: spec.Source.SourceFormat(), Header: spec.Source.Header}
	var (
		rng *rainstorm.Range
		err error
	)
	if n := spec.Source.Splits(); n > 1 && spec.Source.Generate == nil {
		// Found again at every start, from the bytes alone: the same
		// range an earlier incarnation read.
		if rng, err = d.sourceRange(ctx, input, n, ropts, ckpt); err != nil {
			return err
		}
	}
	if ckpt != nil && ckpt.Source != nil && !ckpt.Done { // a finished source reads nothing more
		if err := rainstorm.SameFile(d.sourceName(), ckpt.Source.File, d.file); err != nil {
			return err
		}
	}
	chain, err := pipe.NewChain()
	if err != nil {
		return err
	}
	if chain != nil {
		defer chain.Close()
	}
	m, err := rainstorm.NewSourceMachine(rainstorm.SourceConfig{
		Task: d.task, Incarnation: d.inc, Downstream: spec.Stages[0].TaskCount(), Next: pipe.Stages[0],
		Chain: chain, FailOnBadRecord: spec.FailOnBadRecord, ResendTicks: rsResendTicks, File: d.file,
		Epochs: d.rz.epochs, Range: rng,
	}, ckpt)
	if err != nil {
		return err
	}
	pos := m.Resume()
	d.sourceCounts(m) // a restart counts on from its checkpoint
	var src rainstorm.RecordSource
	if g := spec.Source.Generate; g != nil {
		src = rainstorm.NewGenerator(g, pos.Record)
	} else {
		if pos.Offset == 0 && pos.Record == 0 {
			var f io.Reader
			if rs, ok := input.(io.ReadSeeker); ok && d.file != nil {
				// The file just identified, read again from its start
				// rather than opened anew (which could find another).
				if _, err := rs.Seek(0, io.SeekStart); err != nil {
					return fmt.Errorf("source: rewind: %w", err)
				}
				f = rs
			} else {
				in, err := d.openInput(ctx)
				if err != nil {
					return err
				}
				defer in.Close()
				f = in
			}
			rd, err := rainstorm.NewReader(f, ropts)
			if err != nil {
				return fmt.Errorf("source %s: %w", d.sourceName(), err)
			}
			src = rd
		} else {
			f, ok := input.(io.ReadSeeker)
			if !ok {
				return errors.New("source: input cannot seek to its checkpoint")
			}
			if _, err := f.Seek(pos.Offset, io.SeekStart); err != nil {
				return fmt.Errorf("source: seek to %d: %w", pos.Offset, err)
			}
			src = rainstorm.ResumeReader(input, pos, ropts, header)
		}
	}
	if rd, ok := src.(*rainstorm.Reader); ok {
		rd.SetKeep(pipe.ReadKeep()) // only the columns the stages read
		if chain.Streams() {
			rd.ReuseFields() // the combiner keeps no record
		}
	}
	if rng != nil {
		src = &rainstorm.RangeSource{Src: src, End: rng.End}
	}
	segN := uint64(rainstorm.DefaultSegmentRecords)
	gen := spec.Source.Generate
	paced := gen != nil && gen.Paced()
	resumed := pos.Record
	if paced {
		at := gen.DueAt(resumed)
		d.paceFrom.Store(&at)
	}
	tick := time.NewTicker(rsTick)
	defer tick.Stop()
	var done bool
	for {
		// Read what the window allows (and a paced generator has due).
		for range 16 {
			idx, want := m.Want()
			if !want {
				break
			}
			if paced {
				// The schedule counts from the pipeline's first record;
				// a restarted source picks it up where it resumed.
				due := d.start.Add(gen.DueAt(max(idx*segN, resumed)) - gen.DueAt(resumed))
				if d.env.Now().Before(due) {
					break
				}
			}
			var seg rainstorm.Segment
			if chain.Streams() {
				seg, err = rainstorm.ReadChainedSegment(src, idx, int(segN), chain)
			} else {
				seg, err = rainstorm.ReadSegment(src, idx, int(segN))
			}
			if err != nil {
				return fmt.Errorf("source: read: %w", err)
			}
			m.Segment(seg)
			d.sourceCounts(m)
			if done, err = d.apply(ctx, m.Ready()); err != nil || done {
				return err
			}
		}
		_, want := m.Want()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case msg := <-d.t.in:
			if a, ok := msg.(*wire.RainstormBatchAck); ok {
				m.Ack(a)
			}
		case a := <-d.ckptRes:
			m.CheckpointResult(a)
		case i := <-d.reroute:
			m.Rerouted(i)
		case tasks := <-d.rz.resize:
			m.Resize(tasks)
		case <-tick.C:
			m.Tick()
		default:
			if !want || paced {
				// Nothing to read now: wait for an event.
				select {
				case <-ctx.Done():
					return ctx.Err()
				case msg := <-d.t.in:
					if a, ok := msg.(*wire.RainstormBatchAck); ok {
						m.Ack(a)
					}
				case a := <-d.ckptRes:
					m.CheckpointResult(a)
				case i := <-d.reroute:
					m.Rerouted(i)
				case tasks := <-d.rz.resize:
					m.Resize(tasks)
				case <-tick.C:
					m.Tick()
				}
			}
		}
		if done, err = d.apply(ctx, m.Ready()); err != nil || done {
			if done {
				d.log.Info("rainstorm source finished")
			}
			return err
		}
	}
}

// sourceCounts publishes a source's counts: the records it read (its
// tuples in), those it sent (its tuples out: after a chain, the records
// the chained stages passed on or the combiner's partials, which is what
// the first stage takes in), and the well-formed records read, its
// progress, since a pipeline's completed count is its input records
// whatever a chain passes on.
func (d *rsDriver) sourceCounts(m *rainstorm.SourceMachine) {
	read, bad := m.Read()
	d.bad.Store(int64(bad))
	d.wellFormed.Store(int64(read - bad))
	d.t.records.Store(int64(read))
	d.t.emitted.Store(int64(m.Sent()))
}

// sourceRange finds this source task's range of a split input (the task's
// index of n), reading input from its start up to the range's first
// record, and identifies a `path:` input's range (d.file); the caller
// seeks to where it reads from.
func (d *rsDriver) sourceRange(ctx context.Context, input io.ReadCloser, n int, ropts rainstorm.ReaderOptions, ckpt *wire.RainstormCheckpoint) (*rainstorm.Range, error) {
	var size int64
	switch f := input.(type) {
	case *os.File:
		st, err := f.Stat()
		if err != nil {
			return nil, fmt.Errorf("source %s: %w", d.sourceName(), err)
		}
		size = st.Size()
	case *rsBlobReader:
		n, err := f.Size()
		if err != nil {
			return nil, fmt.Errorf("source %s: %w", d.sourceName(), err)
		}
		size = n
	default:
		return nil, fmt.Errorf("source %s: a split input must be a file or an uploaded blob", d.sourceName())
	}
	rs := input.(io.ReadSeeker)
	if _, err := rs.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("source %s: rewind: %w", d.sourceName(), err)
	}
	rng, header, err := rainstorm.FindRange(rs, size, d.task.Index, n, ropts)
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", d.sourceName(), err)
	}
	if file, ok := input.(*os.File); ok && d.p.Spec.Source.Path != "" {
		if ckpt != nil && ckpt.Source != nil && ckpt.Source.File != nil && ckpt.Source.File.Range == nil {
			// Recorded by a worker that identified the whole file.
			d.file, err = rainstorm.IdentifyFile(ctx, file)
		} else {
			d.file, err = rainstorm.IdentifyRange(ctx, file, size, rng, ropts, header)
		}
		if err != nil {
			return nil, fmt.Errorf("source %s: %w", d.sourceName(), err)
		}
	}
	d.log.Info("rainstorm source: reading a range of the input", "range", d.task.Index+1, "of", n,
		"first_record", rng.Start.Record+1, "offset", rng.Start.Offset, "end", rng.End)
	return &rng, nil
}

func (d *rsDriver) runTask(ctx context.Context, pipe *rainstorm.Pipeline, header []string, ckpt *wire.RainstormCheckpoint) error {
	spec := &d.p.Spec
	cs := pipe.Stages[d.task.Stage-1]
	cfg := rainstorm.TaskConfig{
		Task: d.task, Incarnation: d.inc, Stage: cs,
		AtLeastOnce: spec.AtLeastOnce, FailOnBadRecord: spec.FailOnBadRecord, ResendTicks: rsResendTicks,
		Epochs: d.rz.epochs,
	}
	if d.task.Stage == 1 {
		cfg.Upstream = spec.Source.Splits()
	} else {
		cfg.Upstream = spec.Stages[d.task.Stage-2].TaskCount()
	}
	if d.task.Stage < len(spec.Stages) {
		cfg.Downstream = spec.Stages[d.task.Stage].TaskCount()
		cfg.Next = pipe.Stages[d.task.Stage]
	}
	if !cs.Op.Aggregate() {
		opts := d.w.execOpts
		opts.Columns = rainstorm.Columns(spec, header, d.task.Stage-1)
		opts.Logger = d.log
		if cs.Op == rainstorm.OpExec {
			dir, cleanup, err := execWorkDir(opts.Credential)
			if err != nil {
				return fmt.Errorf("exec stage %s: %w", cs.Name, err)
			}
			defer cleanup() // after the program is closed (deferred below)
			opts.Dir = dir
		}
		op, err := cs.Operator(opts)
		if err != nil {
			return err
		}
		defer op.Close()
		cfg.Transform = op
	}
	m, err := rainstorm.NewTaskMachine(cfg, ckpt)
	if err != nil {
		return err
	}
	tick := time.NewTicker(rsTick)
	defer tick.Stop()
	for {
		done, err := d.apply(ctx, m.Ready())
		if err != nil {
			return err
		}
		d.bad.Store(int64(m.Bad()))
		in, out := m.Records()
		d.t.records.Store(int64(in))
		d.t.emitted.Store(int64(out))
		if done {
			d.log.Info("rainstorm task's final checkpoint is durable")
		}
		// Ends once its last acks are sent: an upstream task that missed
		// them resends, finds it gone and the routes showing it done,
		// which counts as an ack of everything (routeLoop). Lingering to
		// ack again kept every pipeline's end a second behind its output.
		if m.Finished() {
			d.flushSends(ctx)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case msg := <-d.t.in:
			d.handle(m, msg)
			for range 256 { // take what is queued before the next Ready
				select {
				case msg := <-d.t.in:
					d.handle(m, msg)
					continue
				default:
				}
				break
			}
		case a := <-d.ckptRes:
			m.CheckpointResult(a)
		case i := <-d.reroute:
			m.Rerouted(i)
		case h := <-d.rz.handovers:
			handover(m, d.task, h)
		case <-tick.C:
			m.Tick()
		}
	}
}

func (d *rsDriver) handle(m *rainstorm.TaskMachine, msg wire.Message) {
	switch x := msg.(type) {
	case *wire.RainstormBatch:
		m.Batch(x)
	case *wire.RainstormBatchAck:
		m.Ack(x)
	}
}
