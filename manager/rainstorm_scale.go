package manager

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"tempest/api"
	"tempest/internal/lifecycle"
	"tempest/leadership"
	"tempest/rainstorm"
	"tempest/wire"
)

// Autoscaling a running pipeline (docs/rainstorm.md, "Resizing a running
// pipeline" and "Autoscaling policy"). The leader samples each autoscaled
// stage's load from the store's durable checkpoints every rsScaleEvery and
// feeds the stage's Scaler; a decision becomes the pipeline's wanted sizes,
// which the source reads in its route answers (RainstormRoutes.Resize) and
// records as an epoch in its checkpoint. Everything a new leader needs is
// in that replicated checkpoint: the epochs the source recorded and the
// one it sends in. From it the leader
//
//   - places the tasks of every epoch the source sends in or passed: an
//     autoscaled stage has its maximum of parts from submit (PartCount);
//     one the source has not reached is dormant, a PENDING part no
//     placement takes, and becomes placeable like a replacement (by slot,
//     through the normal quorum-confirmed provisioning) once it exists in
//     an epoch the source reached;
//   - puts a task that retired (its drained checkpoint Done, its part
//     COMPLETED, its slot freed) back to PENDING when a later epoch the
//     source reached has it again;
//   - completes the dormant parts no epoch needed once the source's final
//     checkpoint is durable, so the job can end;
//   - answers handover requests from the old owner's durable state
//     (rainstorm.HandoverOf), in route answers.
//
// A decision is stored on a majority (the pipeline's record in the store,
// rainstorm_decisions.go) before the source is asked for it, so a new
// leader goes on asking for a size the source has not recorded, and keeps
// the decisions' history. What is lost with the leader is only what the
// policy held: its sample window. The new leader's scalers start from the
// recorded size, as the simulation's leader model does.

// rsScaleEvery is how often the leader samples the autoscaled stages: the
// scaler's rates are over this interval, and its windows are several of it.
const rsScaleEvery = time.Second

// rsObserveEvery is how often the leader follows the pipelines' epochs
// between samples: places an epoch's tasks once the source sends in it and
// notes a resize in force. Finer than the sampling, so a resize does not
// wait up to a whole sample interval to be placed, and its time to in force
// is measured to within this.
const rsObserveEvery = rsScaleEvery / 5

// rsResizeHistory bounds the decisions kept per pipeline for statuses.
const rsResizeHistory = 64

// rsPipeKey names a pipeline: its job and workflow name.
type rsPipeKey struct{ job, wf string }

// rsScaleState is what the leader's autoscaling keeps per pipeline. The
// scalers and wanted sizes belong to one term (reset at its start); the
// decisions are kept for statuses while the manager runs.
type rsScaleState struct {
	mu    sync.Mutex
	pipes map[rsPipeKey]*rsPipeScale
}

type rsPipeScale struct {
	term    uint64
	scalers map[int]*rainstorm.Scaler // by stage, from 1
	// want is the sizes asked of the source that its durable checkpoint
	// does not record yet (nil: none).
	want    []int
	resizes []api.PipelineResize
	// held is why the scalers' samples are held back, as last logged.
	held string
	// handovers is what the leader served of each resize's handovers,
	// filled into its resizes entry for statuses.
	handovers map[rsResizeKey]*rsHandoverStat
	// loaded says the term's state was read from the stored record
	// (rsLoadScaleLocked); seq is the record's last write.
	loaded bool
	seq    uint64
	// figures counts the measured figures put in resizes (a handover
	// complete); storedFigures is how many of them a stored record
	// holds. While they differ the scale loop writes the record, so a
	// new leader shows what this one measured.
	figures, storedFigures uint64
	// inherit is the sizes an earlier leader's stored record asks of the
	// source, as this term loaded them when the source recorded inheritAt
	// epochs. They are asked for only once stored again in this term
	// (rsStoreScale): a record read in a sync may be a copy of a write
	// that never reached a majority, which its leader dropped, and a
	// later leader that acted on it alone and died would leave its own
	// successor not knowing what the source was asked.
	inherit   []int
	inheritAt int
	// retry is when the next write of the record may be tried after
	// writes that missed a majority (rsStoreScale): until then the
	// pipeline neither writes nor decides.
	retry rsRetry
}

