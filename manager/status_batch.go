package manager

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"tempest/internal/rounds"
	"tempest/transport"
	"tempest/wire"
)

// Batched status replication.
//
// Every change of a job's or a workflow's status is replicated to the
// peers (replicate.go). Sent one by one, a job of fifty workflows costs
// each peer a message and a store commit per placement, per start and per
// end. Instead:
//
//   - the one-way updates wait in a queue that holds one status per job: a
//     change made while an earlier one of the same job still waits is
//     folded into it, and one sender drains the queue a batch at a time
//     (ReplicateJobStatusBatch, one store commit on each peer);
//   - the ends a worker waits on (endOnMajority: its final report is
//     acknowledged only once a majority stored the end) share rounds the
//     way placements do (provision_batch.go): at once while fewer than
//     roundsInFlight are in flight, together behind them otherwise, each
//     end still answered only once a majority stored its own job's status.
//
// Peers merge statuses monotonically (mergeJobLocked: an ended workflow
// stays ended, a newer fence token wins), so a folded status tells them
// what the statuses folded into it would have, in any order.

// statusBatchBudget is the encoded size one status batch aims at, far
// below wire.MaxMessageSize: an ended workflow carries its histograms.
// A status over it travels alone.
const statusBatchBudget = 2 << 20

// batching is the manager's grouped rounds to its peers.
type batching struct {
	provision *rounds.Group[wire.ProvisionRequest, quorumAnswer]
	commit    *rounds.Group[wire.ProvisionCommit, struct{}]
	ends      *rounds.Group[wire.JobProgress, error]
	// dispatch groups dispatches by worker address (worker_batch.go).
	dispatch *rounds.Keyed[string, *wire.WorkflowDispatch, wire.Reply]
	status   statusQueue
}

func (m *Manager) newBatching() *batching {
	return &batching{
		provision: rounds.New(roundsInFlight, maxRoundBatch, m.provisionRound),
		commit:    rounds.New(roundsInFlight, maxRoundBatch, m.commitRound),
		ends:      rounds.New(roundsInFlight, maxRoundBatch, m.endsRound),
		dispatch:  rounds.NewKeyed(roundsInFlight, maxWorkerBatch, m.dispatchRound),
		status:    statusQueue{pending: make(map[string]*wire.JobProgress)},
	}
}

// statusQueue holds job statuses waiting to be sent to the peers, one
// entry per job.
type statusQueue struct {
	mu      sync.Mutex
	pending map[string]*wire.JobProgress
	order   []string // job ids, oldest first
	sending bool     // a sender drains the queue
}

// add queues jp, folded into the job's waiting status if there is one, and
// reports whether the caller must start a sender.
func (q *statusQueue) add(jp wire.JobProgress) (start bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if old, ok := q.pending[jp.JobID]; ok {
		foldProgress(old, &jp)
	} else {
		q.pending[jp.JobID] = &jp
		q.order = append(q.order, jp.JobID)
	}
	start = !q.sending
	q.sending = true
	return start
}

// take removes and returns every waiting status, oldest first; none means
// the sender stops (and the next add starts one).
func (q *statusQueue) take() []wire.JobProgress {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]wire.JobProgress, 0, len(q.order))
	for _, id := range q.order {
		out = append(out, *q.pending[id])
		delete(q.pending, id)
	}
	q.order = q.order[:0]
	if len(out) == 0 {
		q.sending = false
	}
	return out
}

// drop forgets every waiting status and the sender with them.
func (q *statusQueue) drop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	clear(q.pending)
	q.order, q.sending = nil, false
}

