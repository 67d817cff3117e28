package worker

import (
	"slices"
	"sync"

	"tempest/rainstorm"
	"tempest/wire"
)

// The host's side of resizing a running pipeline (docs/rainstorm.md,
// "Resizing a running pipeline"). The machines do the protocol; the driver
// gives them the pipeline's epochs (from the open's answer: the source's
// durable epoch list), carries a task's handover requests to the leader in
// its route requests and the answers back, and hands the source the sizes
// the leader wants (RainstormRoutes.Resize) for its machine to record as
// an epoch. Every message involved is idempotent: a handover asked again
// is answered from the same durable state, and a resize the source already
// recorded (or cannot start yet) is refused by its machine and asked again
// with the next route answer.

// rsResize is a driver's resizing state.
type rsResize struct {
	// epochs is the pipeline's epochs from the open's answer; nil for a
	// pipeline that cannot resize (its machines then run without epochs).
	epochs []wire.RainstormEpoch
	// handovers carries answers to the task's machine; resize the sizes
	// the leader wants to the source's.
	handovers chan wire.RainstormHandover
	resize    chan []int

	mu    sync.Mutex
	wants map[wire.RainstormHandoverWant]bool // asked and not answered
}

func newRSResize() rsResize {
	return rsResize{handovers: make(chan wire.RainstormHandover, 64), resize: make(chan []int, 1)}
}

// machineEpochs is the epoch list a machine of spec starts with: nil for a
// pipeline that cannot resize (static machines, as before resizing
// existed), else the leader's list, or the start's sizes from a leader that
// sent none.
func (r *rsResize) machineEpochs(spec *rainstorm.Spec, fromLeader []wire.RainstormEpoch) []wire.RainstormEpoch {
	if !spec.Resizable() {
		return nil
	}
	if len(fromLeader) > 0 {
		return fromLeader
	}
	return rainstorm.SpecStartEpochs(spec)
}

// want records a machine's handover requests; the next route request
// carries them.
func (r *rsResize) want(hs []rainstorm.HandoverWant) bool {
	if len(hs) == 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.wants == nil {
		r.wants = map[wire.RainstormHandoverWant]bool{}
	}
	for _, h := range hs {
		r.wants[wire.RainstormHandoverWant{Stage: h.Task.Stage, Index: h.Task.Index, Epoch: h.Epoch}] = true
	}
	return true
}

// pending lists the requests not answered yet, in a stable order.
func (r *rsResize) pending() []wire.RainstormHandoverWant {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]wire.RainstormHandoverWant, 0, len(r.wants))
	for h := range r.wants {
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b wire.RainstormHandoverWant) int {
		if a.Epoch != b.Epoch {
			return int(a.Epoch) - int(b.Epoch)
		}
		return a.Index - b.Index
	})
	return out
}

// answered takes a route answer's handovers and wanted sizes: each
// handover asked for goes to the machine once; the sizes go to a source's.
func (r *rsResize) answered(source bool, rr *wire.RainstormRoutes) {
	for _, h := range rr.Handovers {
		k := wire.RainstormHandoverWant{Stage: h.Stage, Index: h.Index, Epoch: h.Epoch}
		r.mu.Lock()
		asked := r.wants[k]
		delete(r.wants, k)
		r.mu.Unlock()
		if !asked {
			continue
		}
		select {
		case r.handovers <- h:
		default:
			// Full (cannot be, with one request per old owner): the
			// machine asks again.
		}
	}
	if source && len(rr.Resize) > 0 {
		select {
		case <-r.resize: // an older wish gives way to the newest
		default:
		}
		select {
		case r.resize <- slices.Clone(rr.Resize):
		default:
		}
	}
}

// handover gives the machine an answer.
func handover(m *rainstorm.TaskMachine, task wire.RainstormTask, h wire.RainstormHandover) {
	m.Handover(wire.RainstormTask{Job: task.Job, Workflow: task.Workflow, Stage: h.Stage, Index: h.Index}, h.Epoch, h.Groups)
}