// rsRetry spaces the writes of a pipeline's autoscaling record while a
// majority of the managers cannot be reached: each write that misses one
// doubles the wait before the next (jittered, so the pipelines of a
// leader do not try together), up to rsRetryMax. Without it every scale
// round, five a second, wrote the record again, waited out a quorum
// round and logged the failure.
type rsRetry struct {
	failures int
	at       time.Time // zero: write at will
	err      string    // the last failure, for the status
}

const (
	rsRetryBase = rsScaleEvery
	rsRetryMax  = 30 * time.Second
)

// failed notes a write that missed a majority at now.
func (r *rsRetry) failed(now time.Time, err error) time.Duration {
	d := rsRetryBase << min(r.failures, 16)
	d = min(d, rsRetryMax)
	d = d/2 + rand.N(d/2+1)
	r.failures++
	r.at, r.err = now.Add(d), err.Error()
	return d
}

// waits reports why a write may not be tried at now ("" when it may).
func (r *rsRetry) waits(now time.Time) string {
	if r.at.IsZero() || !now.Before(r.at) {
		return ""
	}
	return fmt.Sprintf("the autoscaling record missed a majority of the managers %d times in a row (%s): next write in %s",
		r.failures, r.err, r.at.Sub(now).Round(100*time.Millisecond))
}

// rsResizeKey names one resize of a pipeline: its stage and the epoch it
// starts.
type rsResizeKey struct {
	stage string
	epoch uint64
}

// pipe returns key's state for term, its scalers and wanted sizes
// forgotten when they are of an earlier term.
func (s *rsScaleState) pipeLocked(key rsPipeKey, term uint64) *rsPipeScale {
	p := s.pipeNoTermLocked(key)
	if p.term != term {
		p.term, p.scalers, p.want, p.held = term, map[int]*rainstorm.Scaler{}, nil, ""
		p.loaded, p.seq = false, 0
		// Sizes inherited in an earlier term are that term's reading of
		// the store: this one reads it again (rsLoadScaleLocked).
		p.inherit, p.inheritAt = nil, 0
		p.retry = rsRetry{}
	}
	return p
}

// pipeNoTermLocked returns key's state as it is, created if need be.
func (s *rsScaleState) pipeNoTermLocked(key rsPipeKey) *rsPipeScale {
	if s.pipes == nil {
		s.pipes = map[rsPipeKey]*rsPipeScale{}
	}
	p := s.pipes[key]
	if p == nil {
		p = &rsPipeScale{}
		s.pipes[key] = p
	}
	return p
}

// want is the sizes the source of key should resize to, for a route answer.
func (s *rsScaleState) want(key rsPipeKey, term uint64) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pipes[key]; p != nil && p.term == term {
		return slices.Clone(p.want)
	}
	return nil
}

// loaded reports whether key's state was loaded from the store in term.
func (s *rsScaleState) loaded(key rsPipeKey, term uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pipes[key]
	return p != nil && p.term == term && p.loaded
}

// rsKeepHistory is rs without the decisions older than the last
// rsResizeHistory, for the record and the leader's state alike.
func rsKeepHistory[T any](rs []T) []T {
	if n := len(rs); n > rsResizeHistory {
		return slices.Delete(rs, 0, n-rsResizeHistory)
	}
	return rs
}

// held is why key's scalers hold their samples in term, as last logged.
func (s *rsScaleState) held(key rsPipeKey, term uint64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pipes[key]; p != nil && p.term == term {
		return p.held
	}
	return ""
}

