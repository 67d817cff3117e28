package rainstorm

import (
	"fmt"
	"maps"
	"slices"

	"tempest/wire"
)

// HandoverWant asks the driver for the key groups task Task handed over
// when it closed epoch Epoch: HandoverOf the task's stored state answers
// it, and the answer goes to TaskMachine.Handover. The closing checkpoint
// may not be durable yet: the driver answers once it is, and the machine
// asks again every ResendTicks until then.
type HandoverWant struct {
	Task  wire.RainstormTask
	Epoch uint64
}

// maxFuture bounds the batches of the next epoch a task holds while it
// closes its epoch; past it, they are dropped and resent.
const maxFuture = 4096

// taskEpochs is a stage task's side of resizing.
//
// A task in epoch e processes e's channels. When every input has ended
// with the epoch marker (EOS carrying the next epoch), it cuts its closing
// checkpoint: each output closed with a marker of its own, the key groups
// it owns in e but not in e+1 given away whole in the checkpoint's
// Handover (and dropped from memory), and Retired with Done when the task
// does not exist in e+1. Once that checkpoint is durable and every output
// batch of e is acknowledged, the task enters e+1: fresh channels of e+1's
// task counts, output routed by e+1's tables; it then waits for the
// handovers of the groups it gains from their owners in e, adopts them and
// only then processes e+1's input. A task born in a later epoch (a new
// task of a grown stage, or a retired one that comes back) starts there,
// waiting for its handovers the same way.
type taskEpochs struct {
	tabs *Tables
	// static: the driver gave no epochs (an old-style config); the task
	// then cannot resize and keeps every group it restores.
	static bool
	cur    int
	next   *wire.RainstormEpoch // the marker, once an input carried it
	closed bool                 // the closing checkpoint is durable
	// drained: a durable closing checkpoint has every output batch of
	// the epoch acknowledged, so the store holds none of them any more
	// (a later epoch's checkpoint could not drop them: its channels have
	// other numbers).
	drained  bool
	draining bool          // the checkpoint being cut is the drained one
	entering bool          // in cur, waiting for handovers before processing
	need     map[int][]int // old owner → the groups it hands this task
	gained   []wire.RainstormGroupState
	askedAt  int
	future   map[[3]uint64]*wire.RainstormBatch // (epoch, from, seq) of a later epoch
	outTable GroupTable
}

// exists reports whether the task exists in epoch ep.
func (e *taskEpochs) exists(m *TaskMachine, ep int) bool {
	return m.cfg.Task.Index < e.tabs.Tasks(ep, m.cfg.Task.Stage)
}

// counts returns the task's input and output channel counts in epoch ep.
func (e *taskEpochs) counts(m *TaskMachine, ep int) (in, out int) {
	st := m.cfg.Task.Stage
	in = e.tabs.Tasks(ep, st-1)
	if st == 1 && e.static {
		in = max(m.cfg.Upstream, 1) // a split source's ranges
	}
	if st < len(e.tabs.Epoch(ep).Tasks) {
		out = e.tabs.Tasks(ep, st+1)
	}
	return in, out
}