// foldProgress folds b, another status of old's job, into old, so that old
// tells a peer what both would: the job's fields of the later one (by
// Timestamp; an ended job stays ended, the newest lease token stays), and
// for each workflow the entry a peer's merge would keep (mergeWorkflowLocked):
// an ended one over a live one, a newer fence token over an older, else
// the later status's.
func foldProgress(old, b *wire.JobProgress) {
	newer, older := b, old
	if old.Timestamp > b.Timestamp {
		newer, older = old, b
	}
	out := *newer
	if older.Status.Terminal() && !out.Status.Terminal() {
		out.Status, out.Error = older.Status, older.Error
	}
	if older.FenceToken > out.FenceToken {
		out.FenceToken, out.LeaseHolder = older.FenceToken, older.LeaseHolder
	}
	out.Workflows = nil
	if len(older.Workflows)+len(newer.Workflows) > 0 {
		index := make(map[string]int, len(older.Workflows)+len(newer.Workflows))
		out.Workflows = make([]wire.WorkflowProgress, 0, len(older.Workflows)+len(newer.Workflows))
		for _, src := range [2][]wire.WorkflowProgress{older.Workflows, newer.Workflows} {
			for _, w := range src {
				i, seen := index[w.WorkflowID]
				if !seen {
					index[w.WorkflowID] = len(out.Workflows)
					out.Workflows = append(out.Workflows, w)
					continue
				}
				if supersedes(&w, &out.Workflows[i]) {
					out.Workflows[i] = w
				}
			}
		}
		fitJobSeries(&out)
	}
	*old = out
}

// supersedes reports whether a, seen after b, is the entry of their
// workflow a peer's merge would end with.
func supersedes(a, b *wire.WorkflowProgress) bool {
	switch {
	case a.FenceToken != b.FenceToken:
		return a.FenceToken > b.FenceToken
	case b.Status.Terminal():
		return false
	}
	return true
}

// replicateStatus queues a job's status for every peer, one way.
func (m *Manager) replicateStatus(jp wire.JobProgress) {
	if p := m.group.Load(); len(p.VoterIDs)+len(p.LearnerIDs) == 0 {
		return
	}
	if !m.batch.status.add(jp) {
		return // the running sender takes it
	}
	// Not tied to a term's WaitGroup: this may run on a handler goroutine
	// while the term is being torn down, and the sends are short anyway.
	if !m.spawn(m.sendStatuses) {
		m.batch.status.drop() // shutting down: nobody would send them
	}
}

// sendStatuses drains the status queue to the peers, a batch at a time, to
// all peers at once: a peer that is down delays the others by no more than
// the batch in flight (each send is bounded by the quorum timeout).
func (m *Manager) sendStatuses(ctx context.Context) {
	for {
		batch := m.batch.status.take()
		if len(batch) == 0 {
			return
		}
		peers, release := m.group.Hold()
		sctx, cancel := context.WithTimeout(ctx, m.cfg.QuorumTimeout)
		var wg sync.WaitGroup
		for _, chunk := range statusChunks(batch) {
			msg := statusMessage(chunk)
			for _, id := range peers.Targets() {
				wg.Go(func() {
					if err := m.tr.Send(sctx, peers.Addr(id), msg); err != nil {
						m.log.Debug("send to peer failed", "peer", id, "type", msg.Type(), "jobs", len(chunk), "err", err)
					}
				})
			}
		}
		wg.Wait()
		cancel()
		release()
	}
}

// statusMessage is the message that carries jps: a lone status as a
// ReplicateJobStatus, several as a ReplicateJobStatusBatch.
func statusMessage(jps []wire.JobProgress) wire.Message {
	if len(jps) == 1 {
		return &wire.ReplicateJobStatus{Status: jps[0]}
	}
	return &wire.ReplicateJobStatusBatch{Statuses: jps}
}

// statusChunks splits jps into runs whose estimated encoded size
// (statusSize) stays within statusBatchBudget (a status over it alone in
// its run) and whose length stays within maxRoundBatch.
func statusChunks(jps []wire.JobProgress) [][]wire.JobProgress {
	var out [][]wire.JobProgress
	start, size := 0, 0
	for i := range jps {
		n := statusSize(&jps[i])
		if i > start && (size+n > statusBatchBudget || i-start >= maxRoundBatch) {
			out = append(out, jps[start:i])
			start, size = i, 0
		}
		size += n
	}
	if start < len(jps) {
		out = append(out, jps[start:])
	}
	return out
}