// resizes returns the decisions recorded for key, oldest first, with
// what their handovers moved.
func (s *rsScaleState) resizes(key rsPipeKey) []api.PipelineResize {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pipes[key]
	if p == nil {
		return nil
	}
	out := slices.Clone(p.resizes)
	for i := range out {
		st := p.handovers[rsResizeKey{out[i].Stage, out[i].Epoch}]
		if st == nil || out[i].Handover != 0 {
			continue // none served here, or complete: the figures are the resize's own
		}
		out[i].KeysMoved, out[i].BytesMoved = st.keys, st.bytes
		if !st.done.IsZero() {
			out[i].Handover = st.done.Sub(st.asked)
		}
	}
	return out
}

// forget drops the pipelines of jobs not in known: a finished job's
// decisions and figures stay for its status while the manager keeps it.
func (s *rsScaleState) forget(known map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.pipes {
		if !known[k.job] {
			delete(s.pipes, k)
		}
	}
}

// rsEpochsOf is a pipeline's epochs as the source's durable checkpoint src
// records them (the start's sizes when it records none), the epoch it
// sends in, and whether its final checkpoint is durable.
func rsEpochsOf(spec *rainstorm.Spec, src *wire.RainstormCheckpoint) (epochs []wire.RainstormEpoch, cur int, done bool) {
	if src != nil && src.Source != nil && len(src.Source.Epochs) > 0 {
		epochs, cur = src.Source.Epochs, int(src.Source.Epoch)
	} else {
		epochs = rainstorm.SpecStartEpochs(spec)
	}
	return epochs, min(cur, len(epochs)-1), src != nil && src.Done
}

// existsIn reports whether task (stage, index) exists in any of epochs
// lo..hi.
func existsIn(epochs []wire.RainstormEpoch, stage, index, lo, hi int) bool {
	for e := max(lo, 0); e <= hi && e < len(epochs); e++ {
		if stage == 0 || (stage <= len(epochs[e].Tasks) && index < epochs[e].Tasks[stage-1]) {
			return true
		}
	}
	return false
}

// rsDormantLocked reports whether pipeline task w is a part no epoch the
// source reached has needed yet: PENDING, and not to be placed. It starts
// as "beyond the stage's starting size" for every part (so a submission
// never places an autoscaled stage beyond its minimum) and is cleared by
// the scale loop once the source's durable checkpoint reaches an epoch the
// task exists in; a new leader's loop clears it again within a round.
func rsDormantLocked(w *workflowState) bool {
	if w.rsDormantKnown {
		return w.rsDormant
	}
	if !isPipeline(w) {
		w.rsDormantKnown = true
		return false
	}
	p, err := rainstorm.DecodeTaskParams(w.rec.Spec.Params)
	if err != nil || p.Stage == 0 {
		w.rsDormantKnown = true
		return false
	}
	if p.Index == 0 {
		w.rsDormantKnown = true // every epoch has a stage's first task
		return false
	}
	// Known only from the pipeline's first part, which holds the spec: a
	// part not (yet) seen in its job's group finds only itself. Until the
	// spec can be read the part waits (dormant, not kept), since placing a
	// part no epoch has starts a task that can never finish.
	first, err := rainstorm.DecodeTaskParams(groupMembersLocked(w)[0].rec.Spec.Params)
	if err != nil || first.Ref || p.Stage > len(first.Spec.Stages) {
		return true
	}
	w.rsDormantKnown = true
	w.rsDormant = p.Index >= first.Spec.Stages[p.Stage-1].TaskCount()
	return w.rsDormant
}

// rsScalePipe is one pipeline as the scale loop reads it.
type rsScalePipe struct {
	key   rsPipeKey
	spec  *rainstorm.Spec
	order []wire.RainstormTask
}

