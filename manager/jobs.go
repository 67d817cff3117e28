package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"tempest/internal/store"
	"tempest/jobs"
	"tempest/leadership"
	"tempest/rainstorm"
	"tempest/wire"
)

// jobState is a job in memory. Every field is guarded by Manager.mu.
//
// Records are copied (shallowly) to the store outside the lock, so slices
// inside a record are never modified in place: a change replaces the slice.
type jobState struct {
	rec store.JobRecord
	wfs []*workflowState // submission order
	// attempted: placement was tried at least once, so pending work is
	// QUEUED (waiting for capacity) rather than just SUBMITTED.
	attempted bool
	timer     Timer
	// seq counts visible changes; watchers send when it moved.
	seq      uint64
	watchers map[*watcher]struct{}
	// gateHint is the gate the last report's answer named as the gates'
	// leader; gateFinalAcked: that gate has the job's final report.
	gateHint       string
	gateFinalAcked bool
	// leaseUntil is when this datacenter's gate lease lapses unless a
	// report is acknowledged by its holder first (leaselapse.go); zero
	// until this leader first looks.
	leaseUntil time.Time
	// intaking: a goroutine is storing the submission on the peers
	// (intake.go); abandoned: a newer term's state sync read this job
	// unconfirmed, so this manager must never confirm it.
	intaking  bool
	abandoned bool
	// submitting: the Submit call that created the job is still placing
	// it, so its ack can say how the first attempt went; the scheduler
	// leaves the job to it until then.
	submitting bool
	// adoptedTerm is the term in which this manager, leading, adopted the
	// job unconfirmed; only a newer term's sync abandons it.
	adoptedTerm uint64
	// statuses is the workflows' API statuses as of a seq, built once per
	// change for all of the job's watchers (watch.go); set by viewLocked.
	statuses *jobs.Memo[uint64, []jobs.WorkflowStatus]
	// model is the job's groups and parsed thresholds (modelLocked).
	model *jobs.Model
	// stopping and finalizing: what the leader waits for before the job's
	// end shows settled (settle.go). stopping maps workflow id to worker.
	stopping   map[string]string
	finalizing bool
	// endLearned: another manager held the job's end (a leader stored it
	// there), so a client may already have been shown it settled; see
	// shownStatusLocked.
	endLearned bool
}

// workflowState is one workflow in memory, guarded by Manager.mu.
type workflowState struct {
	rec store.WorkflowRecord
	job *jobState
	// placing: a goroutine owns this workflow's placement right now.
	placing bool
	// ended is the fence token of an attempt whose final report this leader
	// took: any later word of that attempt is older than its end.
	ended uint64
	// provisioning: that goroutine found a worker and is confirming or
	// dispatching (the job shows DISPATCHING). A placement that finds no
	// worker never sets it, so queued jobs do not flicker.
	provisioning bool
	// thresholds tracks when Spec.Thresholds were last evaluated
	// (thresholds.go).
	thresholds thresholdState
	// target is the worker a placement of this workflow has picked and is
	// confirming, so that sibling shards placed at the same time avoid it.
	target string
	// waiting is why the last placement left this PENDING workflow
	// unplaced ("no free core"), for statuses; empty once it is placed.
	waiting string
	// counted is the status Manager.wfCounts counts this workflow under;
	// empty when not counted.
	counted wire.WorkflowStatus
	// needs is what a pipeline task asks of its worker beyond cores
	// (confine.go), decoded from its params once: needsKnown.
	needs      []rainstorm.Need
	needsKnown bool
	// rsDormant: a task of an autoscaled stage that no epoch the source
	// reached has needed yet, once rsDormantKnown (rainstorm_scale.go).
	rsDormant, rsDormantKnown bool
	// slot is a pipeline task's slot (slots.go), once slotKnown.
	slot      int
	slotKnown bool
}