// statusSize is an upper estimate of jp's encoded size, from the lengths
// of what it carries rather than by encoding it: an ended workflow's
// histograms are most of it, and the status is encoded once more to be
// sent. The fixed allowances cover a field's key and its number or short
// string (TestStatusSizeBoundsTheEncoding).
func statusSize(jp *wire.JobProgress) int {
	n := 256 + len(jp.JobID) + len(jp.Datacenter) + len(jp.Error) + len(jp.LeaseHolder)
	for i := range jp.Workflows {
		w := &jp.Workflows[i]
		n += 256 + len(w.JobID) + len(w.WorkflowID) + len(w.WorkflowName) + len(w.WorkerID) + len(w.Error) +
			len(w.Waiting) + 80*len(w.Series) + 16*len(w.AssignedCores)
		for j := range w.StepStats {
			st := &w.StepStats[j]
			n += 128 + len(st.StepName) + len(st.Histogram) + len(st.CorrectedHistogram) +
				32*len(st.Statuses)
			for class := range st.Errors {
				n += 24 + len(class)
			}
		}
	}
	return n
}

// endOnMajority stores the ended workflow's record (and its job's status)
// on a majority of managers, this one included, if the workflow has ended
// here. Other outcomes (a retry, a superseded attempt) need not wait: the
// work is not over, and a successor re-runs or fences it either way. A
// workflow this leader does not know is acknowledged only once its state
// sync is done. The store shares a round with the other ends arriving
// meanwhile.
func (m *Manager) endOnMajority(ctx context.Context, jobID, workflowID string) error {
	m.mu.Lock()
	w, ok := m.wfs[workflowID]
	switch {
	case !ok || w.rec.JobID != jobID:
		m.mu.Unlock()
		// A job this leader does not know. Once its state sync has read a
		// majority, no acknowledged job is missing from it, so the worker
		// may forget the report; before, the job may be about to arrive in
		// a peer's snapshot, and a final acknowledged now is a run the
		// sync then finds "not running" and runs again (the chaos checker
		// saw a load run twice).
		if lt := m.leading(); lt == nil || !lt.Synced() {
			return errors.New("this leader has not finished its state sync; the job is not known here yet")
		}
		return nil
	case !w.rec.Status.Terminal() || len(m.group.Load().VoterIDs) == 0:
		m.mu.Unlock()
		return nil
	}
	jp := m.jobProgressLocked(w.job, false)
	jp.Workflows = []wire.WorkflowProgress{replicaProgress(&w.rec)}
	m.mu.Unlock()
	return m.statusOnMajority(ctx, jp)
}

// statusOnMajority stores a job's status on the peers and returns nil once
// a majority of managers (this one included) stored it, sharing a round
// with the other such stores under way (endsRound).
func (m *Manager) statusOnMajority(ctx context.Context, jp wire.JobProgress) error {
	if len(m.group.Load().VoterIDs) == 0 {
		return nil
	}
	if err := m.batch.ends.Do(ctx, jp); err != nil {
		return err
	}
	if jp.Status.Terminal() {
		m.finalized(jp.JobID)
	}
	return nil
}