// open builds the epoch list: the checkpoint's and the driver's, whichever
// is longer (both are prefixes of the pipeline's one list), and returns
// the epoch the task starts in.
func (e *taskEpochs) open(m *TaskMachine, c *wire.RainstormCheckpoint) error {
	epochs := m.cfg.Epochs
	if c != nil && len(c.Epochs) > len(epochs) {
		epochs = c.Epochs
	}
	if len(epochs) == 0 {
		// No epochs given: one epoch shaped by Upstream and Downstream.
		st := m.cfg.Task.Stage
		tasks := make([]int, st)
		for i := range tasks {
			tasks[i] = 1
		}
		if st >= 2 {
			tasks[st-2] = m.cfg.Upstream
		}
		tasks[st-1] = KeyGroups // every group is "owned"; nothing moves
		if m.cfg.Downstream > 0 {
			tasks = append(tasks, m.cfg.Downstream)
		}
		epochs = []wire.RainstormEpoch{{Tasks: tasks}}
		e.static = true
	}
	tabs, err := NewTables(epochs)
	if err != nil {
		return fmt.Errorf("rainstorm task %d.%d: %w", m.cfg.Task.Stage, m.cfg.Task.Index, err)
	}
	e.tabs = tabs
	if n := len(tabs.Epoch(0).Tasks); m.cfg.Task.Stage < 1 || m.cfg.Task.Stage > n || (m.cfg.Task.Stage < n) != (m.cfg.Next != nil) {
		return fmt.Errorf("rainstorm task %d.%d: the epochs have %d stages, and the next stage is set: %v", m.cfg.Task.Stage, m.cfg.Task.Index, n, m.cfg.Next != nil)
	}
	return nil
}

// startEpoch is the epoch a task with no usable checkpoint starts in:
// the first, from epoch from on, in which it exists.
func (e *taskEpochs) startEpoch(m *TaskMachine, from int) (int, bool) {
	for ep := from; ep < e.tabs.Len(); ep++ {
		if e.exists(m, ep) {
			return ep, true
		}
	}
	return 0, false
}

func (e *taskEpochs) setOutTable(m *TaskMachine) {
	if m.cfg.Next != nil {
		e.outTable = e.tabs.Table(e.cur, m.cfg.Task.Stage+1)
	}
}

// owns reports whether the task owns group g in epoch ep.
func (e *taskEpochs) owns(m *TaskMachine, ep, g int) bool {
	return e.static || e.tabs.Table(ep, m.cfg.Task.Stage)[g] == m.cfg.Task.Index
}

// sawMarker takes an input's epoch marker.
func (e *taskEpochs) sawMarker(m *TaskMachine, next *wire.RainstormEpoch) {
	if e.static {
		m.fail(fmt.Errorf("rainstorm task %d.%d: an epoch marker reached a task that cannot resize", m.cfg.Task.Stage, m.cfg.Task.Index))
		return
	}
	if e.tabs.Len() == e.cur+1 {
		if err := e.tabs.Add(*next); err != nil {
			m.fail(fmt.Errorf("rainstorm task %d.%d: %w", m.cfg.Task.Stage, m.cfg.Task.Index, err))
			return
		}
	}
	ne := e.tabs.Epoch(e.cur + 1)
	e.next = &ne
}

// close fills in the closing checkpoint c, whose delta is cut: the
// groups the task gives away leave its memory (the store keeps their
// final state), and the task retires if it does not exist next epoch.
func (e *taskEpochs) close(m *TaskMachine, c *wire.RainstormCheckpoint) {
	c.Closing = true
	if m.agg != nil {
		m.agg.Keep(func(g int) bool { return e.owns(m, e.cur+1, g) })
	}
	if !e.exists(m, e.cur+1) {
		c.Retired = true
		// The retired task's part ends once drained; a sink's closing
		// checkpoint is drained already (it has no outputs).
		c.Done = e.draining || len(m.out) == 0
	}
}

// wantHandovers lists, for entering epoch cur, the old owners of the
// groups the task gains.
func (e *taskEpochs) wantHandovers(m *TaskMachine) {
	e.need, e.gained = nil, nil
	if m.agg == nil || e.cur == 0 {
		return
	}
	for g := range KeyGroups {
		if e.owns(m, e.cur, g) && !e.owns(m, e.cur-1, g) {
			o := e.tabs.Table(e.cur-1, m.cfg.Task.Stage)[g]
			if e.need == nil {
				e.need = map[int][]int{}
			}
			e.need[o] = append(e.need[o], g)
		}
	}
	e.ask(m)
}