// txn collects what one change to the job table touched, so that job
// statuses are re-derived, records persisted, peers told and watchers woken
// once, after the lock is released.
type txn struct {
	m       *Manager
	jobs    map[*jobState]bool // value: persist the job record
	visible map[*jobState]bool // something a watcher would see changed
	wfs     map[*workflowState]struct{}
	after   []func()
	leading *leadership.Term // the leader term at the start, nil on a follower
	// durable: some change must be on disk before update returns. A change
	// that a restart relearns (RUNNING, which state sync reads from the
	// workers; a job status derived from its workflows, which load
	// re-derives) is written lazily, riding along with the next commit.
	durable bool
}

// touchJob marks j changed; persist asks for its record to be written even
// if its status does not change.
func (tx *txn) touchJob(j *jobState, persist bool) {
	tx.jobs[j] = tx.jobs[j] || persist
	if persist {
		tx.visible[j] = true
		tx.durable = true
	}
}

// touchWorkflow marks w changed and, with persist, writes it before update
// returns.
func (tx *txn) touchWorkflow(w *workflowState, persist bool) {
	tx.touchJob(w.job, false)
	tx.visible[w.job] = true
	if persist {
		tx.wfs[w] = struct{}{}
		tx.durable = true
	}
}

// touchWorkflowLazily marks w changed and writes it without waiting for the
// disk (store.PutLazily): for what a restarted manager relearns anyway.
func (tx *txn) touchWorkflowLazily(w *workflowState) {
	tx.touchJob(w.job, false)
	tx.visible[w.job] = true
	tx.wfs[w] = struct{}{}
}

// afterCommit runs f once the change is durable, outside the lock.
func (tx *txn) afterCommit(f func()) { tx.after = append(tx.after, f) }

// update applies f to the job table under the lock, then persists what f
// touched (one store batch per job, concurrently, so the writes share
// fsyncs; lazily when nothing touched must be durable, see txn.durable),
// then runs the deferred actions. It returns the store's error:
// the in-memory change stands either way, since the work it describes is
// already happening, and the next change of the same records retries the
// write.
func (m *Manager) update(f func(tx *txn)) error {
	m.mu.Lock()
	tx := &txn{m: m, jobs: make(map[*jobState]bool), visible: make(map[*jobState]bool), wfs: make(map[*workflowState]struct{}), leading: m.leading()}
	f(tx)
	writes := m.finishLocked(tx)
	m.mu.Unlock()

	var err error
	if tx.durable {
		err = m.persist(writes)
	} else {
		m.persistLazily(writes)
	}
	for _, g := range tx.after {
		g()
	}
	return err
}

type jobWrite struct {
	job *store.JobRecord
	wfs []*store.WorkflowRecord
}

// finishLocked re-derives the status of every touched job and copies the
// records to write.
func (m *Manager) finishLocked(tx *txn) []jobWrite {
	byJob := make(map[*jobState]*jobWrite)
	get := func(j *jobState) *jobWrite {
		w, ok := byJob[j]
		if !ok {
			w = &jobWrite{}
			byJob[j] = w
		}
		return w
	}
	for w := range tx.wfs {
		m.evaluateThresholdsLocked(w)
		m.rev++
		w.rec.Rev = m.rev
		w.rec.UpdatedAt = m.clock.Now().UnixNano()
		rec := w.rec
		jw := get(w.job)
		jw.wfs = append(jw.wfs, &rec)
	}
	for j, persist := range tx.jobs {
		old := j.rec.Status
		finished := m.refreshJobLocked(j)
		changed := j.rec.Status != old || finished
		if j.rec.Status != old {
			m.log.Info("job status", "job_id", j.rec.ID(), "from", old, "to", j.rec.Status)
		}
		if finished {
			tx.durable = true // an end is never relearned from workers
			if j.rec.Status == wire.JobCompleted || j.rec.Status == wire.JobFailed {
				m.finalizeLocked(tx, j)
			}
			if j.timer != nil {
				j.timer.Stop()
				j.timer = nil
			}
			m.kick() // its cores are free
		}
		written, wfWritten := byJob[j]
		if persist || changed || wfWritten {
			m.rev++
			j.rec.Rev = m.rev
			rec := j.rec
			get(j).job = &rec
			if tx.leading != nil {
				// Peers get the job's status and the workflows that changed
				// now, not the whole job: a job of many workflows would
				// otherwise resend all of them on every completion.
				jp := m.jobProgressLocked(j, false)
				if wfWritten {
					for _, wr := range written.wfs {
						jp.Workflows = append(jp.Workflows, replicaProgress(wr))
					}
					fitJobSeries(&jp)
				}
				tx.afterCommit(func() { m.replicateStatus(jp) })
			}
		}
		if changed && j.rec.Submission.Origin != "" {
			m.kickGates()
		}
		if changed || tx.visible[j] {
			j.seq++
			for w := range j.watchers {
				w.wake()
			}
		}
	}
	out := make([]jobWrite, 0, len(byJob))
	for _, w := range byJob {
		out = append(out, *w)
	}
	return out
}