// rsResizablePipes lists the running pipelines that can resize.
func (m *Manager) rsResizablePipes() []rsScalePipe {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []rsScalePipe
	for _, j := range m.jobs {
		if j.rec.Status.Terminal() {
			continue
		}
		seen := map[string]bool{}
		for _, w := range j.wfs {
			if !isPipeline(w) || seen[w.rec.Spec.Name] {
				continue
			}
			seen[w.rec.Spec.Name] = true
			p, err := rainstorm.DecodeTaskParams(groupMembersLocked(w)[0].rec.Spec.Params)
			if err != nil || p.Ref || !p.Spec.Resizable() {
				continue
			}
			order := rainstorm.TaskOrder(&p.Spec)
			for i := range order {
				order[i].Job, order[i].Workflow = j.rec.Submission.JobID, w.rec.Spec.Name
			}
			out = append(out, rsScalePipe{key: rsPipeKey{j.rec.Submission.JobID, w.rec.Spec.Name}, spec: &p.Spec, order: order})
		}
	}
	return out
}

// rsScaleLoop is the leader's autoscaling, for the term's life.
func (m *Manager) rsScaleLoop(ctx context.Context, lt *leadership.Term) {
	const perSample = int(rsScaleEvery / rsObserveEvery)
	tick := 0
	lifecycle.Every(ctx, rsObserveEvery, func() {
		if _, err := m.rsReady(); err != nil {
			return // not synced yet (or no longer leading)
		}
		tick++
		sample := tick%perSample == 0
		for _, p := range m.rsResizablePipes() {
			m.rsScaleOne(ctx, lt, p, m.clock.Now(), sample)
		}
		if sample {
			m.rsScale.forget(m.jobIDs())
		}
	})
}

// jobIDs is the jobs the job table holds.
func (m *Manager) jobIDs() map[string]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := make(map[string]bool, len(m.jobs))
	for id := range m.jobs {
		ids[id] = true
	}
	return ids
}

// rsScaleOne brings one pipeline's parts in line with the source's
// durable epochs, notes its resizes in force and, when sample is set,
// runs its scalers.
func (m *Manager) rsScaleOne(ctx context.Context, lt *leadership.Term, p rsScalePipe, now time.Time, sample bool) {
	// The store is read before the job table's lock is taken: its
	// committer asks the job table (rsAdmit) under the store's lock. Heads
	// only (positions, counters, epochs): the aggregate state, which Latest
	// would build whole every second, is not needed here.
	latest := make([]*wire.RainstormCheckpoint, len(p.order))
	for i, t := range p.order {
		latest[i] = m.rs.Head(t)
	}
	epochs, cur, srcDone := rsEpochsOf(p.spec, latest[0])
	m.update(func(tx *txn) { m.rsEpochPartsLocked(tx, p, latest, epochs, cur, srcDone) })
	// What the first stage is offered: the records the source has read
	// (its progress, ahead of anything durable downstream), so a stage
	// that cannot keep up shows a growing backlog and not only the rate
	// it manages; for a paced source, the records its schedule made due,
	// read or not. A source's window fills when the stage falls behind
	// (always so after a leader change, which stalls the pipeline a
	// moment), and from then on it reads only what the stage takes: the
	// backlog from its reads stops growing and the load reads as the
	// stage's capacity, never above high. Behind chained stages or a
	// combiner the first stage takes in other records than the source
	// reads: then what the source sent, from its durable checkpoint.
	_, _, infos := m.rsTasks(p.key.job, p.key.wf)
	var read uint64
	if len(infos) > 0 && infos[0].found && !p.spec.IsChained() {
		read = uint64(max(infos[0].records, infos[0].offered, 0))
	}
	// Until every task of the epoch the source sends in runs, the
	// pipeline is still taking a change (new tasks being placed) or
	// recovering (a task replaced): its rates then say how fast it
	// gets going, not its load — a source whose window waits on a task
	// not placed yet reads nothing, which would read as a fall in load.
	settling := ""
	if len(infos) != len(p.order) {
		settling = "the pipeline's tasks are not all known"
	}
	for i, t := range p.order {
		if settling == "" && i < len(infos) && existsIn(epochs, t.Stage, t.Index, cur, cur) && infos[i].status != wire.WorkflowRunning {
			settling = fmt.Sprintf("task %d.%d of epoch %d is %s", t.Stage, t.Index, cur, infos[i].status)
		}
	}
	if w := m.rsAutoscale(lt, p, latest, read, settling, epochs, cur, srcDone, now, sample); w.rec != nil {
		m.rsStoreScale(ctx, lt.Number(), p.key, w)
	}
}