// endsRound stores jps on the peers and returns, for each, nil once a
// majority of managers (this one included) stored its job's status, or
// why not. Statuses of one job are folded into one; the round sends a
// batch (or a few, within statusBatchBudget) to every peer at once and
// returns as soon as every job has its majority or every peer answered.
func (m *Manager) endsRound(ctx context.Context, jps []wire.JobProgress) []error {
	out := make([]error, len(jps))
	peers, release := m.group.Hold()
	defer release()
	if len(peers.VoterIDs) == 0 {
		return out
	}
	targets := peers.Targets()
	// One status per job, in order of first appearance.
	var jobsIn []wire.JobProgress
	slot := make(map[string]int, len(jps))
	of := make([]int, len(jps))
	for i := range jps {
		k, seen := slot[jps[i].JobID]
		if !seen {
			k = len(jobsIn)
			slot[jps[i].JobID] = k
			jobsIn = append(jobsIn, jps[i])
		} else {
			foldProgress(&jobsIn[k], &jps[i])
		}
		of[i] = k
	}
	chunks := statusChunks(jobsIn)

	ctx, cancel := context.WithTimeout(ctx, m.cfg.QuorumTimeout)
	defer cancel()
	type answer struct {
		peer    string
		first   int // index in jobsIn of the chunk's first job
		n       int
		unknown map[string]bool
		err     error
	}
	results := make(chan answer, len(targets)*len(chunks))
	var wg sync.WaitGroup
	first := 0
	for _, chunk := range chunks {
		msg, at := statusMessage(chunk), first
		for _, id := range targets {
			wg.Go(func() {
				a := answer{peer: id, first: at, n: len(chunk)}
				resp, err := m.tr.Call(ctx, peers.Addr(id), msg)
				switch r := resp.(type) {
				case nil:
					a.err = err
					if err == nil {
						a.err = errors.New("no answer")
					}
				case *wire.ProgressAck:
				case *wire.StatusBatchAck:
					a.unknown = make(map[string]bool, len(r.Unknown))
					for _, j := range r.Unknown {
						a.unknown[j] = true
					}
				default:
					a.err = fmt.Errorf("unexpected %T", resp)
				}
				results <- a
			})
		}
		first += len(chunk)
	}
	defer wg.Wait() // after cancel (deferred later, runs first): stragglers end at once
	defer cancel()

	stored := make([]int, len(jobsIn))
	errs := make([][]error, len(jobsIn))
	for k := range stored {
		stored[k] = 1
	}
	short := len(jobsIn) // jobs still short of a majority
	if peers.Quorum <= 1 {
		short = 0
	}
	for range len(targets) * len(chunks) {
		if short == 0 {
			break
		}
		a := <-results
		if _, voter := peers.Voters[a.peer]; !voter {
			continue // a learner's store never counts
		}
		for k := a.first; k < a.first+a.n; k++ {
			switch {
			case a.err != nil:
				errs[k] = append(errs[k], fmt.Errorf("%s: %w", a.peer, a.err))
			case a.unknown[jobsIn[k].JobID]:
				errs[k] = append(errs[k], fmt.Errorf("%s: job %s not known there", a.peer, jobsIn[k].JobID))
			default:
				stored[k]++
				if stored[k] == peers.Quorum {
					short--
				}
			}
		}
	}
	for i, k := range of {
		if stored[k] < peers.Quorum {
			out[i] = fmt.Errorf("%d of %d managers stored it: %w", stored[k], 1+len(peers.VoterIDs), errors.Join(errs[k]...))
		}
	}
	return out
}

// handleReplicateJobStatusBatch applies several status updates replicated
// by the leader in one store commit. Jobs this manager does not know are
// named in the answer and not stored: it missed their submissions and
// learns them from a successor's state sync.
func (m *Manager) handleReplicateJobStatusBatch(_ context.Context, from transport.Peer, op *wire.ReplicateJobStatusBatch) (wire.Message, error) {
	if !m.isPeer(from.NodeID) {
		return nil, wire.Errorf(wire.CodeRejected, "job status is only accepted from peer managers")
	}
	if len(op.Statuses) > maxRoundBatch {
		return nil, wire.Errorf(wire.CodeRejected, "%d statuses in one batch, at most %d", len(op.Statuses), maxRoundBatch)
	}
	if m.leading() != nil {
		// As for a lone status (handleReplicateJobStatus): a deposed
		// leader's view is older than this leader's own.
		return nil, wire.Errorf(wire.CodeRejected, "%s leads; status from %s not stored", m.cfg.ID, from.NodeID)
	}
	ack := &wire.StatusBatchAck{NodeID: m.cfg.ID}
	err := m.update(func(tx *txn) {
		for i := range op.Statuses {
			if _, known := m.jobs[op.Statuses[i].JobID]; !known {
				ack.Unknown = append(ack.Unknown, op.Statuses[i].JobID)
				continue
			}
			m.mergeJobLocked(tx, &op.Statuses[i])
		}
	})
	if err != nil {
		return nil, wire.Errorf(wire.CodeUnavailable, "persist status of %d jobs: %v", len(op.Statuses), err)
	}
	return ack, nil
}