// persistLazily hands writes to the store's next commit without waiting.
func (m *Manager) persistLazily(writes []jobWrite) {
	for _, w := range writes {
		if err := m.store.PutLazily(w.job, w.wfs...); err != nil {
			m.log.Error("persist job state", "err", err)
		}
	}
}

func (m *Manager) persist(writes []jobWrite) error {
	if len(writes) == 1 {
		return m.store.Put(writes[0].job, writes[0].wfs...)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(writes))
	for i, w := range writes {
		wg.Go(func() { errs[i] = m.store.Put(w.job, w.wfs...) })
	}
	wg.Wait()
	err := errors.Join(errs...)
	if err != nil {
		m.log.Error("persist job state", "err", err)
	}
	return err
}

// refreshJobLocked re-derives j's status and totals from its workflows. It
// reports whether the job has just ended: its status is terminal (derived
// here, or set by cancel, timeout or a peer) and had no finish time yet.
func (m *Manager) refreshJobLocked(j *jobState) (finished bool) {
	in := jobs.StatusInput{Current: j.rec.Status, Attempted: j.attempted}
	var completed, failed int64
	var rate float64
	for _, w := range j.wfs {
		in.Workflows = append(in.Workflows, w.rec.Status)
		m.countLocked(w)
		if w.provisioning {
			in.Placing++
		}
		completed += w.rec.LastProgress.CompletedCount
		failed += w.rec.LastProgress.FailedCount
		if !w.rec.Status.Terminal() {
			rate += w.rec.LastProgress.RatePerSecond
		}
	}
	j.rec.Status = jobs.JobStatusOf(in)
	if j.rec.Status.Terminal() && j.rec.FinishedAt == 0 {
		j.rec.FinishedAt = m.clock.Now().UnixNano()
		finished = true
	}
	end := m.clock.Now()
	if j.rec.FinishedAt != 0 {
		end = j.rec.Finished()
	}
	j.rec.Progress = wire.JobProgress{
		JobID:          j.rec.ID(),
		Datacenter:     m.cfg.Datacenter,
		Status:         j.rec.Status,
		TotalCompleted: completed,
		TotalFailed:    failed,
		OverallRate:    rate,
		Elapsed:        end.Sub(j.rec.Created()),
		Timestamp:      m.clock.Now().UnixNano(),
		FenceToken:     j.rec.Submission.FenceToken,
		LeaseHolder:    j.rec.Submission.Origin,
		Error:          j.rec.Error,
	}
	return finished
}

// countLocked moves w in the manager's tally to its current status. Every
// change of a workflow's status touches its job, and every touched job is
// refreshed (refreshJobLocked), which counts its workflows: so the tally
// follows each change in the same update.
func (m *Manager) countLocked(w *workflowState) {
	if w.counted == w.rec.Status {
		return
	}
	if w.counted != "" {
		m.wfCounts[w.counted]--
	}
	m.wfCounts[w.rec.Status]++
	w.counted = w.rec.Status
}

// uncountLocked takes a job's workflows out of the tally as the job is
// forgotten.
func (m *Manager) uncountLocked(j *jobState) {
	for _, w := range j.wfs {
		if w.counted != "" {
			m.wfCounts[w.counted]--
			w.counted = ""
		}
	}
}

