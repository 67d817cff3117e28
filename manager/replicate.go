package manager

import (
	"context"
	"time"

	"tempest/internal/blobstore"
	"tempest/transport"
	"tempest/wire"
)

// Replication to peers.
//
// The contract (docs/datacenter.md) has peers persist every ProvisionCommit
// and answer a new leader's state sync with submissions, retry counts and
// commits. A commit alone cannot rebuild a job, so the leader also hands its
// peers the two other things a successor needs, each as an operation of its
// own (wire/replicate.go), accepted only from a configured peer manager:
//
//   - ReplicateJob: the submission itself, once the job id is assigned,
//     before any workflow is provisioned;
//   - ReplicateJobStatus: a job's status whenever a job's or a workflow's
//     status changes, with each workflow's status, worker and fence token,
//     and the final step statistics of ended workflows (so a successor
//     neither re-runs finished work nor loses its results).
//
// The submission must reach a majority before the client hears the job is
// accepted (intake.go); status updates are best effort (but for a
// workflow's end, which a worker waits for a majority to store), folded
// per job and sent in batches (status_batch.go): the workers remain the
// source of truth for what runs, and a successor's state sync reconciles
// whatever a peer missed.

// sendToPeers sends msg one way to every peer.
func (m *Manager) sendToPeers(ctx context.Context, msg wire.Message) {
	peers, release := m.group.Hold()
	defer release()
	ctx, cancel := context.WithTimeout(ctx, m.cfg.QuorumTimeout)
	defer cancel()
	for _, id := range peers.Targets() {
		if err := m.tr.Send(ctx, peers.Addr(id), msg); err != nil {
			m.log.Debug("send to peer failed", "peer", id, "type", msg.Type(), "err", err)
		}
	}
}

// handleJobSubmission serves JobSubmission: a new job from a gate or a
// client (leader only). The gate holding the lease is the submission's
// authenticated sender, whatever the body names; a submission without a
// fence token is a client's and has no lease holder.
func (m *Manager) handleJobSubmission(ctx context.Context, from transport.Peer, sub *wire.JobSubmission) (wire.Message, error) {
	s := *sub
	s.Origin = ""
	if s.FenceToken != 0 {
		s.Origin = from.NodeID
	}
	// Blobs it names that no manager holds yet come from the gate.
	return m.submit(blobstore.WithSources(ctx, from.Addr), &s, m.elector.NotLeaderError)
}

// handleReplicateJob stores a job a peer manager's leader accepted.
func (m *Manager) handleReplicateJob(_ context.Context, from transport.Peer, op *wire.ReplicateJob) (wire.Message, error) {
	if !m.isPeer(from.NodeID) {
		return nil, wire.Errorf(wire.CodeRejected, "replicated jobs are only accepted from peer managers")
	}
	sub := &op.Job
	if sub.JobID == "" {
		return nil, wire.Errorf(wire.CodeRejected, "replicated submission without a job id")
	}
	if err := m.validateSubmission(sub); err != nil {
		return nil, wire.Errorf(wire.CodeRejected, "invalid replicated job %s: %v", sub.JobID, err)
	}
	if err := m.update(func(tx *txn) { m.adoptSubmissionLocked(tx, sub) }); err != nil {
		return nil, wire.Errorf(wire.CodeUnavailable, "persist replicated job %s: %v", sub.JobID, err)
	}
	m.fetchMissingBlobs(sub)
	return &wire.JobAck{JobID: sub.JobID, Accepted: true, Datacenters: []string{m.cfg.Datacenter}}, nil
}

// adoptSubmissionLocked creates a job another manager accepted, unless it is
// already known, and applies any commits that arrived before it.
func (m *Manager) adoptSubmissionLocked(tx *txn, sub *wire.JobSubmission) *jobState {
	if j, ok := m.jobs[sub.JobID]; ok {
		return j
	}
	created := m.clock.Now()
	if sub.SubmittedAt != 0 {
		created = time.Unix(0, sub.SubmittedAt)
	}
	j := m.newJobLocked(*sub, created)
	m.armTimeoutLocked(j)
	tx.touchJob(j, true)
	for _, w := range j.wfs {
		tx.touchWorkflow(w, true)
		if o, ok := m.orphanCommits[w.rec.WorkflowID]; ok && o.c.JobID == sub.JobID {
			delete(m.orphanCommits, w.rec.WorkflowID)
			m.applyCommitLocked(tx, &o.c)
		}
	}
	return j
}

