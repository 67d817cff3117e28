package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"tempest/leadership"
	"tempest/rainstorm"
	"tempest/rsstore"
	"tempest/transport"
	"tempest/wire"
)

// RainStorm tasks and their checkpoint store (docs/rainstorm.md, runtime).
// The store itself — committer, replication, undo, sync — is rsstore's;
// this manager runs it (rsHost), answers the tasks' requests after
// checking who sent them (authz.go), and keeps the pipelines' tasks in the
// job table.

func (m *Manager) openRainstorm() error {
	s, err := rsstore.Open(m.cfg.DataDir, rsHost{m}, rsstore.Config{QuorumTimeout: m.cfg.QuorumTimeout})
	if err != nil {
		return err
	}
	m.rs = s
	m.life.Opened(s.Close)
	return nil
}

// rsHost is what the checkpoint store needs of this manager.
type rsHost struct{ m *Manager }

// The store replicates to learners too (rsstore.LearnerHost).
var _ rsstore.LearnerHost = rsHost{}

// Peers are the voters only: the checkpoint store counts every answer
// toward its majority, and a learner's must not count.
func (h rsHost) Peers() ([]string, int) {
	p := h.m.group.Load()
	return p.VoterIDs, p.Quorum
}

// HoldPeers is Peers for a commit, with the learners of the same set, held
// in the group's view until the commit is applied and queued for them: a
// learner's copy is answered once no commit holds an older set
// (learnerSyncGate), as the job table's is.
func (h rsHost) HoldPeers() ([]string, int, []string, func()) {
	p, release := h.m.group.Hold()
	return p.VoterIDs, p.Quorum, p.LearnerIDs, release
}

func (h rsHost) Call(ctx context.Context, id string, msg wire.Message) (wire.Message, error) {
	addr := h.m.group.Load().Addr(id)
	if addr == "" {
		return nil, fmt.Errorf("manager %s: %w", id, leadership.ErrNotAMember)
	}
	return h.m.tr.Call(ctx, addr, msg)
}

func (h rsHost) Logger() *slog.Logger { return h.m.log }

func (h rsHost) StaleReason(sender string, term uint64) string {
	return h.m.rsStaleReason(sender, term)
}

func (h rsHost) Admit(r *rsstore.Request) *rsstore.Result { return h.m.rsAdmit(r) }

// Opened tells the pipelines' workers that tasks opened, if this manager
// still leads in term.
func (h rsHost) Opened(term uint64, opens []*wire.RainstormOpen) {
	if lt := h.m.leading(); lt != nil && lt.Number() == term {
		h.m.rsRoutesChanged(lt, opens)
	}
}