// validateSubmission checks a submission from the network or the API
// before anything is stored (jobs.Job.Validate, with this manager's
// workflow types).
func (m *Manager) validateSubmission(sub *wire.JobSubmission) error {
	return jobs.Of(sub).Validate(m.reg)
}

// newJobLocked builds the in-memory job for a submission (whose JobID is
// set) with every workflow PENDING.
func (m *Manager) newJobLocked(sub wire.JobSubmission, created time.Time) *jobState {
	j := &jobState{rec: store.JobRecord{Submission: sub, Status: wire.JobSubmitted, CreatedAt: created.UnixNano()}}
	for i, spec := range sub.Workflows {
		w := &workflowState{job: j, rec: store.WorkflowRecord{
			JobID:      sub.JobID,
			WorkflowID: workflowID(sub.JobID, i),
			Index:      i,
			Spec:       spec,
			Status:     wire.WorkflowPending,
		}}
		j.wfs = append(j.wfs, w)
		m.wfs[w.rec.WorkflowID] = w
		m.countLocked(w)
	}
	m.jobs[sub.JobID] = j
	return j
}

func workflowID(jobID string, i int) string { return jobID + "-" + strconv.Itoa(i) }

// submit is job intake (leader only): validate, assign the id, persist
// SUBMITTED, store it on a majority of managers (intake.go), and try to
// place every workflow now. The answer says whether the job runs or waits
// (QUEUED); a submission no majority stored fails with ErrNoQuorum, as a
// true refusal or with the outcome unknown (intake.go). redirect builds the not-leader error
// in the caller's terms (API URL or QUIC address).
func (m *Manager) submit(ctx context.Context, sub *wire.JobSubmission, redirect func() *wire.Error) (*wire.JobAck, error) {
	lt, err := m.awaitLeader(ctx, redirect)
	if err != nil {
		return nil, err
	}
	if err := m.refuseIfCritical(); err != nil {
		return nil, err
	}
	if err := jobs.Refusal(m.validateSubmission(sub)); err != nil {
		return nil, err
	}
	if err := m.checkConfinement(sub); err != nil {
		return nil, err
	}
	if err := m.refuseUnfittable(sub); err != nil {
		return nil, err
	}
	if err := m.checkSubmissionBlobs(ctx, sub); err != nil {
		return nil, err
	}
	s := *sub
	s.Workflows = m.splitOversized(slices.Clone(sub.Workflows))
	now := m.clock.Now()
	jobs.Of(&s).Canonicalize(now, m.ids.Next)
	if err := jobs.Of(&s).CheckStoredSize(m.cfg.MaxJobBytesOr()); err != nil {
		return nil, err
	}

	s.IntakeLeader, s.IntakeTerm = m.cfg.ID, lt.Number()

	// While intakes find no majority a new job is refused at once, before
	// it is stored (intakebreaker.go); a job this leader already holds goes
	// to its own intake.
	var intakeDone func(error)
	m.mu.Lock()
	_, known := m.jobs[s.JobID]
	m.mu.Unlock()
	if !known {
		done, err := m.intakeCB.allow(s.JobID)
		if err != nil {
			return nil, err
		}
		intakeDone = done
		defer func() {
			if intakeDone != nil {
				intakeDone(errNotJudged)
			}
		}()
	}

	var j *jobState
	var existing *wire.JobAck
	var retryIntake *jobState
	var busy bool
	var stale, full *wire.Error
	err = m.update(func(tx *txn) {
		if old, ok := m.jobs[s.JobID]; ok {
			// A gate retrying a submission it already made, or a new gate
			// leader taking the job over: same answer, newest lease kept.
			if stale = staleFenceLocked(old, s.FenceToken); stale != nil {
				return
			}
			if adoptLeaseLocked(old, s.FenceToken, s.Origin) {
				tx.touchJob(old, true)
			}
			existing = &wire.JobAck{JobID: s.JobID, Accepted: true, Datacenters: []string{m.cfg.Datacenter}}
			switch {
			case old.rec.Confirmed || old.rec.Status.Terminal():
			case old.intaking:
				// Its intake is under way: it is not acknowledged yet.
				busy = true
			default:
				// A resubmission after "outcome unknown": try the intake
				// again, and only then say it is accepted.
				old.intaking = true
				retryIntake = old
			}
			return
		}
		if full = m.queueFullLocked(); full != nil {
			return
		}
		j = m.newJobLocked(s, now)
		j.intaking, j.submitting = true, true
		m.armTimeoutLocked(j)
		tx.touchJob(j, true)
		for _, w := range j.wfs {
			tx.touchWorkflow(w, true)
		}
	})
	if stale != nil {
		return nil, stale
	}
	if full != nil {
		m.log.Warn("job refused: capacity exceeded", "job_id", s.JobID, "max_queued_jobs", m.cfg.MaxQueuedJobs)
		return nil, full
	}
	if j != nil {
		defer func() {
			m.mu.Lock()
			j.submitting = false
			m.mu.Unlock()
			m.kick() // whatever this call left PENDING is the scheduler's now
		}()
	}
	if busy {
		return nil, &wire.Error{Code: wire.CodeUnavailable, RetryAfter: m.cfg.QuorumTimeout,
			Message: fmt.Sprintf("job %s is being stored on a majority of managers; ask again", s.JobID)}
	}
	if retryIntake != nil {
		err := m.intake(ctx, lt, retryIntake, false)
		m.mu.Lock()
		retryIntake.intaking = false
		m.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return existing, nil
	}
	if existing != nil {
		return existing, nil
	}
	if err != nil {
		// Not durable here: forget it, so nothing places a job its
		// submitter was told failed.
		m.mu.Lock()
		m.forgetLocked(j)
		m.mu.Unlock()
		if isNoSpace(err) {
			// The node knows this write failed: the job was stored
			// nowhere, so the answer is a refusal, not "outcome unknown".
			return nil, wire.Errorf(wire.CodeInsufficientStorage, "job %s not stored: this manager's disk is full (%v); it was not run and will not be", s.JobID, err)
		}
		return nil, wire.Errorf(wire.CodeUnavailable, "persist job %s: %v", s.JobID, err)
	}
	log := m.log.With("job_id", s.JobID)
	log.Info("job submitted", "name", s.Name, "workflows", len(s.Workflows), "timeout", s.Timeout)

	// Placement stops when the client goes away or this term ends; what is
	// left PENDING then is the scheduler's (or the next leader's).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(lt.Context(), cancel)()

	err = m.intake(ctx, lt, j, true)
	if intakeDone != nil {
		intakeDone(intakeOutcome(err))
		intakeDone = nil
	}
	m.mu.Lock()
	j.intaking = false
	m.mu.Unlock()
	if err != nil {
		log.Warn("job not acknowledged: not stored on a majority of managers", "err", err)
		return nil, err
	}

	// The job is on a majority now, so it is acknowledged whatever
	// placement finds: work that cannot be placed yet is QUEUED, and a
	// later leader would run it anyway. Work queued ahead of it goes
	// first (gang.go).
	var plan []placement
	m.update(func(tx *txn) {
		plan = m.planLocked(tx, m.queueLocked(j), j)
	})
	results := m.placeAll(ctx, lt.Context(), lt, plan)
	m.unplacePartial(lt.Context(), lt, plan, results)
	for _, r := range results {
		if r.outcome == outcomeNoQuorum {
			log.Warn("job queued: no quorum to place it yet", "err", r.err)
			break
		}
	}
	ack := &wire.JobAck{JobID: s.JobID, Accepted: true, Datacenters: []string{m.cfg.Datacenter}}
	m.mu.Lock()
	if j.rec.Status == wire.JobQueued {
		ack.QueuedPosition = m.queuePositionLocked(j)
	}
	m.mu.Unlock()
	return ack, nil
}

