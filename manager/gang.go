package manager

import (
	"context"
	"fmt"

	"tempest/leadership"
	"tempest/rainstorm"
	"tempest/wire"
)

// Gang placement (docs/rainstorm.md, "Placement"). A RainStorm pipeline's
// tasks wait on one another: a source with no downstream task, or a stage
// missing a task, makes no progress, and keeps its cores. Placed task by
// task, two pipelines that together need more cores than the datacenter
// has could each hold part of the cores and wait for the rest forever. A
// pipeline's unit of placement is the slot (slots.go): one core on one
// worker, shared by task k of every stage. So a scheduling round plans
// before it places:
//
//  1. Replacements first. A pipeline that holds cores (a task is assigned,
//     running or being placed) and has tasks pending lost them to a dead
//     worker or a failed dispatch: each such slot goes back to the worker
//     where a task of it still runs, or gets a core on its own, ahead of
//     everything else, since the pipeline already holds the rest and only
//     these stand between it and its end.
//  2. Then in job order (oldest first), a pipeline that holds nothing is
//     placed whole: cores for all its pending slots are reserved in one
//     step (workerTable.reserveAll), or none are. One that does not fit
//     waits holding nothing, and everything submitted after it (pipelines
//     and other workflows) waits behind it, so a big pipeline is not
//     starved by small ones that would fit in the cores it waits for. A
//     pipeline that needs more cores than the datacenter has in all does
//     not hold up the queue: waiting cannot help it until workers join.
//     Nor does a pipeline go while a replacement task found no core: the
//     running pipeline's recovery is first in line for the next one.
//  3. Other workflows are placed as before, each on its own, unless a
//     pipeline ahead of them waits.
//
// Plans are made one at a time (under Manager.mu) and reservations are
// taken in the worker table as they are made, so two plans never promise
// the same cores.

// placement is one workflow a round places: claimed (placing) by the plan,
// with cores already reserved on worker on when the plan chose the worker
// (a pipeline's tasks); with on.ID empty, place picks a worker itself.
type placement struct {
	w     *workflowState
	on    workerView
	cores int
	// gang is the pipeline placed whole this placement is a task of (nil
	// for a replacement or another workflow): see unplacePartial.
	gang *gang
}

// gang is a pipeline a plan reserved whole.
type gang struct{ name string }

func isPipeline(w *workflowState) bool { return w.rec.Spec.Type == rainstorm.TypeName }

// pendingFree reports whether w waits for a placement nobody is making (a
// dormant task of an autoscaled stage waits for no placement:
// rainstorm_scale.go).
func pendingFree(w *workflowState) bool {
	return w.rec.Status == wire.WorkflowPending && !w.placing && !rsDormantLocked(w)
}

// holdingLocked reports whether any of a pipeline's tasks holds or is
// taking a core.
func holdingLocked(tasks []*workflowState) bool {
	for _, t := range tasks {
		switch {
		case t.rec.Status == wire.WorkflowAssigned, t.rec.Status == wire.WorkflowRunning:
			return true
		case t.rec.Status == wire.WorkflowPending && t.placing:
			return true
		}
	}
	return false
}

// pipelineName names a pipeline in waiting reasons.
func pipelineName(w *workflowState) string {
	return fmt.Sprintf("pipeline %s of job %s", w.rec.Spec.Name, w.rec.JobID)
}

// setWaitingLocked records that a placement of w was tried, and why w
// stays pending ("" once placed): from now on its job is QUEUED rather
// than SUBMITTED, and its status shows the reason.
func setWaitingLocked(tx *txn, w *workflowState, why string) {
	w.job.attempted = true
	tx.touchJob(w.job, false)
	if w.waiting != why {
		w.waiting = why
		tx.touchWorkflow(w, false)
	}
}

// noFreeCore is the waiting reason of a workflow no worker has room for.
func noFreeCore(cores int) string { return fmt.Sprintf("no free core (needs %d)", max(cores, 1)) }

