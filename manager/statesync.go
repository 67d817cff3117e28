package manager

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"tempest/internal/lifecycle"
	"tempest/leadership"
	"tempest/rainstorm"
	"tempest/transport"
	"tempest/wire"
)

// maxSnapshotEndedJobs bounds the ended jobs a peer reports in state sync,
// most recent first, so a snapshot stays far below the message size limit;
// a successor needs ended jobs only to learn outcomes it missed, which
// happen around the leader change.
const maxSnapshotEndedJobs = 64

// syncOutcome is what state sync learnt about where work runs.
type syncOutcome struct {
	mu sync.Mutex
	// answered: workers that sent a snapshot.
	answered map[string]bool
	// running: workflow id -> worker that reports running it.
	running map[string]string
	// unknown: what workers run that no job here knew of when their
	// snapshot arrived; a peer's snapshot arriving later may explain it.
	unknown []*wire.WorkerStateSnapshot
}

// syncState runs when this manager becomes leader, before it places
// anything (docs/datacenter.md): every peer is asked for its
// ManagerStateSnapshot (job metadata, commits, retries, the workers it knows)
// and every known worker for its WorkerStateSnapshot (the truth about what
// runs), each with retries and exponential backoff. Workers learnt from peers
// are asked in a second round. Snapshots are merged as they arrive; resume
// then acts on the result. The whole sync is bounded by StateSyncTimeout.
func (m *Manager) syncState(ctx context.Context, lt *leadership.Term) *syncOutcome {
	start := m.clock.Now()
	termCtx := ctx
	ctx, cancel := context.WithTimeout(ctx, m.cfg.StateSyncTimeout)
	defer cancel()
	out := &syncOutcome{answered: make(map[string]bool), running: make(map[string]string)}
	req := &wire.StateSyncRequest{RequesterID: m.cfg.ID, RequesterRole: wire.RoleManager, Term: lt.Number()}

	asked := make(map[string]bool)
	askWorkers := func(wg *sync.WaitGroup) {
		for _, wv := range m.workers.list() {
			if asked[wv.ID] || wv.Addr == "" {
				continue
			}
			asked[wv.ID] = true
			wg.Go(func() { m.syncWorker(ctx, wv, req, out) })
		}
	}
	var wg sync.WaitGroup
	var snaps []*wire.ManagerStateSnapshot
	wg.Go(func() { snaps = m.readMajority(termCtx, req) })
	askWorkers(&wg)
	wg.Wait()
	m.applyPeerSnapshots(lt, snaps)
	var wg2 sync.WaitGroup
	askWorkers(&wg2) // workers only the peers knew of
	wg2.Wait()
	// Worker and peer snapshots were merged in whatever order they came;
	// work a worker reported before a peer told us its job is adopted now,
	// and work of a job no manager of a majority holds is stopped.
	for _, ws := range out.unknown {
		m.cancelOnWorkers(ctx, m.adoptRunning(ws, out, true), "superseded after a leader change")
	}

	m.log.Info("state sync done", "term", lt.Number(), "workers_answered", len(out.answered),
		"workers_asked", len(asked), "workflows_running", len(out.running), "took", m.clock.Now().Sub(start))
	return out
}