// awaitLeader returns the current leader term once its state sync is done:
// a new leader must not place work before it knows what already runs.
func (m *Manager) awaitLeader(ctx context.Context, redirect func() *wire.Error) (*leadership.Term, error) {
	lt, err := m.terms.AwaitServing(ctx)
	switch {
	case errors.Is(err, leadership.ErrTermEnded):
		return nil, redirect()
	case err != nil:
		return nil, fmt.Errorf("waiting for state sync: %w", err)
	}
	return lt, nil
}

// queuePositionLocked is j's 1-based position among queued jobs, oldest
// first.
func (m *Manager) queuePositionLocked(j *jobState) int {
	pos := 1
	for _, o := range m.jobs {
		if o != j && o.rec.Status == wire.JobQueued && o.rec.CreatedAt < j.rec.CreatedAt {
			pos++
		}
	}
	return pos
}

// endJob puts j in a terminal status (FAILED, CANCELLED, TIMEOUT) and ends
// its unfinished workflows. It returns the workers to cancel on.
func (m *Manager) endJob(j *jobState, status wire.JobStatus, reason string) []cancelTarget {
	var targets []cancelTarget
	m.update(func(tx *txn) {
		targets = m.endJobLocked(tx, j, status, reason)
	})
	return targets
}

// endJobLocked is endJob under the lock.
func (m *Manager) endJobLocked(tx *txn, j *jobState, status wire.JobStatus, reason string) []cancelTarget {
	if j.rec.Status.Terminal() {
		return nil
	}
	var targets []cancelTarget
	for _, w := range j.wfs {
		if w.rec.Status.Terminal() {
			continue
		}
		if w.rec.Worker != "" && (w.rec.Status == wire.WorkflowAssigned || w.rec.Status == wire.WorkflowRunning) {
			targets = append(targets, cancelTarget{worker: w.rec.Worker, jobID: w.rec.JobID, workflowID: w.rec.WorkflowID, fence: w.rec.FenceToken})
			m.workers.freed(w.rec.Worker, releasedCoresLocked(w, w.rec.Worker))
		}
		w.rec.Status = wire.WorkflowCancelled
		if status == wire.JobFailed {
			w.rec.Status = wire.WorkflowFailed
		}
		w.rec.Error = reason
		tx.touchWorkflow(w, true)
	}
	j.rec.Status = status
	j.rec.Error = reason
	tx.touchJob(j, true)
	return targets
}