// planLocked decides what a round places, in the order above, claims it
// and reserves the cores of replacements and whole pipelines. queue is the
// jobs whose pending work may be placed, oldest first. With only set (a
// submission placing its own job), only that job's work is planned; the
// others' count only for what waits ahead of it: a pipeline of theirs that
// waits whole, or a replacement task of theirs, makes only's pipelines wait
// for the scheduler's next round, which kick starts.
func (m *Manager) planLocked(tx *txn, queue []*jobState, only *jobState) []placement {
	var out []placement
	var whole *gang // set while claiming a pipeline's tasks
	claim := func(w *workflowState, on workerView, cores int) {
		w.placing = true
		if on.ID != "" {
			w.target = on.ID
		}
		out = append(out, placement{w: w, on: on, cores: cores, gang: whole})
	}

	// 1. Replacements of running pipelines, a slot at a time.
	starved := false
	for _, j := range queue {
		done := map[*workflowState]bool{}
		for _, w := range j.wfs {
			if !pendingFree(w) || !isPipeline(w) {
				continue
			}
			tasks := groupMembersLocked(w)
			if done[tasks[0]] || !holdingLocked(tasks) {
				continue
			}
			done[tasks[0]] = true
			if only != nil && j != only {
				starved = true // the scheduler's to place, and first
				continue
			}
			for _, slot := range pendingSlotsLocked(tasks) {
				if !m.planReplacementLocked(tx, tasks, slot, claim) {
					starved = true
				}
			}
		}
	}

	// 2 and 3, oldest job first.
	total, _, largest := m.workers.capacity()
	fits := func(tasks []*workflowState) bool {
		for _, sl := range pendingSlotsLocked(tasks) {
			if sl.cores > largest {
				return false
			}
		}
		return pipelineNeedsLocked(tasks) <= total
	}
	blocker := "" // the first pipeline in line that waits whole
	for _, j := range queue {
		done := map[*workflowState]bool{} // pipelines already planned, by first task
		for _, w := range j.wfs {
			if !pendingFree(w) {
				continue
			}
			var tasks []*workflowState
			if isPipeline(w) {
				tasks = groupMembersLocked(w)
				if holdingLocked(tasks) || done[tasks[0]] {
					continue // a replacement (above), or planned
				}
				done[tasks[0]] = true
			}
			if only != nil && j != only {
				if tasks != nil && blocker == "" && fits(tasks) {
					blocker = pipelineName(w)
				}
				continue
			}
			if tasks == nil {
				if blocker != "" {
					setWaitingLocked(tx, w, "queued behind "+blocker+", which waits for cores first")
					continue
				}
				claim(w, workerView{}, w.rec.Spec.Cores)
				continue
			}
			whole = &gang{name: pipelineName(w)}
			m.planPipelineLocked(tx, tasks, total, fits(tasks), starved, &blocker, claim)
			whole = nil
		}
	}
	return out
}

// pipelineNeedsLocked is the cores a pipeline's pending tasks need: one
// allocation per slot.
func pipelineNeedsLocked(tasks []*workflowState) int {
	need := 0
	for _, sl := range pendingSlotsLocked(tasks) {
		need += sl.cores
	}
	return need
}

// planPipelineLocked places a pipeline that holds nothing whole, or
// records why it waits; *blocker becomes its name when it waits first in
// line.
func (m *Manager) planPipelineLocked(tx *txn, tasks []*workflowState, total int, fits, starved bool, blocker *string,
	claim func(*workflowState, workerView, int)) {
	slots := pendingSlotsLocked(tasks)
	var pending []*workflowState
	demands := make([]gangDemand, len(slots))
	for i, sl := range slots {
		pending = append(pending, sl.tasks...)
		var needs []rainstorm.Need
		for _, t := range sl.tasks {
			needs = append(needs, taskNeeds(t)...)
		}
		demands[i] = gangDemand{cores: sl.cores, excluded: sl.excluded, needs: needs}
	}
	need := pipelineNeedsLocked(tasks)
	var why string
	switch {
	case *blocker != "":
		why = "queued behind " + *blocker + ", which waits for cores first"
	case !fits:
		// Waiting for cores to free up cannot help: it does not hold the
		// queue up.
		why = fmt.Sprintf("no free cores for the whole pipeline (needs %d; the datacenter has %d)", need, total)
		if need <= total {
			why = fmt.Sprintf("no worker has the %d cores a task needs", maxTaskCores(pending))
		}
	case starved:
		why = "no free core: a running pipeline's replacement tasks go first; this pipeline waits whole, holding none"
		*blocker = pipelineName(pending[0])
	default:
		views, ok := m.workers.reserveAll(demands)
		if ok {
			for i, sl := range slots {
				claimSlot(sl, views[i], claim)
			}
			return
		}
		_, free, _ := m.workers.capacity()
		why = fmt.Sprintf("no free cores for the whole pipeline (needs %d, %d free); it waits holding none", need, free)
		*blocker = pipelineName(pending[0])
	}
	for _, t := range pending {
		setWaitingLocked(tx, t, why)
	}
}

// claimSlot claims a slot's pending tasks on one worker: the first with
// the slot's cores, which the plan reserved there, the others sharing them
// (the worker allocates a slot's cores once, for whichever of its
// dispatches arrives first).
func claimSlot(sl taskSlot, on workerView, claim func(*workflowState, workerView, int)) {
	for i, t := range sl.tasks {
		cores := 0
		if i == 0 {
			cores = sl.cores
		}
		claim(t, on, cores)
	}
}