// rsEpochPartsLocked places, brings back and completes parts as the
// source's durable epochs say (see the top of this file).
func (m *Manager) rsEpochPartsLocked(tx *txn, p rsScalePipe, latest []*wire.RainstormCheckpoint, epochs []wire.RainstormEpoch, cur int, srcDone bool) {
	j := m.jobs[p.key.job]
	if j == nil || j.rec.Status.Terminal() {
		return
	}
	var parts []*workflowState
	for _, w := range j.wfs {
		if w.rec.Spec.Name == p.key.wf && isPipeline(w) {
			parts = append(parts, w)
		}
	}
	kick := false
	for i, w := range parts {
		if i == 0 || i >= len(p.order) {
			continue
		}
		t := p.order[i]
		log := m.log.With("job_id", t.Job, "workflow", t.Workflow, "workflow_id", w.rec.WorkflowID, "stage", t.Stage, "task", t.Index)
		c := latest[i]
		switch {
		case w.rec.Status == wire.WorkflowPending && rsDormantLocked(w) && existsIn(epochs, t.Stage, t.Index, 0, cur):
			w.rsDormant = false
			w.waiting = ""
			tx.touchWorkflow(w, false)
			kick = true
			log.Info("rainstorm: placing a task of a resized epoch", "epoch", cur)
		case w.rec.Status == wire.WorkflowCompleted && c != nil && c.Retired && c.Done && existsIn(epochs, t.Stage, t.Index, int(c.Epoch)+1, cur):
			// Retired by a shrink, needed again by a later grow: the
			// same part runs again under a new dispatch and continues
			// its chain of versions from its drained checkpoint.
			w.rec.Status = wire.WorkflowPending
			w.rec.Worker, w.rec.Cores, w.rec.Error = "", nil, ""
			w.rsDormant, w.rsDormantKnown = false, true
			tx.touchWorkflow(w, true)
			kick = true
			log.Info("rainstorm: placing a retired task again for a resized epoch", "retired_in", c.Epoch, "epoch", cur)
		case srcDone && w.rec.Status == wire.WorkflowPending && rsDormantLocked(w) && c == nil && !existsIn(epochs, t.Stage, t.Index, 0, cur):
			// The input ended without an epoch that needed it.
			w.rec.Status = wire.WorkflowCompleted
			w.rec.Error = ""
			tx.touchWorkflow(w, true)
			log.Info("rainstorm: a task no epoch needed ends with its pipeline's input")
		case w.rec.Status == wire.WorkflowPending && rsDormantLocked(w):
			why := fmt.Sprintf("not in the stage's current size (%d tasks): placed if autoscale grows it", rsTasksAt(epochs, cur, t.Stage))
			if w.waiting != why {
				setWaitingLocked(tx, w, why)
			}
		}
	}
	if kick {
		tx.afterCommit(m.kick)
	}
}

// rsTasksAt is stage's size in epoch e.
func rsTasksAt(epochs []wire.RainstormEpoch, e, stage int) int {
	if stage == 0 {
		return 1
	}
	return epochs[e].Tasks[stage-1]
}

