package manager

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"tempest/internal/blobstore"
	"tempest/rainstorm"
	"tempest/security"
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

// unauthorized counts and logs a request refused for its sender. job and
// workflow name what it asked about ("" when it named none).
func (m *Manager) unauthorized(t wire.MsgType, from transport.Peer, job, workflow, why string) {
	log, skipped := m.refused.Add(t, m.clock.Now())
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
	var firsts [][]byte // per spec: its pipeline's first task's params, nil for other work
	m.mu.Lock()
	for _, w := range m.wfs {
		if w.rec.Worker == node && (w.rec.Status == wire.WorkflowAssigned || w.rec.Status == wire.WorkflowRunning) {
			specs = append(specs, w.rec.Spec)
			var first []byte
			if isPipeline(w) {
				first = groupMembersLocked(w)[0].rec.Spec.Params
			}
			firsts = append(firsts, first)
		}
	}
	m.mu.Unlock()
	want := sum.String()
	for i, spec := range specs {
		if firsts[i] != nil {
			// A pipeline task's stored params may refer to its first
			// task's for the spec and blob (a split source's later
			// ranges read the same blob): judged whole, as dispatched.
			params, err := rainstorm.Resolve(firsts[i], spec.Params)
			if err != nil {
				continue
			}
			spec.Params = params
		}
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

// placementTranscript is what a PlacementProof signs: the attempt and the
// worker it was placed on, each length-prefixed so no two attempts share a
// transcript.
func placementTranscript(job, workflow, worker string, token uint64) []byte {
	b := make([]byte, 0, 64+len(job)+len(workflow)+len(worker))
	b = append(b, "tempest placement v1"...)
	for _, s := range [...]string{job, workflow, worker} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	return binary.BigEndian.AppendUint64(b, token)
}

// placementProof signs the placement of attempt token of (job, workflow) on
// worker with the manager-tier key, which no worker holds. Without a
// keyring (a manager built on injected collaborators) there is none, and
// no later leader will take a report of the attempt it did not record.
func (m *Manager) placementProof(job, workflow, worker string, token uint64) *wire.PlacementProof {
	if m.keyring == nil {
		return nil
	}
	id, mac, err := m.keyring.Prove(security.TierManager, placementTranscript(job, workflow, worker, token))
	if err != nil {
		m.log.Warn("cannot sign a placement: the keyring holds no manager key", "job_id", job, "workflow_id", workflow, "err", err)
		return nil
	}
	return &wire.PlacementProof{KeyID: id, MAC: mac}
}

// placedByAManager reports whether p's placement proof shows a manager
// placed its attempt on worker: the only evidence a leader takes for an
// attempt of an older term it has no record of. Rotation is covered by the
// keyring, which accepts the previous secret's key too.
func (m *Manager) placedByAManager(p *wire.WorkflowProgress, worker string) error {
	if p.Placement == nil {
		return errors.New("no placement proof")
	}
	if m.keyring == nil {
		return errors.New("no keyring to verify a placement proof with")
	}
	return m.keyring.VerifyProof(security.TierManager, p.Placement.KeyID,
		placementTranscript(p.JobID, p.WorkflowID, worker, p.FenceToken), p.Placement.MAC)
}