// planReplacementLocked places the pending tasks of one slot of a running
// pipeline: on the worker where a task of the slot still runs (sharing its
// cores, so it costs none), else on any worker with room for the slot. It
// reports false when no worker has room.
//
// The slot's worker is taken even when a task excludes it: an exclusion
// records a dispatch there whose outcome was unknown (a copy it may have
// started is fenced out by the new token), and the slot's running task
// shows the worker takes this pipeline's work. Kept away, the task could
// only wait for a core elsewhere while its slot's core sits on that worker
// (a pipeline of 4 slots on 3 workers of 2 cores, whose replacement's
// dispatch timed out on a loaded host, waited until its timeout). Its
// attempts still count against its retries.
func (m *Manager) planReplacementLocked(tx *txn, tasks []*workflowState, sl taskSlot, claim func(*workflowState, workerView, int)) bool {
	if id := slotWorkerLocked(tasks, sl.index); id != "" {
		if wv, ok := m.workers.get(id); ok && wv.Alive && !wv.Gone {
			for _, t := range sl.tasks {
				claim(t, wv, 0)
			}
			return true
		}
	}
	skip := map[string]bool{}
	for _, id := range sl.excluded {
		skip[id] = true
	}
	wv, ok := m.pickLocked(sl.tasks[0], sl.cores, skip)
	if !ok {
		for _, t := range sl.tasks {
			setWaitingLocked(tx, t, noFreeCore(sl.cores))
		}
		return false
	}
	claimSlot(sl, wv, claim)
	return true
}

func maxTaskCores(tasks []*workflowState) int {
	n := 0
	for _, t := range tasks {
		n = max(n, t.rec.Spec.Cores)
	}
	return n
}

// unplacePartial undoes the pipelines of a plan that were not placed
// whole. Their cores were reserved together, but a reserved worker can
// still refuse (its free cores were counted from a stale view), die, or
// fail the dispatch, and another worker may have no room: the tasks
// placed would then hold cores for a pipeline that cannot run. Each such
// task goes back to PENDING under a new fence token it was never
// dispatched with, so its run is stopped and fenced out (its progress and
// its checkpoints carry the old token), and the placement costs it no
// attempt. The pipeline is planned whole again in the next round.
func (m *Manager) unplacePartial(ctx context.Context, lt *leadership.Term, plan []placement, results []placeResult) {
	missed := map[*gang]int{}
	for i, p := range plan {
		if p.gang != nil && results[i].outcome != outcomePlaced {
			missed[p.gang]++
		}
	}
	if len(missed) == 0 {
		return
	}
	short := make(map[*gang]string, len(missed))
	for g, n := range missed {
		short[g] = fmt.Sprintf("%d of the tasks of %s found no core; it waits whole, holding none", n, g.name)
	}
	var targets []cancelTarget
	m.update(func(tx *txn) {
		for i, p := range plan {
			why, ok := short[p.gang]
			w := p.w
			if ok && results[i].outcome != outcomePlaced && w.rec.Status == wire.WorkflowPending {
				setWaitingLocked(tx, w, "not placed whole: "+why)
				continue
			}
			if !ok || results[i].outcome != outcomePlaced || w.job.rec.Status.Terminal() ||
				(w.rec.Status != wire.WorkflowAssigned && w.rec.Status != wire.WorkflowRunning) {
				continue
			}
			token, err := lt.NextToken()
			if err != nil {
				m.log.Warn("undo part of a pipeline: no fence token", "job_id", w.rec.JobID, "workflow_id", w.rec.WorkflowID, "err", err)
				continue
			}
			targets = append(targets, cancelTarget{worker: w.rec.Worker, jobID: w.rec.JobID, workflowID: w.rec.WorkflowID, fence: w.rec.FenceToken})
			m.workers.freed(w.rec.Worker, releasedCoresLocked(w, w.rec.Worker))
			m.log.Info("pipeline not placed whole; giving back a task's core", "job_id", w.rec.JobID, "workflow_id", w.rec.WorkflowID,
				"worker", w.rec.Worker, "fence_token", w.rec.FenceToken)
			w.rec.Status = wire.WorkflowPending
			w.rec.Worker = ""
			w.rec.Cores = nil
			w.rec.FenceToken = token
			w.rec.Attempts = max(w.rec.Attempts-1, 0)
			tx.touchWorkflow(w, true)
			setWaitingLocked(tx, w, "not placed whole: "+why)
		}
	})
	m.cancelOnWorkers(ctx, targets, "pipeline not placed whole")
	m.kick()
}