func (m *Manager) registerRainstorm() {
	// A task's open, checkpoints and route requests come only from the
	// worker it is dispatched to (authz.go): the handlers drop a request
	// from a node running no task of the pipeline before it is queued, and
	// the committer checks the exact task, in the same view of the job
	// table it checks the incarnation in.
	handle(m, wire.TypeRainstormOpen, func(ctx context.Context, from transport.Peer, msg *wire.RainstormOpen) (wire.Message, error) {
		if _, err := m.rsReady(); err != nil {
			return nil, err
		}
		if !m.rsSenderInPipeline(from.NodeID, msg.Task.Job, msg.Task.Workflow) {
			m.unauthorized(wire.TypeRainstormOpen, from, msg.Task.Job, msg.Task.Workflow, "no task of the pipeline dispatched to the sender")
			return nil, rsNotDispatched(msg.Task)
		}
		resp, err := m.rsSubmit(ctx, &rsstore.Request{Open: msg, From: from})
		if r, ok := resp.(*wire.RainstormOpenReply); ok && err == nil {
			// Routes after the open is durable: a replacement that
			// opened shows in them.
			var spec *rainstorm.Spec
			r.Routes, spec, _ = m.rsRoutesFor(from.NodeID, msg.Task.Job, msg.Task.Workflow)
			r.Epochs = m.rsEpochsFor(msg.Task.Job, msg.Task.Workflow, spec)
		}
		return resp, err
	})
	handle(m, wire.TypeRainstormCheckpoint, func(ctx context.Context, from transport.Peer, msg *wire.RainstormCheckpoint) (wire.Message, error) {
		if _, err := m.rsReady(); err != nil {
			return nil, err
		}
		if !m.rsSenderInPipeline(from.NodeID, msg.Task.Job, msg.Task.Workflow) {
			m.unauthorized(wire.TypeRainstormCheckpoint, from, msg.Task.Job, msg.Task.Workflow, "no task of the pipeline dispatched to the sender")
			if in := m.rsTaskInfo(msg.Task); in.found && msg.Incarnation < in.token {
				m.rsStaleRefused(msg, in) // a replaced worker's task, still running (thawed)
			}
			return rsstore.FencedAck(msg, "task not dispatched to this sender"), nil
		}
		if len(msg.Pending) > 0 { // decoded batches: keep them in the store's form
			packed, err := rainstorm.PackPending(msg)
			if err != nil {
				return nil, wire.Errorf(wire.CodeMalformed, "checkpoint %d: %v", msg.Version, err)
			}
			msg = packed
		}
		return m.rsSubmit(ctx, &rsstore.Request{Ckpt: msg, From: from})
	})
	handle(m, wire.TypeRainstormRoutesRequest, m.handleRSRoutes)
	handle(m, wire.TypeRainstormReplicate, func(_ context.Context, from transport.Peer, msg *wire.RainstormReplicate) (wire.Message, error) {
		if !m.isPeer(from.NodeID) {
			return nil, wire.Errorf(wire.CodeRejected, "%s is not a manager of this datacenter", from.NodeID)
		}
		ack, err := m.rs.HandleReplicate(from.NodeID, msg)
		if err != nil {
			return nil, err
		}
		return ack, nil
	})
	handle(m, wire.TypeRainstormSyncRequest, func(ctx context.Context, from transport.Peer, msg *wire.RainstormSyncRequest) (wire.Message, error) {
		if !m.isPeer(from.NodeID) {
			return nil, wire.Errorf(wire.CodeRejected, "%s is not a manager of this datacenter", from.NodeID)
		}
		if msg.Term == 0 {
			// A learner's copy (rsstore.Store.CopyFrom): answered by the
			// leader only, once every commit begun before the sender was
			// a learner here is applied.
			if _, learner := m.group.Load().Learners[from.NodeID]; !learner {
				return nil, wire.Errorf(wire.CodeRejected, "%s is not a learner of this datacenter's managers", from.NodeID)
			}
			if err := m.learnerSyncGate(ctx, from); err != nil {
				return nil, err
			}
			if _, err := m.rsReady(); err != nil {
				// A leader still reading its peers' stores lacks what they
				// hold and it has not merged yet.
				return nil, err
			}
			return m.rs.HandleCopy(msg)
		}
		return m.rs.HandleSync(msg), nil
	})
}

// rsStaleReason says why a replicated group of term from sender must not
// be stored, or "": it comes from a deposed leader (an older term than
// this manager's), or in this manager's term from another than its leader.
// The store also refuses terms older than a sync it answered.
func (m *Manager) rsStaleReason(sender string, term uint64) string {
	st := m.elector.Status()
	switch {
	case term < st.Term:
		return fmt.Sprintf("stale term %d: this manager is in term %d", term, st.Term)
	case term == st.Term && st.Leader != "" && st.Leader != sender:
		return fmt.Sprintf("%s does not lead term %d; %s does", sender, term, st.Leader)
	}
	return ""
}