func (e *taskEpochs) ask(m *TaskMachine) {
	e.askedAt = m.tick
	for _, o := range slices.Sorted(maps.Keys(e.need)) {
		m.ready.Handovers = append(m.ready.Handovers, HandoverWant{
			Task: wire.RainstormTask{Workflow: m.cfg.Task.Workflow, Stage: m.cfg.Task.Stage, Index: o}, Epoch: uint64(e.cur - 1)})
	}
}

// enter switches the task's channels to epoch ep (fresh, numbered from 1)
// and waits for the groups it gains there.
func (e *taskEpochs) enter(m *TaskMachine, ep int) {
	e.cur, e.next, e.closed, e.drained = ep, nil, false, false
	in, out := e.counts(m, ep)
	m.in, m.out = make([]inChan, in), make([]outChan, out)
	for i := range m.in {
		m.in[i] = inChan{next: 1, durableNext: 1, ackedNext: 1}
	}
	for i := range m.out {
		m.out[i] = outChan{next: 1, base: 1}
	}
	m.final = false
	e.setOutTable(m)
	e.entering = true
	e.wantHandovers(m)
	m.ackInputs(true)
	e.tryAdopt(m)
}

// tryAdopt takes the gained groups once every handover is in, and lets
// the held input through.
func (e *taskEpochs) tryAdopt(m *TaskMachine) {
	if !e.entering || len(e.need) > 0 {
		return
	}
	if m.agg != nil && len(e.gained) > 0 {
		if err := m.agg.Adopt(e.gained); err != nil {
			m.fail(err)
			return
		}
	}
	e.entering, e.gained = false, nil
	m.dirty = true // the next checkpoint records the epoch and the gained groups
	e.replay(m)
}

// replay hands the held batches of the current epoch to Batch in order.
func (e *taskEpochs) replay(m *TaskMachine) {
	var bs []*wire.RainstormBatch
	for k, b := range e.future {
		if k[0] == uint64(e.cur) {
			bs = append(bs, b)
			delete(e.future, k)
		}
	}
	slices.SortFunc(bs, func(a, b *wire.RainstormBatch) int {
		if a.From.Index != b.From.Index {
			return a.From.Index - b.From.Index
		}
		return int(a.Seq) - int(b.Seq)
	})
	for _, b := range bs {
		m.Batch(b)
	}
}

// hold keeps a batch of a later epoch (or of this one while entering)
// until the task gets there.
func (e *taskEpochs) hold(b *wire.RainstormBatch) {
	if e.future == nil {
		e.future = map[[3]uint64]*wire.RainstormBatch{}
	}
	if len(e.future) < maxFuture {
		e.future[[3]uint64{b.Epoch, uint64(b.From.Index), b.Seq}] = b
	}
}

// batch sorts a batch by epoch; it reports whether Batch should go on
// with it.
func (e *taskEpochs) batch(m *TaskMachine, b *wire.RainstormBatch) bool {
	switch {
	case b.Epoch < uint64(e.cur):
		// The whole epoch is durable here (the task entered a later one
		// only after its closing checkpoint was): the sender missed acks.
		m.ready.Acks = append(m.ready.Acks, &wire.RainstormBatchAck{
			From: m.cfg.Task, To: b.From.Index, Incarnation: m.cfg.Incarnation, UpTo: b.Seq, Epoch: b.Epoch, Sender: b.Incarnation})
		return false
	case b.Epoch == uint64(e.cur)+1 || (b.Epoch == uint64(e.cur) && e.entering):
		e.hold(b)
		return false
	case b.Epoch > uint64(e.cur):
		return false
	}
	return true
}

