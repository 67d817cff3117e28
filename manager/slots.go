package manager

import (
	"fmt"
	"slices"
	"strconv"

	"tempest/jobs"
	"tempest/rainstorm"
	"tempest/wire"
)

// Slot sharing (docs/rainstorm.md, "Placement"). A pipeline's tasks are
// cut into slots as Flink cuts a job's subtasks: slot k holds task k of
// every stage (the source is task 0 of its stage), so a pipeline needs as
// many slots as its widest stage has tasks, and each slot holds at most
// one task of each stage. A slot is one core on one worker, shared by its
// tasks: they pass records to one another in turn, and one stage's
// tasks are spread over the slots, so no core is asked to run two tasks
// of one stage. A worker allocates a slot's cores for the first of its
// dispatches that arrives (wire.WorkflowDispatch.Slot) and frees them when
// the last of its tasks ends.

// taskSlot is the pending tasks of one slot of a pipeline.
type taskSlot struct {
	index    int
	tasks    []*workflowState
	cores    int      // the slot's cores: the most any of its tasks asks for
	excluded []string // workers any of its tasks must not go to
}

// slotLocked is the slot of pipeline task w, or -1 when its params cannot
// tell (it then holds cores of its own). Worked out once per task.
func slotLocked(w *workflowState) int {
	if !w.slotKnown {
		w.slot, w.slotKnown = -1, true
		if p, err := rainstorm.DecodeTaskParams(w.rec.Spec.Params); err == nil {
			w.slot = p.Index
		}
	}
	return w.slot
}

// dispatchSlotLocked names w's slot in its dispatch: unique in the
// datacenter (the pipeline's first workflow id, and the slot), "" for a
// workflow that holds cores of its own.
func dispatchSlotLocked(w *workflowState) string {
	if !isPipeline(w) {
		return ""
	}
	k := slotLocked(w)
	if k < 0 {
		return ""
	}
	return groupMembersLocked(w)[0].rec.WorkflowID + "/slot" + strconv.Itoa(k)
}

// pendingSlotsLocked groups a pipeline's pending tasks that no placement
// is making by slot, in slot order.
func pendingSlotsLocked(tasks []*workflowState) []taskSlot {
	var out []taskSlot
	own := -1 // a task of unknown slot gets one of its own, numbered below 0
	for _, t := range tasks {
		if !pendingFree(t) {
			continue
		}
		k := slotLocked(t)
		if k < 0 {
			k, own = own, own-1
		}
		i := slices.IndexFunc(out, func(s taskSlot) bool { return s.index == k })
		if i < 0 {
			out = append(out, taskSlot{index: k})
			i = len(out) - 1
		}
		sl := &out[i]
		sl.tasks = append(sl.tasks, t)
		sl.cores = max(sl.cores, t.rec.Spec.Cores, 1)
		for _, id := range t.rec.Excluded {
			if !slices.Contains(sl.excluded, id) {
				sl.excluded = append(sl.excluded, id)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b taskSlot) int { return a.index - b.index })
	return out
}

// slotWorkerLocked is the worker a task of slot k of a pipeline holds
// cores on (assigned or running), or "".
func slotWorkerLocked(tasks []*workflowState, k int) string {
	if k < 0 {
		return ""
	}
	for _, t := range tasks {
		if slotLocked(t) == k && t.rec.Worker != "" &&
			(t.rec.Status == wire.WorkflowAssigned || t.rec.Status == wire.WorkflowRunning) {
			return t.rec.Worker
		}
	}
	return ""
}

// releasedCoresLocked is how many cores w gives back on worker when it
// stops holding them there: none while another task of its slot still
// holds the slot on that worker, else its own.
func releasedCoresLocked(w *workflowState, worker string) int {
	if isPipeline(w) {
		if k := slotLocked(w); k >= 0 {
			for _, t := range groupMembersLocked(w) {
				if t != w && t.rec.Worker == worker && slotLocked(t) == k &&
					(t.rec.Status == wire.WorkflowAssigned || t.rec.Status == wire.WorkflowRunning) {
					return 0
				}
			}
		}
	}
	return w.rec.Spec.Cores
}

// refuseUnfittable refuses a new submission with a pipeline that no
// placement in this datacenter could ever hold: one needing more cores
// (a core per slot) than all the live workers whose cores the leader
// knows have together, counted whether or not they are busy, since cores
// in use come free. It is judged against the workers there are: with none
// known yet (a cluster starting up, a leader just elected) nothing is
// refused and the pipeline waits for workers as before, and a datacenter
// that later loses workers leaves an accepted pipeline waiting rather than
// refused. A job this manager already holds (a client's or a gate's
// resubmission) is not judged again.
//
// The refusal names the job file's field (wire.Error.Field: the widest
// stage's tasks), so the API can answer with its line.
func (m *Manager) refuseUnfittable(sub *wire.JobSubmission) error {
	m.mu.Lock()
	_, known := m.jobs[sub.JobID]
	m.mu.Unlock()
	if known && sub.JobID != "" {
		return nil
	}
	workers, total := m.workers.registeredCores()
	if workers == 0 {
		return nil
	}
	for g, grp := range jobs.Groups(sub.Workflows) {
		spec := sub.Workflows[grp.Start]
		if spec.Type != rainstorm.TypeName {
			continue
		}
		p, err := rainstorm.DecodeTaskParams(spec.Params)
		if err != nil {
			continue // Validate has refused it already
		}
		widest, slots := -1, p.Spec.Source.Splits() // the source: one task per range
		for i := range p.Spec.Stages {
			// An autoscaled stage may grow to its maximum, and a
			// resize whose tasks cannot be placed stalls the pipeline.
			if n := p.Spec.Stages[i].PartCount(); n > slots {
				widest, slots = i, n
			}
		}
		need := slots * max(spec.Cores, 1)
		if need <= total {
			continue
		}
		// The job file lists the stages chained into the source first.
		field, name := fmt.Sprintf("workflows[%d].source.split", g), "the source"
		if widest >= 0 {
			field = fmt.Sprintf("workflows[%d].stages[%d].tasks", g, widest+len(p.Spec.Source.Chain))
			name = p.Spec.Stages[widest].Name
		}
		return &wire.Error{Code: wire.CodeRejected, Field: field,
			Message: fmt.Sprintf("pipeline %q can never run in datacenter %s: it needs %d cores, one per slot "+
				"(its widest stage, %s, has %d tasks), and the datacenter's live workers (%d) have %d cores in all",
				spec.Name, m.cfg.Datacenter, need, name, slots, workers, total)}
	}
	return nil
}