// rsReady reports whether this manager may answer tasks: it leads, and in
// this term it has read the checkpoints of a majority and synced state.
func (m *Manager) rsReady() (*leadership.Term, error) {
	lt := m.leading()
	if lt == nil {
		return nil, m.elector.NotLeaderError()
	}
	if !m.rs.Synced(lt.Number()) || !lt.Synced() {
		return nil, wire.Errorf(wire.CodeUnavailable, "leader is still reading the pipelines' state")
	}
	return lt, nil
}

// rsSubmit hands a task's request to this term's committer.
func (m *Manager) rsSubmit(ctx context.Context, r *rsstore.Request) (wire.Message, error) {
	if _, err := m.rsReady(); err != nil {
		return nil, err
	}
	resp, err := m.rs.Submit(ctx, r)
	if errors.Is(err, context.DeadlineExceeded) {
		// The committer did not get to it in time (a round that waited on
		// a slow majority): the task sends it again, as after any
		// unavailable answer; "internal" made a caller take it for a bug.
		return nil, &wire.Error{Code: wire.CodeUnavailable, RetryAfter: m.cfg.QuorumTimeout,
			Message: "the pipeline store did not commit this in time; send it again"}
	}
	return resp, err
}

// rsTaskInfo is what the leader's job table says of a task now.
type rsTaskInfo struct {
	found    bool
	attempts int
	records  int64
	offered  int64 // a paced source's records due (wire.WorkflowProgress.Offered)
	bad      int64
	token    uint64
	status   wire.WorkflowStatus
	worker   string
	waiting  string // why it is not placed (PENDING only)
}

// rsTasks returns, for a pipeline, its spec and each task's info in task
// order.
func (m *Manager) rsTasks(job, wf string) (*rainstorm.Spec, []wire.RainstormTask, []rsTaskInfo) {
	m.mu.Lock()
	defer m.mu.Unlock()
	j := m.jobs[job]
	if j == nil {
		return nil, nil, nil
	}
	var parts []*workflowState
	for _, w := range j.wfs {
		if w.rec.Spec.Name == wf && w.rec.Spec.Type == rainstorm.TypeName {
			parts = append(parts, w)
		}
	}
	if len(parts) == 0 {
		return nil, nil, nil
	}
	p, err := rainstorm.DecodeTaskParams(parts[0].rec.Spec.Params)
	if err != nil {
		return nil, nil, nil
	}
	order := rainstorm.TaskOrder(&p.Spec)
	infos := make([]rsTaskInfo, len(order))
	for i := range order {
		order[i].Job, order[i].Workflow = job, wf
		if i < len(parts) {
			r := &parts[i].rec
			infos[i] = rsTaskInfo{found: true, attempts: r.Attempts, token: r.FenceToken, status: r.Status, worker: r.Worker,
				records: r.LastProgress.CompletedCount, offered: r.LastProgress.Offered, bad: r.LastProgress.FailedCount}
			if r.Status == wire.WorkflowPending {
				infos[i].waiting = parts[i].waiting
			}
		}
	}
	return &p.Spec, order, infos
}

func (m *Manager) rsTaskInfo(t wire.RainstormTask) rsTaskInfo {
	_, order, infos := m.rsTasks(t.Job, t.Workflow)
	for i, o := range order {
		if o.Stage == t.Stage && o.Index == t.Index {
			return infos[i]
		}
	}
	return rsTaskInfo{}
}

func (m *Manager) rsRoutes(job, wf string) []wire.RainstormRoute {
	spec, order, infos := m.rsTasks(job, wf)
	return m.rsRoutesOf(spec, order, infos)
}