// handleReplicateJobStatus applies a status update replicated by the
// leader.
func (m *Manager) handleReplicateJobStatus(_ context.Context, from transport.Peer, op *wire.ReplicateJobStatus) (wire.Message, error) {
	if !m.isPeer(from.NodeID) {
		return nil, wire.Errorf(wire.CodeRejected, "job status is only accepted from peer managers")
	}
	jp := &op.Status
	if m.leading() != nil {
		// A deposed leader still replicating: this manager's own view,
		// built from the workers, is newer. Refused, so that a sender
		// counting stores does not count this one.
		return nil, wire.Errorf(wire.CodeRejected, "%s leads; status from %s not stored", m.cfg.ID, from.NodeID)
	}
	known := false
	err := m.update(func(tx *txn) {
		_, known = m.jobs[jp.JobID]
		m.mergeJobLocked(tx, jp)
	})
	switch {
	case !known:
		// Not stored, so not counted: this manager missed the submission
		// and learns the job from a successor's state sync.
		return nil, wire.Errorf(wire.CodeNotFound, "job %s not known to %s", jp.JobID, m.cfg.ID)
	case err != nil:
		return nil, wire.Errorf(wire.CodeUnavailable, "persist status of job %s: %v", jp.JobID, err)
	}
	return &wire.ProgressAck{Leader: m.cfg.ID}, nil
}

// mergeJobLocked folds another manager's view of a job into ours. Merging is
// monotonic, so views may arrive in any order and more than once: an ended
// workflow or job stays ended, and a placement under a higher fence token
// replaces one under a lower.
func (m *Manager) mergeJobLocked(tx *txn, jp *wire.JobProgress) {
	j, ok := m.jobs[jp.JobID]
	if !ok {
		return
	}
	for i := range jp.Workflows {
		if w, ok := m.wfs[jp.Workflows[i].WorkflowID]; ok && w.job == j {
			m.mergeWorkflowLocked(tx, w, &jp.Workflows[i])
		}
	}
	if adoptLeaseLocked(j, jp.FenceToken, jp.LeaseHolder) {
		tx.touchJob(j, true)
	}
	if jp.Status.Terminal() {
		j.endLearned = true
		if !j.rec.Status.Terminal() {
			j.rec.Status = jp.Status
			j.rec.Error = jp.Error
			tx.touchJob(j, true)
		}
	}
}

func (m *Manager) mergeWorkflowLocked(tx *txn, w *workflowState, p *wire.WorkflowProgress) {
	if w.rec.Status.Terminal() || p.FenceToken < w.rec.FenceToken {
		return
	}
	before := w.rec
	if p.FenceToken > w.rec.FenceToken {
		// Every attempt has its own token, so a newer token is one more
		// attempt, whichever of commit and status update arrives first.
		w.rec.FenceToken = p.FenceToken
		w.rec.Worker = p.WorkerID
		w.rec.Attempts++
	}
	if p.Attempts > 0 {
		w.rec.Attempts = p.Attempts // the leader's count, refused dispatches taken back
	}
	if p.Requeues > w.rec.Requeues {
		w.rec.Requeues = p.Requeues
	}
	if len(p.Lost) > 0 && !sameLost(p.Lost, w.rec.Lost) {
		// The leader kept a lost attempt's counts: a successor folds them
		// into the retry's reports as the leader does.
		w.rec.Lost, w.rec.AttemptProgress = p.Lost, nil
		foldLost(&w.rec)
		tx.touchWorkflow(w, true)
	}
	switch {
	case p.Status.Terminal():
		w.rec.Status = p.Status
		keepProgress(&w.rec, p, true)
		w.rec.Error = p.Error
	case p.Status == wire.WorkflowPending:
		// The leader took it back for a retry.
		if w.rec.Status == wire.WorkflowAssigned || w.rec.Status == wire.WorkflowRunning {
			w.rec.Status = wire.WorkflowPending
			w.rec.Worker = ""
		}
	case p.Status == wire.WorkflowAssigned || p.Status == wire.WorkflowRunning:
		// Over PENDING only for an attempt this word made newer: PENDING
		// under the attempt's own token is that attempt taken back (its
		// worker lost or stopped it), which a peer's RUNNING predates. A
		// new leader merging such a snapshot in its sync left the task
		// RUNNING with no worker, never placed again.
		if w.rec.Status == wire.WorkflowAssigned || (w.rec.Status == wire.WorkflowPending && w.rec.FenceToken != before.FenceToken) {
			w.rec.Status = p.Status
		}
		if len(p.AssignedCores) > 0 {
			w.rec.Cores = p.AssignedCores
		}
	}
	switch {
	case w.rec.FenceToken != before.FenceToken || w.rec.Worker != before.Worker || w.rec.Attempts != before.Attempts:
		tx.touchWorkflow(w, true)
	case w.rec.Status == wire.WorkflowRunning && before.Status != wire.WorkflowRunning:
		// Started, under the placement already stored: what a restart
		// would relearn from the workers, so it costs no commit.
		tx.touchWorkflowLazily(w)
	case w.rec.Status != before.Status:
		tx.touchWorkflow(w, true)
	}
}