// readMajority collects peers' snapshots until, with this manager, a
// majority of the configured managers has been read: only then is every job
// a previous leader acknowledged (stored on a majority) certainly among
// them. Peers that fail are asked again, in rounds, for as long as the term
// lasts; a leader that cannot read a majority never serves, and loses its
// term to check-quorum.
func (m *Manager) readMajority(ctx context.Context, req *wire.StateSyncRequest) []*wire.ManagerStateSnapshot {
	var mu sync.Mutex
	got := make(map[string]*wire.ManagerStateSnapshot)
	// One peer set for the whole read: a majority of one configuration.
	// Learners are not read; they hold nothing a majority lacks.
	peers := m.group.Load()
	for round := 0; ; round++ {
		var wg sync.WaitGroup
		for _, id := range peers.VoterIDs {
			mu.Lock()
			done := got[id] != nil
			mu.Unlock()
			if done {
				continue
			}
			wg.Go(func() {
				if ms := m.syncPeer(ctx, id, peers.Voters[id], req); ms != nil {
					mu.Lock()
					got[id] = ms
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if 1+len(got) >= peers.Quorum || ctx.Err() != nil {
			break
		}
		m.log.Warn("state sync: no majority of managers read yet; asking again", "read", 1+len(got), "quorum", peers.Quorum, "round", round)
		d := m.cfg.StateSyncBackoff << min(round, 6)
		if !lifecycle.Sleep(ctx, d/2+rand.N(d/2+1)) {
			break
		}
	}
	out := make([]*wire.ManagerStateSnapshot, 0, len(got))
	for _, id := range peers.VoterIDs {
		if ms := got[id]; ms != nil {
			out = append(out, ms)
		}
	}
	return out
}

// syncPeer fetches one peer's snapshot and learns the workers it knows.
func (m *Manager) syncPeer(ctx context.Context, id, addr string, req *wire.StateSyncRequest) *wire.ManagerStateSnapshot {
	// A peer SWIM has declared dead (typically the leader that just
	// crashed) is not worth the retries.
	gone := func() bool {
		_, alive, known := m.managers.get(id)
		return known && !alive
	}
	var ms *wire.ManagerStateSnapshot
	page := *req
	for pages := 0; ; pages++ {
		resp, err := m.fetchState(ctx, addr, &page, gone)
		if err != nil {
			m.log.Warn("state sync from peer failed", "peer", id, "page", pages, "err", err)
			return nil
		}
		p := resp.ManagerState
		if p == nil {
			m.log.Warn("state sync: peer sent no manager snapshot", "peer", id)
			return nil
		}
		if ms == nil {
			ms = p
		} else {
			mergeSnapshotPage(ms, p)
		}
		if p.NextAfter == "" || p.NextAfter <= page.JobsAfter {
			break
		}
		page.JobsAfter = p.NextAfter
	}
	ms.NextAfter = ""
	if ms.NodeID == "" {
		ms.NodeID = id
	}
	for i := range ms.Workers {
		m.workers.learn(&ms.Workers[i])
	}
	return ms
}

// mergeSnapshotPage adds a later page of a peer's snapshot to the first.
func mergeSnapshotPage(ms, p *wire.ManagerStateSnapshot) {
	if ms.Jobs == nil {
		ms.Jobs = make(map[string]wire.JobProgress)
	}
	if ms.Retries == nil {
		ms.Retries = make(map[string]int)
	}
	maps.Copy(ms.Jobs, p.Jobs)
	maps.Copy(ms.Retries, p.Retries)
	ms.Submissions = append(ms.Submissions, p.Submissions...)
	ms.Commits = append(ms.Commits, p.Commits...)
	ms.Confirmed = append(ms.Confirmed, p.Confirmed...)
	ms.Ended = append(ms.Ended, p.Ended...)
	ms.Workers = append(ms.Workers, p.Workers...)
}

// applyPeerSnapshots folds the peers' snapshots into the job table, once
// they are all in, since whether an unconfirmed job is adopted depends on
// who holds it (resolveIntake).
func (m *Manager) applyPeerSnapshots(lt *leadership.Term, snaps []*wire.ManagerStateSnapshot) {
	var targets []cancelTarget
	m.update(func(tx *txn) {
		targets = m.resolveIntakeLocked(tx, lt, snaps)
		for _, ms := range snaps {
			m.adoptEndedLocked(tx, ms)
		}
		for _, ms := range snaps {
			m.mergeSnapshotLocked(tx, ms)
		}
	})
	m.cancelOnWorkers(lt.Context(), targets, "withdrawn: never stored on a majority of managers")
}

// mergeSnapshotLocked folds a peer's snapshot of jobs it holds into the job
// table: its commits, its view of each job, and its attempt counts. A new
// leader's sync and a learner's copy both take snapshots this way.
func (m *Manager) mergeSnapshotLocked(tx *txn, ms *wire.ManagerStateSnapshot) {
	for i := range ms.Commits {
		m.applyCommitLocked(tx, &ms.Commits[i])
	}
	for jobID, jp := range ms.Jobs {
		jp.JobID = jobID
		m.mergeJobLocked(tx, &jp)
	}
	for wfID, n := range ms.Retries {
		if w, ok := m.wfs[wfID]; ok && n > w.rec.Attempts {
			w.rec.Attempts = n
			tx.touchWorkflow(w, true)
		}
	}
}

// adoptEndedLocked records the ended jobs of a peer's snapshot that this
// manager never stored: it missed their submission (the intake's majority
// was the others), so without this it would answer 404 for a job the client
// was told ran. They are recorded ended, with the peer's final view, and
// never placed.
func (m *Manager) adoptEndedLocked(tx *txn, ms *wire.ManagerStateSnapshot) {
	for i := range ms.Ended {
		sub := &ms.Ended[i]
		jp, ok := ms.Jobs[sub.JobID]
		if _, known := m.jobs[sub.JobID]; known || !ok || !jp.Status.Terminal() || m.validateSubmission(sub) != nil {
			continue
		}
		j := m.adoptSubmissionLocked(tx, sub)
		j.rec.Confirmed = true
		jp.JobID = sub.JobID
		m.mergeJobLocked(tx, &jp)
		if j.timer != nil {
			j.timer.Stop()
			j.timer = nil
		}
		m.log.Info("learned an ended job from a peer", "job_id", sub.JobID, "status", jp.Status, "peer", ms.NodeID)
	}
}

// resolveIntakeLocked decides, for every unfinished job found here or in a
// peer's snapshot, whether it is known to be on a majority (confirmed), was
// never on one (held, unconfirmed, by the leader that accepted it in an
// older term and nobody else: withdrawn, never run), or may be (adopted,
// and stored on a majority before it is placed). See intake.go.
func (m *Manager) resolveIntakeLocked(tx *txn, lt *leadership.Term, snaps []*wire.ManagerStateSnapshot) []cancelTarget {
	holders := make(map[string]map[string]bool)
	confirmed := make(map[string]bool)
	subs := make(map[string]*wire.JobSubmission)
	hold := func(id, node string) {
		if holders[id] == nil {
			holders[id] = make(map[string]bool)
		}
		holders[id][node] = true
	}
	for id, j := range m.jobs {
		if j.rec.Status.Terminal() {
			continue
		}
		hold(id, m.cfg.ID)
		confirmed[id] = confirmed[id] || j.rec.Confirmed
		subs[id] = &j.rec.Submission
	}
	for _, ms := range snaps {
		for i := range ms.Submissions {
			sub := &ms.Submissions[i]
			if sub.JobID == "" {
				continue
			}
			hold(sub.JobID, ms.NodeID)
			if subs[sub.JobID] == nil {
				subs[sub.JobID] = sub
			}
		}
		for _, id := range ms.Confirmed {
			confirmed[id] = true
		}
	}
	var targets []cancelTarget
	for _, id := range slices.Sorted(maps.Keys(subs)) {
		sub := subs[id]
		j, known := m.jobs[id]
		if known && j.rec.Status.Terminal() {
			continue
		}
		h := holders[id]
		if !confirmed[id] && sub.IntakeLeader != "" && sub.IntakeTerm < lt.Number() && len(h) == 1 && h[sub.IntakeLeader] {
			m.log.Info("withdrawing a job its leader never stored on a majority", "job_id", id,
				"intake_leader", sub.IntakeLeader, "intake_term", sub.IntakeTerm)
			if known {
				targets = append(targets, m.endJobLocked(tx, j, wire.JobFailed, "withdrawn: never stored on a majority of managers")...)
			}
			continue
		}
		if !known {
			if m.validateSubmission(sub) != nil {
				continue
			}
			j = m.adoptSubmissionLocked(tx, sub)
		}
		if confirmed[id] && !j.rec.Confirmed {
			j.rec.Confirmed = true
			tx.touchJob(j, true)
		}
		if !j.rec.Confirmed {
			j.abandoned, j.adoptedTerm = false, lt.Number()
		}
	}
	return targets
}

func (m *Manager) syncWorker(ctx context.Context, wv workerView, req *wire.StateSyncRequest, out *syncOutcome) {
	resp, err := m.fetchState(ctx, wv.Addr, req, func() bool {
		cur, ok := m.workers.get(wv.ID)
		return ok && cur.Gone
	})
	if err != nil {
		m.log.Warn("state sync from worker failed", "worker", wv.ID, "err", err)
		return
	}
	ws := resp.WorkerState
	if ws == nil {
		m.log.Warn("state sync: worker sent no worker snapshot", "worker", wv.ID)
		return
	}
	if ws.NodeID == "" {
		ws.NodeID = wv.ID
	}
	if ws.Addr == "" {
		ws.Addr = wv.Addr
	}
	m.workers.snapshot(ws)
	out.mu.Lock()
	out.answered[ws.NodeID] = true
	out.mu.Unlock()
	targets := m.adoptRunning(ws, out, false)
	m.cancelOnWorkers(ctx, targets, "superseded after a leader change")
}

// adoptRunning folds a worker's snapshot into the job table: what it runs
// under the current (or a newer) fence token is RUNNING there; what it runs
// under an older token, or for a job that has ended, is stopped. Workflows
// of unknown jobs are set aside in out, or, on the last pass, left alone.
func (m *Manager) adoptRunning(ws *wire.WorkerStateSnapshot, out *syncOutcome, last bool) []cancelTarget {
	var targets []cancelTarget
	var unknown *wire.WorkerStateSnapshot
	m.update(func(tx *txn) {
		for wfID, p := range ws.ActiveWorkflows {
			if p.WorkflowID == "" {
				p.WorkflowID = wfID
			}
			w, ok := m.wfs[p.WorkflowID]
			if !ok {
				if last {
					// A majority of managers has been read, and every job a
					// leader acknowledged is on a majority: this one was
					// never acknowledged, or was withdrawn. Fence it rather
					// than let it load the target unseen.
					m.log.Warn("worker runs a workflow of a job no majority of managers holds; stopping it", "worker", ws.NodeID, "workflow_id", p.WorkflowID, "job_id", p.JobID)
					targets = append(targets, cancelTarget{worker: ws.NodeID, jobID: p.JobID, workflowID: p.WorkflowID, fence: p.FenceToken})
					continue
				}
				if unknown == nil {
					unknown = &wire.WorkerStateSnapshot{NodeID: ws.NodeID, ActiveWorkflows: make(map[string]wire.WorkflowProgress)}
				}
				unknown.ActiveWorkflows[p.WorkflowID] = p
				continue
			}
			if p.JobID == "" {
				p.JobID = w.rec.JobID
			}
			if m.applyProgressLocked(tx, &p, ws.NodeID) {
				targets = append(targets, cancelTarget{worker: ws.NodeID, jobID: p.JobID, workflowID: p.WorkflowID, fence: p.FenceToken})
				continue
			}
			out.mu.Lock()
			out.running[p.WorkflowID] = ws.NodeID
			out.mu.Unlock()
		}
	})
	if unknown != nil {
		out.mu.Lock()
		out.unknown = append(out.unknown, unknown)
		out.mu.Unlock()
	}
	return targets
}

// fetchState asks addr for its state, retrying with exponential backoff and
// jitter (StateSyncBackoff * 2^attempt) on failures that might pass. A typed
// refusal is final, and so is gone() turning true (SWIM declared the node
// dead).
func (m *Manager) fetchState(ctx context.Context, addr string, req *wire.StateSyncRequest, gone func() bool) (*wire.StateSyncResponse, error) {
	for attempt := 0; ; attempt++ {
		if gone() {
			return nil, fmt.Errorf("state sync from %s: node is dead", addr)
		}
		cctx, cancel := context.WithTimeout(ctx, m.cfg.QuorumTimeout)
		resp, err := m.tr.Call(cctx, addr, req)
		cancel()
		if err == nil {
			r, ok := resp.(*wire.StateSyncResponse)
			if !ok {
				return nil, fmt.Errorf("state sync from %s: unexpected reply %T", addr, resp)
			}
			return r, nil
		}
		var typed *wire.Error
		if errors.As(err, &typed) && typed.Code != wire.CodeUnavailable && typed.Code != wire.CodeRateLimited {
			return nil, fmt.Errorf("state sync from %s: %w", addr, err)
		}
		if attempt >= m.cfg.StateSyncRetries || ctx.Err() != nil {
			return nil, fmt.Errorf("state sync from %s after %d attempts: %w", addr, attempt+1, err)
		}
		d := m.cfg.StateSyncBackoff << attempt
		if !lifecycle.Sleep(ctx, d/2+rand.N(d/2+1)) {
			return nil, ctx.Err()
		}
	}
}

// resume runs once state sync is done: every workflow the job table says is
// placed but that its worker, answering, does not report is retried; one
// whose worker SWIM declared dead is retried elsewhere; one whose worker
// could not be asked (a restarted leader may not know it yet) gets
// StateSyncGrace to show up. Deadlines that passed while nobody led are
// enforced, and the scheduler is woken for pending work. Running workflows
// are not touched.
func (m *Manager) resume(ctx context.Context, lt *leadership.Term, out *syncOutcome) {
	start := m.clock.Now()
	var expired, waiting []string
	failed := map[string]string{} // pipeline jobs with a FAILED task: job id → why
	m.update(func(tx *txn) {
		for _, j := range m.jobs {
			if j.rec.Status.Terminal() {
				continue
			}
			if t := j.rec.Submission.Timeout; t > 0 && !start.Before(j.rec.Created().Add(t)) {
				expired = append(expired, j.rec.ID())
				continue
			}
			if why := failedTask(j); why != "" {
				// A task failed under a leader that lost its term before it
				// ended the job (rsTaskFailedLocked needs a leader): the rest
				// of the pipeline waits for that task forever.
				failed[j.rec.ID()] = why
				continue
			}
			m.armTimeoutLocked(j)
			for _, w := range j.wfs {
				if !placed(w) || out.running[w.rec.WorkflowID] != "" {
					continue
				}
				worker := w.rec.Worker
				wv, known := m.workers.get(worker)
				switch {
				case out.answered[worker]:
					// The worker is fine; it just does not have it (the
					// dispatch never arrived). Retry without blaming it.
					m.notItsFaultLocked(tx, w, "", fmt.Sprintf("not running on %s after the leader change", worker))
				case known && wv.Gone && m.fenceWait(worker) <= 0:
					m.notItsFaultLocked(tx, w, worker, fmt.Sprintf("worker %s is dead", worker))
				default:
					waiting = append(waiting, w.rec.WorkflowID)
				}
			}
		}
	})
	for _, id := range slices.Sorted(maps.Keys(failed)) {
		if _, err := m.cancelJob(ctx, id, wire.JobFailed, failed[id]); err != nil {
			m.log.Debug("end a job whose pipeline task failed", "job_id", id, "err", err)
		}
	}
	slices.Sort(expired)
	for _, id := range expired {
		if _, err := m.cancelJob(ctx, id, wire.JobTimeout, "timed out while no manager led"); err != nil {
			m.log.Debug("expire job", "job_id", id, "err", err)
		}
	}
	if len(waiting) > 0 {
		// A worker this leader cannot reach may be cut off and still
		// running its workflows until its fence_after runs out.
		grace := max(m.cfg.StateSyncGrace, m.cfg.WorkerFenceAfter)
		m.log.Info("waiting for unreachable workers before retrying their workflows", "workflows", len(waiting), "grace", grace)
		lt.Go(func(ctx context.Context) {
			if lifecycle.Sleep(ctx, grace) {
				m.retryStranded(waiting, start)
			}
		})
	}
	m.kick()
}

// failedTask says why j, a job with a pipeline, must end: one of its
// pipeline tasks is FAILED; "" when none is.
func failedTask(j *jobState) string {
	for _, w := range j.wfs {
		if w.rec.Spec.Type == rainstorm.TypeName && w.rec.Status == wire.WorkflowFailed {
			return fmt.Sprintf("pipeline %s: task %d of %d failed: %s", w.rec.Spec.Name, w.rec.Spec.Shard, w.rec.Spec.Shards, w.rec.Error)
		}
	}
	return ""
}

// placed reports whether w is on a worker as far as the job table knows.
func placed(w *workflowState) bool {
	return w.rec.Status == wire.WorkflowAssigned || w.rec.Status == wire.WorkflowRunning
}

// retryStranded retries the given workflows if their worker has not been
// heard from since the leader started.
func (m *Manager) retryStranded(ids []string, since time.Time) {
	m.update(func(tx *txn) {
		for _, id := range ids {
			w, ok := m.wfs[id]
			if !ok || !placed(w) {
				continue
			}
			if wv, known := m.workers.get(w.rec.Worker); known && wv.Alive && !wv.LastSeen.Before(since) {
				continue
			}
			m.notItsFaultLocked(tx, w, w.rec.Worker, fmt.Sprintf("worker %s not heard from since the leader change", w.rec.Worker))
		}
	})
}

// handleStateSync answers a new leader's StateSyncRequest, or a learner's
// (learnerSyncGate), with this manager's snapshot.
func (m *Manager) handleStateSync(ctx context.Context, from transport.Peer, req *wire.StateSyncRequest) (wire.Message, error) {
	if err := m.learnerSyncGate(ctx, from); err != nil {
		return nil, err
	}
	return &wire.StateSyncResponse{ResponderID: m.cfg.ID, CurrentVersion: m.currentRev(), ManagerState: m.managerSnapshot(req.Term, req.JobsAfter)}, nil
}

func (m *Manager) currentRev() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rev
}

// managerSnapshot is this manager's view for a successor: the workers it
// knows; every unfinished job with its submission, placements and retry
// counts; and the most recently ended jobs' outcomes. It is paged by size
// (snapshotPageBudget, at least one job a page, in job id order after
// after): a datacenter's jobs together may be far larger than one message.
//
// A requester in a newer term than a job's intake decides that job's fate
// from what it reads now, so jobs not yet confirmed here are abandoned: this
// manager will not confirm them later behind the requester's back.
func (m *Manager) managerSnapshot(requesterTerm uint64, after string) *wire.ManagerStateSnapshot {
	st := m.elector.Status()
	ms := &wire.ManagerStateSnapshot{
		NodeID:     m.cfg.ID,
		Datacenter: m.cfg.Datacenter,
		IsLeader:   m.leading() != nil,
		Term:       st.Term,
		Jobs:       make(map[string]wire.JobProgress),
		Retries:    make(map[string]int),
	}
	if after == "" {
		for _, wv := range m.workers.list() {
			ms.Workers = append(ms.Workers, wire.WorkerStateSnapshot{
				NodeID: wv.ID, State: wv.State, TotalCores: wv.TotalCores,
				AvailableCores: wv.AvailableCores, Version: wv.Version, Addr: wv.Addr,
			})
		}
	}
	type entry struct {
		id        string
		sub       *wire.JobSubmission
		ended     bool
		confirmed bool
		jp        wire.JobProgress
		retries   map[string]int
		commits   []wire.ProvisionCommit
	}
	var entries []entry
	m.mu.Lock()
	ms.Version = m.rev
	var ended []*jobState
	for _, j := range m.jobs {
		if j.rec.Status.Terminal() {
			ended = append(ended, j)
			continue
		}
		if !j.rec.Confirmed && j.rec.Submission.IntakeTerm < requesterTerm && j.adoptedTerm < requesterTerm {
			j.abandoned = true
		}
		if j.rec.ID() <= after {
			continue
		}
		sub := j.rec.Submission
		e := entry{id: j.rec.ID(), sub: &sub, confirmed: j.rec.Confirmed, jp: m.jobProgressLocked(j, true), retries: make(map[string]int)}
		for _, w := range j.wfs {
			if w.rec.Attempts > 0 {
				e.retries[w.rec.WorkflowID] = w.rec.Attempts
			}
			if w.rec.Worker != "" && w.rec.FenceToken != 0 {
				e.commits = append(e.commits, wire.ProvisionCommit{
					JobID: w.rec.JobID, WorkflowID: w.rec.WorkflowID, TargetWorker: w.rec.Worker,
					CoresAssigned: w.rec.Spec.Cores, FenceToken: w.rec.FenceToken, Attempts: w.rec.Attempts,
				})
			}
		}
		entries = append(entries, e)
	}
	slices.SortFunc(ended, func(a, b *jobState) int { return cmp.Compare(b.rec.FinishedAt, a.rec.FinishedAt) })
	for _, j := range ended[:min(len(ended), maxSnapshotEndedJobs)] {
		if j.rec.ID() > after {
			// With its submission: a successor that never stored the job
			// (it was not in the intake's majority) learns it ended
			// instead of answering 404 for an acknowledged job.
			sub := j.rec.Submission
			entries = append(entries, entry{id: j.rec.ID(), sub: &sub, ended: true, jp: m.jobProgressLocked(j, true)})
		}
	}
	if after == "" {
		for _, o := range m.orphanCommits {
			ms.Commits = append(ms.Commits, o.c)
		}
	}
	m.mu.Unlock()

	// Sizes are measured outside the lock: encoding histograms is slow.
	slices.SortFunc(entries, func(a, b entry) int { return cmp.Compare(a.id, b.id) })
	size := encodedSize(ms)
	for i, e := range entries {
		fitJobSeries(&e.jp)
		n := encodedSize(&e.jp) + encodedSize(e.sub) + len(e.commits)*128 + len(e.retries)*64
		if n > wire.MaxMessageSize/2 {
			// Could never travel, even alone (a job stored before
			// submissions had to fit a message): left out rather than
			// let it stall every successor's sync.
			m.log.Error("job too large for a state sync page; a successor cannot learn it from this manager", "job_id", e.id, "bytes", n)
			continue
		}
		if i > 0 && size+n > snapshotPageBudget {
			ms.NextAfter = entries[i-1].id
			break
		}
		size += n
		switch {
		case e.ended:
			ms.Ended = append(ms.Ended, *e.sub)
		case e.sub != nil:
			ms.Submissions = append(ms.Submissions, *e.sub)
			if e.confirmed {
				ms.Confirmed = append(ms.Confirmed, e.id)
			}
		}
		ms.Jobs[e.id] = e.jp
		maps.Copy(ms.Retries, e.retries)
		ms.Commits = append(ms.Commits, e.commits...)
	}
	return ms
}

// snapshotPageBudget is the encoded size one snapshot page aims at: far
// below wire.MaxMessageSize, so one job over it still fits alone.
const snapshotPageBudget = 2 << 20

// encodedSize is msg's CBOR size; a value that cannot be encoded counts
// as nothing here and fails where it is sent.
func encodedSize(v any) int {
	if v == nil {
		return 0
	}
	if sub, ok := v.(*wire.JobSubmission); ok && sub == nil {
		return 0
	}
	b, err := wire.Marshal(v)
	if err != nil {
		return 0
	}
	return len(b)
}
