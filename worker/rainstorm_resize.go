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
	wants map[rsWantKey]*rsPaging // asked and not answered whole
}

// rsWantKey names one handover a machine asked for: the old owner and the
// epoch it closed.
type rsWantKey struct {
	stage, index int
	epoch        uint64
}

// rsPaging is a handover being fetched in pages: where the next page
// starts, and the groups of the pages so far.
type rsPaging struct {
	fromGroup, fromEntry int
	groups               []wire.RainstormGroupState
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
		r.wants = map[rsWantKey]*rsPaging{}
	}
	for _, h := range hs {
		if k := (rsWantKey{h.Task.Stage, h.Task.Index, h.Epoch}); r.wants[k] == nil {
			r.wants[k] = &rsPaging{} // asked again: carry on from the page reached
		}
	}
	return true
}

// pending lists the requests not answered yet, in a stable order.
func (r *rsResize) pending() []wire.RainstormHandoverWant {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]wire.RainstormHandoverWant, 0, len(r.wants))
	for k, p := range r.wants {
		out = append(out, wire.RainstormHandoverWant{Stage: k.stage, Index: k.index, Epoch: k.epoch, FromGroup: p.fromGroup, FromEntry: p.fromEntry})
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
// handover asked for goes to the machine once, whole (its pages
// gathered); the sizes go to a source's. It reports whether a handover
// has more pages to fetch.
func (r *rsResize) answered(source bool, rr *wire.RainstormRoutes) (more bool) {
	for _, h := range rr.Handovers {
		whole, ok := r.page(h)
		if !ok {
			more = more || h.More
			continue
		}
		h.Groups = whole
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
	return more
}

// page takes one page of a handover: a page of one asked for, at the
// position reached (a page answered twice, or one nobody asked for, is
// dropped). It returns the handover's groups once the last page is in.
func (r *rsResize) page(h wire.RainstormHandover) ([]wire.RainstormGroupState, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := rsWantKey{h.Stage, h.Index, h.Epoch}
	p := r.wants[k]
	if p == nil || h.FromGroup != p.fromGroup || h.FromEntry != p.fromEntry {
		return nil, false
	}
	for _, g := range h.Groups {
		if n := len(p.groups); n > 0 && p.groups[n-1].Group == g.Group {
			// A group cut between two pages continues.
			p.groups[n-1].Entries = append(p.groups[n-1].Entries, g.Entries...)
			continue
		}
		p.groups = append(p.groups, g)
	}
	if h.More {
		p.fromGroup, p.fromEntry = h.NextGroup, h.NextEntry
		return nil, false
	}
	delete(r.wants, k)
	return p.groups, true
}

// handover gives the machine an answer.
func handover(m *rainstorm.TaskMachine, task wire.RainstormTask, h wire.RainstormHandover) {
	m.Handover(wire.RainstormTask{Job: task.Job, Workflow: task.Workflow, Stage: h.Stage, Index: h.Index}, h.Epoch, h.Groups)
}