func (m *Manager) rsRoutesOf(spec *rainstorm.Spec, order []wire.RainstormTask, infos []rsTaskInfo) []wire.RainstormRoute {
	out := make([]wire.RainstormRoute, len(order))
	var epochs []wire.RainstormEpoch // of a resizable pipeline, read once
	for i, t := range order {
		out[i] = wire.RainstormRoute{Stage: t.Stage, Index: t.Index}
		in := infos[i]
		switch in.status {
		case wire.WorkflowCompleted:
			// A finished task still acknowledges resent batches for a
			// while: its upstream takes those acks from the node named.
			out[i].Done, out[i].Node = true, in.worker
			if spec != nil && spec.Resizable() {
				if epochs == nil {
					epochs, _, _ = rsEpochsOf(spec, m.rs.Head(wire.RainstormTask{Job: t.Job, Workflow: t.Workflow}))
				}
				rsDoneRoute(&out[i], m.rs.Head(t), epochs)
			}
		case wire.WorkflowAssigned, wire.WorkflowRunning:
			if wv, ok := m.workers.get(in.worker); ok {
				out[i].Addr, out[i].Incarnation, out[i].Node = wv.Addr, in.token, in.worker
			}
		}
	}
	return out
}

// handleRSRoutes answers a worker that runs a task of the pipeline with
// the routes its tasks need (rsVisibleRoutes); anyone else is refused.
func (m *Manager) handleRSRoutes(_ context.Context, from transport.Peer, msg *wire.RainstormRoutesRequest) (wire.Message, error) {
	if _, err := m.rsReady(); err != nil {
		return nil, err
	}
	routes, spec, ok := m.rsRoutesFor(from.NodeID, msg.Job, msg.Workflow)
	if !ok {
		m.unauthorized(wire.TypeRainstormRoutesRequest, from, msg.Job, msg.Workflow, "no task of the pipeline dispatched to the sender")
		return nil, wire.Errorf(wire.CodeRejected, "no task of pipeline %s is dispatched to %s", msg.Workflow, from.NodeID)
	}
	resp := &wire.RainstormRoutes{Routes: routes, Handovers: m.rsHandovers(from.NodeID, msg.Job, msg.Workflow, spec, msg.Handovers, rsHandoverBudget)}
	if lt := m.leading(); lt != nil && spec != nil && spec.Resizable() {
		resp.Resize = m.rsScale.want(rsPipeKey{msg.Job, msg.Workflow}, lt.Number())
	}
	return resp, nil
}

// rsRoutesFor is what node may know of a pipeline's routes, the
// pipeline's spec, and whether node runs any of its tasks.
func (m *Manager) rsRoutesFor(node, job, wf string) ([]wire.RainstormRoute, *rainstorm.Spec, bool) {
	spec, order, infos := m.rsTasks(job, wf)
	routes := m.rsRoutesOf(spec, order, infos)
	for _, in := range infos {
		if in.found && in.worker == node && in.running() {
			return rsVisibleRoutes(node, routes, infos), spec, true
		}
	}
	return nil, nil, false
}

// rsStaleRefused counts and logs a refused checkpoint of an incarnation
// older than the task's current one: a replaced task that went on running
// (a frozen worker that thawed). Its sender may also be counted as
// unauthorized when the task now runs elsewhere; both are true.
func (m *Manager) rsStaleRefused(c *wire.RainstormCheckpoint, in rsTaskInfo) {
	m.rsStale.Add(1)
	m.log.Info("rainstorm: checkpoint of a replaced incarnation refused", "job_id", c.Task.Job, "workflow", c.Task.Workflow,
		"stage", c.Task.Stage, "task", c.Task.Index, "incarnation", c.Incarnation, "current", in.token, "version", c.Version)
}

// current reports whether inc is the running incarnation of task.
func (in rsTaskInfo) current(inc uint64) bool {
	return in.found && in.token == inc && (in.status == wire.WorkflowAssigned || in.status == wire.WorkflowRunning)
}