// jobProgressLocked is j's JobProgress; with workflows, each workflow's
// latest progress as replicaProgress describes it.
func (m *Manager) jobProgressLocked(j *jobState, withWorkflows bool) wire.JobProgress {
	jp := j.rec.Progress
	jp.Status = j.rec.Status
	jp.Error = j.rec.Error
	if withWorkflows {
		jp.Workflows = make([]wire.WorkflowProgress, 0, len(j.wfs))
		for _, w := range j.wfs {
			jp.Workflows = append(jp.Workflows, replicaProgress(&w.rec))
		}
	}
	return jp
}

// replicaProgress is a workflow's progress as peers receive it: status,
// worker and fence token from the record, and step statistics (histograms,
// up to hundreds of KiB) only once the workflow has ended. Those are the
// results a peer must be able to serve if it takes over, while a running
// workflow's are sent again by its worker.
func replicaProgress(rec *store.WorkflowRecord) wire.WorkflowProgress {
	p := workflowProgressOf(rec)
	p.Attempts = rec.Attempts
	p.Requeues = rec.Requeues
	if len(rec.Lost) > 0 {
		p.Lost = rec.Lost // with their statistics, for a successor to fold
	}
	if !rec.Status.Terminal() {
		p.StepStats = nil
	} else {
		// The per-second series (for the HTML report) is a result too;
		// like the histograms it is sent once, when the workflow ends.
		p.Series = rec.Series
	}
	return p
}

// workflowProgressOf is a record's latest progress, with the record's own
// view of status, worker and fence.
func workflowProgressOf(rec *store.WorkflowRecord) wire.WorkflowProgress {
	p := rec.LastProgress
	p.JobID = rec.JobID
	p.WorkflowID = rec.WorkflowID
	p.WorkflowName = rec.Spec.Name
	p.Status = rec.Status
	p.WorkerID = rec.Worker
	p.FenceToken = rec.FenceToken
	p.AssignedCores = rec.Cores
	if rec.Error != "" {
		p.Error = rec.Error
	}
	return p
}

// isNoSpace reports whether a write failed because the disk (or the user's
// quota on it) is full.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
