package manager

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"tempest/internal/blobstore"
	"tempest/transport"
	"tempest/wire"
)

// Authorization by sender. The transport proves who sent a message (the
// connection's hello) and refuses types the sender's key tier never sends
// (wire.MaySend), but every worker holds the same worker key: a stolen one
// says hello under any node id. So what a worker asks about a pipeline task
// or a blob is served only when the job table says the work is dispatched
// to that very node, and a refusal says no more than that: never a fence
// token the sender could replay.

// refusalCounter counts requests refused for their sender, by message
// type, for /metrics (tempest_manager_unauthorized_total), and paces the
// log lines: at most one per type per refusalLogEvery, naming how many
// went unlogged since, so a flood of forged requests costs no log volume.
type refusalCounter struct {
	mu       sync.Mutex
	n        map[wire.MsgType]uint64
	loggedAt map[wire.MsgType]time.Time
	unlogged map[wire.MsgType]uint64
}

const refusalLogEvery = time.Second

// add counts one refusal of type t at now and reports whether to log it,
// and how many refusals of t were not logged before it.
func (c *refusalCounter) add(t wire.MsgType, now time.Time) (log bool, skipped uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n, c.loggedAt, c.unlogged = map[wire.MsgType]uint64{}, map[wire.MsgType]time.Time{}, map[wire.MsgType]uint64{}
	}
	c.n[t]++
	if at, ok := c.loggedAt[t]; ok && now.Sub(at) < refusalLogEvery {
		c.unlogged[t]++
		return false, 0
	}
	c.loggedAt[t] = now
	skipped = c.unlogged[t]
	c.unlogged[t] = 0
	return true, skipped
}

func (c *refusalCounter) snapshot() map[wire.MsgType]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[wire.MsgType]uint64, len(c.n))
	for t, n := range c.n {
		out[t] = n
	}
	return out
}

// unauthorized counts and logs a request refused for its sender. job and
// workflow name what it asked about ("" when it named none).
func (m *Manager) unauthorized(t wire.MsgType, from transport.Peer, job, workflow, why string) {
	log, skipped := m.refused.add(t, m.clock.Now())
	if !log {
		return
	}
	m.log.Warn("request refused for its sender", "type", t.String(), "sender", from.NodeID, "remote", from.Addr,
		"job_id", job, "workflow", workflow, "reason", why, "unlogged_before", skipped)
}

// rsSenderInPipeline reports whether node runs (is dispatched) any task of
// the job's pipeline wf. It is the handlers' check before a request is
// queued for the committer, so a stranger's request, however large, is
// dropped at once; it decodes nothing. The committer then checks the exact
// task against the same table (rsCommit).
func (m *Manager) rsSenderInPipeline(node, job, wf string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	j := m.jobs[job]
	if j == nil {
		return false
	}
	for _, w := range j.wfs {
		if w.rec.Spec.Name == wf && w.rec.Worker == node &&
			(w.rec.Status == wire.WorkflowAssigned || w.rec.Status == wire.WorkflowRunning) {
			return true
		}
	}
	return false
}

// running reports whether the task is dispatched to a worker now.
func (in rsTaskInfo) running() bool {
	return in.status == wire.WorkflowAssigned || in.status == wire.WorkflowRunning
}

// rsNotDispatched is the answer to a task request from a node the task is
// not dispatched to. CodeStaleFence: a worker whose task was re-placed
// elsewhere is told to stop, as a stale incarnation is; the text names
// neither the current worker nor its token.
func rsNotDispatched(t wire.RainstormTask) error {
	return wire.Errorf(wire.CodeStaleFence, "task %d.%d of %s is not dispatched to this sender", t.Stage, t.Index, t.Workflow)
}

// rsVisibleRoutes keeps of a pipeline's routes what the tasks node runs
// need: their own routes, their downstream tasks' whole routes (where to
// send batches, and the incarnation that tells a replacement), and their
// upstream tasks' addresses only (where acknowledgements go). Other tasks'
// fence tokens stay with the leader. routes and infos are in task order.
func rsVisibleRoutes(node string, routes []wire.RainstormRoute, infos []rsTaskInfo) []wire.RainstormRoute {
	own := map[int]bool{}
	for i, in := range infos {
		if in.found && in.worker == node && in.running() && i < len(routes) {
			own[routes[i].Stage] = true
		}
	}
	ownTask := func(i int) bool {
		return i < len(infos) && infos[i].found && infos[i].worker == node && infos[i].running()
	}
	var out []wire.RainstormRoute
	for i, r := range routes {
		switch {
		case ownTask(i), own[r.Stage-1]:
			out = append(out, r)
		case own[r.Stage+1]:
			r.Incarnation = 0
			out = append(out, r)
		}
	}
	return out
}

// blobDispatchedTo reports whether sum is named by a workflow dispatched
// (assigned or running) to node: the only blobs a worker has reason to
// read. Only that worker's workflows are decoded, a handful; the walk over
// the table is a string comparison per workflow.
func (m *Manager) blobDispatchedTo(node string, sum blobstore.Sum) bool {
	var specs []wire.WorkflowSpec
	m.mu.Lock()
	for _, w := range m.wfs {
		if w.rec.Worker == node && (w.rec.Status == wire.WorkflowAssigned || w.rec.Status == wire.WorkflowRunning) {
			specs = append(specs, w.rec.Spec)
		}
	}
	m.mu.Unlock()
	want := sum.String()
	for _, spec := range specs {
		if sums, err := m.reg.SpecBlobs(spec); err == nil && slices.Contains(sums, want) {
			return true
		}
	}
	return false
}

// guardBlobGet serves BlobChunkGet to the configured peer managers (they
// replicate and repair blobs from each other) and to a worker only for a
// blob of work dispatched to it; anyone else is refused and counted.
func (m *Manager) guardBlobGet(h func(context.Context, transport.Peer, *wire.BlobChunkGet) (wire.Message, error)) func(context.Context, transport.Peer, *wire.BlobChunkGet) (wire.Message, error) {
	return func(ctx context.Context, from transport.Peer, msg *wire.BlobChunkGet) (wire.Message, error) {
		if m.isPeer(from.NodeID) {
			return h(ctx, from, msg)
		}
		sum, err := blobstore.SumFromBytes(msg.Sum)
		if err != nil {
			return nil, wire.Errorf(wire.CodeMalformed, "%v", err)
		}
		if !m.blobDispatchedTo(from.NodeID, sum) {
			m.unauthorized(wire.TypeBlobChunkGet, from, "", "", fmt.Sprintf("blob %s is not named by work dispatched to the sender", sum))
			return nil, wire.Errorf(wire.CodeRejected, "blob %s is not named by work dispatched to %s", sum, from.NodeID)
		}
		return h(ctx, from, msg)
	}
}