// rsAdmit is the job table's check of a request in the committer's group:
// the task must be dispatched to the sender and running under the
// request's incarnation. nil admits it; the store then checks versions.
func (m *Manager) rsAdmit(r *rsstore.Request) *rsstore.Result {
	in := m.rsTaskInfo(r.Task())
	if o := r.Open; o != nil {
		if in.worker != r.From.NodeID {
			if in.running() { // else a late word from a replaced attempt: stale, not forged
				m.unauthorized(wire.TypeRainstormOpen, r.From, o.Task.Job, o.Task.Workflow, "task dispatched to another worker")
			}
			return &rsstore.Result{Err: rsNotDispatched(o.Task)}
		}
		if !in.current(o.Incarnation) {
			// The text names no token: it would let a sender
			// forge the current incarnation.
			return &rsstore.Result{Err: wire.Errorf(wire.CodeStaleFence, "task %d.%d of %s: incarnation %d is not its running dispatch (%s)",
				o.Task.Stage, o.Task.Index, o.Task.Workflow, o.Incarnation, in.status)}
		}
		return nil
	}
	c := r.Ckpt
	if in.worker != r.From.NodeID {
		if in.running() {
			m.unauthorized(wire.TypeRainstormCheckpoint, r.From, c.Task.Job, c.Task.Workflow, "task dispatched to another worker")
		}
		if c.Incarnation < in.token {
			m.rsStaleRefused(c, in)
		}
		return &rsstore.Result{Msg: rsstore.FencedAck(c, "task not dispatched to this sender")}
	}
	if !in.current(c.Incarnation) {
		m.rsStaleRefused(c, in)
		return &rsstore.Result{Msg: rsstore.FencedAck(c, fmt.Sprintf("incarnation %d is not the task's running dispatch", c.Incarnation))}
	}
	return nil
}

// rsRetryLost re-dispatches the pipeline tasks placed on a worker that
// SWIM declared dead, without the wait for its self-fencing that other
// workflows get (see workerLost).
func (m *Manager) rsRetryLost(worker, reason string) {
	if m.leading() == nil {
		return
	}
	m.update(func(tx *txn) {
		for _, w := range m.wfs {
			if w.rec.Worker == worker && w.rec.Spec.Type == rainstorm.TypeName &&
				(w.rec.Status == wire.WorkflowAssigned || w.rec.Status == wire.WorkflowRunning) {
				m.requeueLocked(tx, w, reason)
			}
		}
	})
}

// rsTaskFailedLocked handles a pipeline task whose run failed (a malformed
// record under on_bad_record: fail, an exec program that keeps crashing, a
// refused checkpoint): the failure is the pipeline's, the same on any
// worker, so the task is not retried and the job ends FAILED with the
// reason; the other tasks would wait for its output forever. A task that
// was replaced reports CANCELLED and takes the normal retry path. The job is
// ended like an abort_on_fail threshold does it: on a goroutine of the
// leader term, once this state is committed.
func (m *Manager) rsTaskFailedLocked(tx *txn, w *workflowState, status wire.WorkflowStatus, reason string) bool {
	lt := tx.leading
	if lt == nil || w.rec.Spec.Type != rainstorm.TypeName || status != wire.WorkflowFailed {
		return false
	}
	w.rec.Status = wire.WorkflowFailed
	w.rec.Error = reason
	w.rec.Worker = ""
	w.rec.Cores = nil
	tx.touchWorkflow(w, true)
	if w.job.rec.Status.Terminal() {
		return true
	}
	jobID := w.rec.JobID
	why := fmt.Sprintf("pipeline %s: task %d of %d failed: %s", w.rec.Spec.Name, w.rec.Spec.Shard, w.rec.Spec.Shards, reason)
	m.log.Warn("rainstorm task failed; ending the job", "job_id", jobID, "workflow_id", w.rec.WorkflowID, "reason", reason)
	tx.afterCommit(func() {
		lt.Go(func(ctx context.Context) {
			if _, err := m.cancelJob(ctx, jobID, wire.JobFailed, why); err != nil {
				m.log.Warn("end job after a task failure", "job_id", jobID, "err", err)
			}
		})
	})
	return true
}