// tick moves a closed task into its next epoch once its outputs are all
// acknowledged, and asks again for handovers that have not come.
func (e *taskEpochs) tick(m *TaskMachine) {
	if e.closed && !m.done {
		for i := range m.out {
			o := &m.out[i]
			// At-least-once sends before durable, so a receiver can
			// acknowledge a batch number before a restarted sender cuts
			// it again: such a batch is acknowledged already.
			for len(o.pending) > 0 && o.pending[0].Seq <= o.acked {
				o.pending = o.pending[1:]
			}
			if len(o.pending) > 0 {
				return
			}
		}
		if e.drained {
			if e.exists(m, e.cur+1) {
				e.enter(m, e.cur+1)
			}
		} else if m.inflight == nil {
			e.draining = true
			m.cut(true)
			e.draining = false
		}
		return
	}
	if e.entering && len(e.need) > 0 && m.tick-e.askedAt >= m.cfg.ResendTicks {
		e.ask(m)
	}
}

// closedDurable takes the answer to a durable closing checkpoint c.
func (e *taskEpochs) closedDurable(m *TaskMachine, c *wire.RainstormCheckpoint) {
	e.closed = true
	e.drained = allAcked(c.Outputs)
	e.tick(m)
}

// allAcked reports whether every output's batches are acknowledged. An
// acknowledgement may run past Next (a Done receiver acknowledges its whole
// channel with the largest number), so Acked is never added to.
func allAcked(outs []wire.RainstormOutput) bool {
	for _, o := range outs {
		if o.Next > 0 && o.Acked < o.Next-1 {
			return false
		}
	}
	return true
}

// Handover delivers the groups task from handed over when it closed epoch
// epoch (what HandoverWant asked for).
func (m *TaskMachine) Handover(from wire.RainstormTask, epoch uint64, groups []wire.RainstormGroupState) {
	e := &m.ep
	if m.stopped || !e.entering || epoch+1 != uint64(e.cur) || from.Stage != m.cfg.Task.Stage {
		return
	}
	want, ok := e.need[from.Index]
	if !ok {
		return
	}
	for _, gs := range groups {
		if slices.Contains(want, gs.Group) {
			e.gained = append(e.gained, gs)
		}
	}
	delete(e.need, from.Index)
	e.tryAdopt(m)
}

// Epoch returns the epoch the task runs in.
func (m *TaskMachine) Epoch() int { return m.ep.cur }

// Adopt adds handed-over groups, each whole, as changed: the next
// checkpoint carries every entry, so the store's state for them is the
// handover's whatever it held of them from an earlier epoch (a group's
// keys only ever grow, so the handover names every key it held).
func (a *Aggregate) Adopt(groups []wire.RainstormGroupState) error {
	for _, gs := range groups {
		for _, e := range gs.Entries {
			v, g := a.value(e.Key)
			if g != gs.Group {
				return fmt.Errorf("adopt: key %q is in group %d, not %d", truncate(e.Key, 40), g, gs.Group)
			}
			*v = aggValue{count: e.Count}
			if a.cs.Op == OpSum {
				if err := v.add(e.Sum); err != nil {
					return fmt.Errorf("adopt sum of %q: %w", e.Key, err)
				}
			}
			a.touch(e.Key, v, g)
		}
	}
	return nil
}

// Keep drops the groups owned reports false for: a restored task's state
// holds, from the store, groups it gave away in earlier epochs.
func (a *Aggregate) Keep(owned func(g int) bool) {
	for g := range KeyGroups {
		if a.groups[g] != nil && !owned(g) {
			a.groups[g], a.changed[g] = nil, nil
		}
	}
}

// HandoverOf returns the key groups a task's durable state c hands over
// for closing epoch epoch, and whether c is at or past that closing
// checkpoint (else the handover is not durable yet). The groups are all of
// c's: the new owner takes the ones it gains. Past the closing checkpoint
// the given groups are unchanged, since their old owner does not touch
// them again until a later epoch gives them back, and that happens only
// after every new owner took them.
func HandoverOf(c *wire.RainstormCheckpoint, epoch uint64) ([]wire.RainstormGroupState, bool) {
	if c == nil || c.Epoch < epoch || (c.Epoch == epoch && !c.Closing) {
		return nil, false
	}
	return c.Groups, true
}