// rsAutoscale notes the resizes in force and, when sample is set, samples
// each autoscaled stage. It returns the pipeline's autoscaling record to
// store on a majority when it changed: with decided set, a decision,
// which becomes the pipeline's wanted sizes only once stored
// (rsStoreScale).
func (m *Manager) rsAutoscale(lt *leadership.Term, p rsScalePipe, latest []*wire.RainstormCheckpoint, read uint64, settling string,
	epochs []wire.RainstormEpoch, cur int, srcDone bool, now time.Time, sample bool) (w rsScaleWrite) {
	recorded := epochs[len(epochs)-1].Tasks
	s := &m.rsScale
	// The stored record is read once a term, when the pipeline's state
	// is loaded: in the term only this leader writes it, and its writes
	// are in ps already. Read before s.mu: the store's lock is not taken
	// under it.
	var stored *wire.RainstormScale
	if !s.loaded(p.key, lt.Number()) {
		stored = m.rs.Scale(p.key.job, p.key.wf)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := s.pipeLocked(p.key, lt.Number())
	if !ps.loaded {
		rsLoadScaleLocked(ps, stored, epochs)
		if ps.inherit != nil {
			m.log.Info("rainstorm: autoscale stores an earlier leader's decision again before asking the source", "job_id", p.key.job,
				"workflow", p.key.wf, "want", ps.inherit, "recorded", recorded)
		}
	}
	if ps.inherit != nil && (ps.inheritAt != len(epochs) || srcDone) {
		ps.inherit = nil // the source recorded an epoch since: the sizes are history
	}
	w.figures, w.at = ps.figures, now
	backoff := ps.retry.waits(now)
	if (settling == "" && m.rsResizesInForceLocked(p, ps, epochs, cur, now)) || ps.figures != ps.storedFigures || ps.inherit != nil {
		w.rec = rsScaleRecordLocked(ps, lt.Number()) // the figures, durable with the decisions
		if ps.inherit != nil {
			w.rec.Want, w.inherited = slices.Clone(ps.inherit), true
		}
	}
	if backoff != "" {
		w.rec = nil // what it would write stays in ps: the write after the wait carries it
	}
	if ps.want != nil && (slices.Equal(ps.want, recorded) || srcDone) {
		ps.want = nil // recorded (or moot): the source has it
	}
	if srcDone || !sample {
		return w
	}
	// Why samples are not counted, logged when it changes: a stage that
	// does not scale says so.
	held := settling
	switch {
	case backoff != "":
		// A decision now could not be stored either: the scalers wait
		// with the write.
		held = backoff
	case ps.inherit != nil:
		held = fmt.Sprintf("sizes %v an earlier leader asked for, not yet stored in this term", ps.inherit)
	case ps.want != nil:
		held = fmt.Sprintf("sizes %v asked of the source, not recorded yet", ps.want)
	case cur < len(epochs)-1:
		held = fmt.Sprintf("the source records epoch %d and still sends in %d", len(epochs)-1, cur)
	}
	if held != ps.held {
		ps.held = held
		if held != "" {
			m.log.Info("rainstorm: autoscale holds its samples", "job_id", p.key.job, "workflow", p.key.wf, "why", held)
		} else {
			m.log.Info("rainstorm: autoscale samples again", "job_id", p.key.job, "workflow", p.key.wf, "epoch", cur)
		}
	}
	sum := func(stage int, out bool) uint64 {
		var n uint64
		for i, t := range p.order {
			if t.Stage != stage || latest[i] == nil {
				continue
			}
			if out {
				n += latest[i].RecordsOut
			} else {
				n += latest[i].RecordsIn
			}
		}
		return n
	}
	for st := 1; st <= len(p.spec.Stages); st++ {
		pol := p.spec.Stages[st-1].Autoscale
		if pol == nil {
			continue
		}
		sc := ps.scalers[st]
		if sc == nil {
			sc = rainstorm.NewScaler(*pol, rsLastChangeLocked(ps, p.spec.Stages[st-1].Name))
			ps.scalers[st] = sc
		}
		in, offered := sum(st, false), sum(st-1, true)
		if st == 1 {
			offered = max(offered, read)
		}
		x := rainstorm.ScaleSample{At: now, Tasks: recorded[st-1], In: in, Backlog: offered - min(offered, in),
			Resizing: ps.want != nil || ps.inherit != nil || cur < len(epochs)-1 || settling != "" || backoff != ""}
		d, ok := sc.Observe(x)
		if !ok {
			continue
		}
		next := slices.Clone(recorded)
		next[st-1] = d.To
		name := p.spec.Stages[st-1].Name
		m.log.Info("rainstorm: autoscale decision", "job_id", p.key.job, "workflow", p.key.wf, "stage", name,
			"from", d.From, "to", d.To, "reason", d.Reason, "per_task", d.PerTask, "processed", d.Processed,
			"backlog", d.Backlog, "backlog_growth", d.Growth, "epoch", len(epochs)-1)
		w.decided = &api.PipelineResize{At: d.At, Stage: name, From: d.From, To: d.To, Decision: d.String(), Epoch: uint64(len(epochs))}
		w.rec = rsScaleRecordLocked(ps, lt.Number())
		w.rec.Want = next
		w.rec.Resizes = rsKeepHistory(append(w.rec.Resizes, rsResizeToWire(*w.decided)))
		break // one change at a time: the next sample sees it resizing
	}
	return w
}

// rsLastChangeLocked is when stage last changed size as the pipeline's
// decisions record it: its last resize in force (or decided, while its
// time in force is unknown); the zero time when it never changed. A
// scaler's cooldown counts from it, not from when this leader began to
// sample: the cooldown spaces a stage's changes, and a leader that took
// over must not wait it out again (under leader changes every few
// seconds, a scaler whose cooldown restarted with each term never
// decided).
func rsLastChangeLocked(ps *rsPipeScale, stage string) time.Time {
	for i := len(ps.resizes) - 1; i >= 0; i-- {
		if r := ps.resizes[i]; r.Stage == stage {
			return r.At.Add(r.InForce)
		}
	}
	return time.Time{}
}

// rsResizesInForceLocked marks the pipeline's resizes whose epoch the
// source sends in, with every task of it running (the caller checked), as
// in force: the time since the decision and the groups the stage moved.
func (m *Manager) rsResizesInForceLocked(p rsScalePipe, ps *rsPipeScale, epochs []wire.RainstormEpoch, cur int, now time.Time) (changed bool) {
	var tabs *rainstorm.Tables
	for i := range ps.resizes {
		r := &ps.resizes[i]
		if r.InForce != 0 || r.Epoch == 0 || int(r.Epoch) > cur {
			continue
		}
		r.InForce = max(now.Sub(r.At), time.Nanosecond)
		changed = true
		if tabs == nil {
			var err error
			if tabs, err = rainstorm.NewTables(epochs); err != nil {
				return changed
			}
		}
		for st, s := range epochs[r.Epoch].Tasks {
			if st < len(p.spec.Stages) && r.Stage == p.spec.Stages[st].Name && s == r.To {
				r.GroupsMoved = rsMovedGroups(tabs.Table(int(r.Epoch)-1, st+1), tabs.Table(int(r.Epoch), st+1))
			}
		}
		m.log.Info("rainstorm: resize in force", "job_id", p.key.job, "workflow", p.key.wf, "stage", r.Stage, "from", r.From, "to", r.To,
			"epoch", r.Epoch, "in_force_after", r.InForce, "groups_moved", r.GroupsMoved)
	}
	return changed
}

// rsEpochsFor is the epochs a resizable pipeline's task opens with (nil for
// one that cannot resize).
func (m *Manager) rsEpochsFor(job, wf string, spec *rainstorm.Spec) []wire.RainstormEpoch {
	if spec == nil || !spec.Resizable() {
		return nil
	}
	epochs, _, _ := rsEpochsOf(spec, m.rs.Head(wire.RainstormTask{Job: job, Workflow: wf}))
	return epochs
}

// rsDoneRoute fills in a completed task's route: the epoch its final
// checkpoint closed, whose channel its completion acknowledges. A task
// retired by a shrink that a later recorded epoch has again is not shown
// done: its upstream would take that for an acknowledgement of the new
// epoch's batches, which it has not taken in.
func rsDoneRoute(r *wire.RainstormRoute, c *wire.RainstormCheckpoint, epochs []wire.RainstormEpoch) {
	if c == nil {
		return
	}
	r.Epoch = c.Epoch
	if c.Retired && existsIn(epochs, r.Stage, r.Index, int(c.Epoch)+1, len(epochs)-1) {
		r.Done, r.Node = false, ""
	}
}
