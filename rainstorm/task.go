package rainstorm

import (
	"errors"
	"fmt"
	"slices"

	"tempest/rainstorm/ckpt"
	"tempest/wire"
)

// Machine defaults, in ticks of the driver's clock (the runtime's tick is
// tens of milliseconds) and records.
const (
	DefaultCheckpointTicks = 2
	DefaultResendTicks     = 10
	DefaultMaxPending      = 64
	DefaultBatchRecords    = 4096
	// DefaultFlushRows keeps one checkpoint's share of an aggregate's
	// final output near a megabyte, far under the transport's message cap.
	DefaultFlushRows = 32 << 10
	// MaxDeltaBytes bounds what one checkpoint carries beyond positions
	// (changed state, new rows, new output batches): about a fifth of the
	// transport's message cap.
	MaxDeltaBytes = 2 << 20
	maxReorder    = 256
)

// Ready is what a machine asks its driver to do, collected since the last
// call to Ready: send Batches downstream (each to Batch.To) and Acks
// upstream (each to Ack.To), write Checkpoint to the store (at most one is
// outstanding). Failed ends the task with an error that fails the
// pipeline; Fenced says a newer incarnation replaced this one (stop
// quietly); Done says the task's final checkpoint is durable.
type Ready struct {
	Batches    []*wire.RainstormBatch
	Acks       []*wire.RainstormBatchAck
	Checkpoint *wire.RainstormCheckpoint
	Failed     error
	Fenced     bool
	Done       bool
	// Handovers asks for the key groups other tasks handed this one at a
	// resize (TaskMachine.Handover answers).
	Handovers []HandoverWant
}

// ErrFenced is Failed's cause when the store refused a checkpoint because
// a newer incarnation of the task exists.
var ErrFenced = errors.New("replaced by a newer incarnation")

// TaskConfig configures a stage task's machine.
type TaskConfig struct {
	Task        wire.RainstormTask // Stage >= 1
	Incarnation uint64
	Upstream    int            // tasks of the stage before (for the first stage, the source's ranges)
	Downstream  int            // tasks of the stage after; 0 for a sink
	Stage       *CompiledStage // this stage
	Next        *CompiledStage // the stage after (routes outputs); nil for a sink
	// Transform runs a record stage (filter, project, replace, exec);
	// aggregates (count, sum) get their state from Stage.
	Transform Transform
	// AtLeastOnce: no de-duplication, outputs sent before they are
	// durable. For comparison only.
	AtLeastOnce     bool
	FailOnBadRecord bool
	CheckpointTicks int // cut a checkpoint at most this often
	ResendTicks     int // resend unacknowledged batches after this long without progress
	MaxPending      int // unacknowledged batches per output channel before input waits
	BatchRecords    int // records per output batch at most
	// FlushRows bounds the final values an aggregate emits per
	// checkpoint once its inputs ended (whole key groups, at least one).
	FlushRows int
	// Epochs is the pipeline's resize epochs as the driver knows them
	// (at least epoch 0). With them, the channel counts come from the
	// task's epoch, not Upstream and Downstream; a task with no
	// checkpoint starts in the first epoch it exists in.
	Epochs []wire.RainstormEpoch
}

func (c *TaskConfig) defaults() {
	if c.CheckpointTicks <= 0 {
		c.CheckpointTicks = DefaultCheckpointTicks
	}
	if c.ResendTicks <= 0 {
		c.ResendTicks = DefaultResendTicks
	}
	if c.MaxPending <= 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.BatchRecords <= 0 {
		c.BatchRecords = DefaultBatchRecords
	}
	if c.FlushRows <= 0 {
		c.FlushRows = DefaultFlushRows
	}
}

type inChan struct {
	next        uint64 // next sequence number to process
	eos         bool
	inc         uint64
	durableNext uint64 // next as of the latest durable checkpoint
	ackedNext   uint64 // the durableNext last acknowledged upstream
	// procFrom: this incarnation processed batches [procFrom, next) as
	// the sender's incarnation inc sent them. At-least-once skips a
	// resend of one of those: the same batch, resent because the durable
	// ack was slower than the sender's timer.
	procFrom uint64
	// rewinds counts the times a restarted at-least-once sender took
	// numbers back (see Batch): a checkpoint cut before the latest one
	// names positions in numbers that no longer mean the same batches.
	rewinds int
	reorder map[uint64]*wire.RainstormBatch
}

type outChan struct {
	next    uint64 // next sequence number to assign
	acked   uint64
	durable uint64 // highest sequence number in a durable checkpoint
	eos     bool
	open    []Record
	pending []*wire.RainstormBatch // unacknowledged, in sequence order
	rt      resendTimer
	// base, under at-least-once, is the first number this incarnation
	// cut itself (wire.RainstormBatch.Base).
	base uint64
}

// TaskMachine is one stage task's exactly-once state machine. Inputs:
// Batch, Ack, CheckpointResult, Tick; outputs: Ready. It has no clock,
// goroutines or I/O of its own (a Transform may: exec talks to a program).
type TaskMachine struct {
	cfg  TaskConfig
	agg  *Aggregate
	in   []inChan
	out  []outChan
	rows []Record // a sink's output since the last cut
	// emitted estimates the encoded size of the rows and output records
	// since the last cut.
	emitted int
	bad     uint64
	// recIn and recOut count the records processed and emitted since the
	// task's first checkpoint; a cut carries them, a restart restores them.
	recIn, recOut uint64
	version       uint64 // latest durable version

	inflight    *wire.RainstormCheckpoint
	inflightPos []uint64 // input positions in inflight
	inflightRew []int    // per input, its rewinds when inflight was cut
	inflightSeq []uint64 // per output, the highest seq in inflight
	dirty       bool
	final       bool // the final checkpoint has been cut
	flushed     int  // key groups whose final values the aggregate has emitted
	done        bool
	stopped     bool

	tick     int
	lastCut  int
	deferred uint64
	scratch  []Record
	ready    Ready
	ep       taskEpochs
}

// NewTaskMachine starts a task from its latest durable checkpoint (nil for
// a fresh start). Its first Ready resends every batch the checkpoint holds
// and acknowledges its inputs, so a restart resumes at once.
func NewTaskMachine(cfg TaskConfig, ckpt *wire.RainstormCheckpoint) (*TaskMachine, error) {
	cfg.defaults()
	if cfg.Stage == nil || (len(cfg.Epochs) == 0 && (cfg.Upstream < 1 || (cfg.Downstream > 0) != (cfg.Next != nil))) {
		return nil, errors.New("rainstorm task: stage, upstream and next/downstream must be set")
	}
	m := &TaskMachine{cfg: cfg}
	if err := m.ep.open(m, ckpt); err != nil {
		return nil, err
	}
	start := 0
	if ckpt != nil {
		start = int(ckpt.Epoch)
	}
	born := ckpt == nil || (ckpt.Retired && ckpt.Done)
	if born {
		// A fresh task, or a retired one placed again: it starts in the
		// first epoch it exists in (after the one it retired from).
		from := 0
		if ckpt != nil {
			from = start + 1
		}
		ep, ok := m.ep.startEpoch(m, from)
		if ok {
			start = ep
		} else {
			born = ckpt == nil
		}
	}
	m.ep.cur = start
	in, out := m.ep.counts(m, start)
	m.in, m.out = make([]inChan, in), make([]outChan, out)
	m.ep.setOutTable(m)
	if cfg.Stage.Op.Aggregate() {
		a, err := cfg.Stage.NewAggregate()
		if err != nil {
			return nil, err
		}
		m.agg = a
	} else if cfg.Transform == nil {
		return nil, fmt.Errorf("rainstorm task: stage %s needs a transform", cfg.Stage.Name)
	}
	for i := range m.in {
		m.in[i] = inChan{next: 1, durableNext: 1, ackedNext: 1, procFrom: 1}
	}
	for i := range m.out {
		m.out[i] = outChan{next: 1, base: 1}
	}
	switch {
	case born && ckpt != nil:
		// Back after retiring: its chain of versions and counters go on,
		// its state starts empty (it gave every group away).
		m.version, m.bad, m.recIn, m.recOut = ckpt.Version, ckpt.BadRecords, ckpt.RecordsIn, ckpt.RecordsOut
		m.ep.enter(m, start)
	case born && start > 0:
		m.ep.enter(m, start)
	case ckpt != nil:
		if err := m.restore(ckpt); err != nil {
			return nil, err
		}
	default:
		m.ackInputs(true)
	}
	return m, nil
}

func (m *TaskMachine) restore(c *wire.RainstormCheckpoint) error {
	if len(c.Inputs) != len(m.in) || len(c.Outputs) != len(m.out) {
		return fmt.Errorf("rainstorm task %d.%d: checkpoint has %d inputs and %d outputs, want %d and %d",
			m.cfg.Task.Stage, m.cfg.Task.Index, len(c.Inputs), len(c.Outputs), len(m.in), len(m.out))
	}
	m.version = c.Version
	for i, p := range c.Inputs {
		m.in[i] = inChan{next: p.Next, eos: p.EOS, inc: p.Incarnation, durableNext: p.Next, procFrom: p.Next}
	}
	for i, o := range c.Outputs {
		m.out[i] = outChan{next: o.Next, acked: o.Acked, durable: o.Next - 1, eos: o.EOS, base: o.Next}
	}
	for i := range c.Pending {
		b := c.Pending[i] // a copy: the checkpoint stays the store's
		if b.To < 0 || b.To >= len(m.out) {
			return fmt.Errorf("rainstorm task %d.%d: checkpoint holds a batch for task %d of %d",
				m.cfg.Task.Stage, m.cfg.Task.Index, b.To, len(m.out))
		}
		b.Incarnation = m.cfg.Incarnation
		if m.cfg.AtLeastOnce {
			b.Base = m.out[b.To].base
		}
		// Encoded again under this incarnation: bytes a store kept from
		// the batch's first cut name the old one, which receivers refuse.
		b.Freeze()
		m.out[b.To].pending = append(m.out[b.To].pending, &b)
	}
	closing := c.Closing && !c.Done
	if m.agg != nil {
		if err := m.agg.Restore(c.Groups, c.State); err != nil {
			return err
		}
		owned := m.ep.cur
		if closing {
			owned++ // it gave away, in this checkpoint, what it does not own next
		}
		m.agg.Keep(func(g int) bool { return m.ep.owns(m, owned, g) })
		if c.Flushed < 0 || c.Flushed > KeyGroups {
			return fmt.Errorf("rainstorm task %d.%d: checkpoint flushed %d key groups of %d", m.cfg.Task.Stage, m.cfg.Task.Index, c.Flushed, KeyGroups)
		}
		m.flushed = c.Flushed
	}
	m.bad = c.BadRecords
	m.recIn, m.recOut = c.RecordsIn, c.RecordsOut
	m.final, m.done = c.Done || closing, c.Done
	if closing {
		ne := m.ep.tabs.Epoch(m.ep.cur + 1)
		m.ep.next, m.ep.closed, m.ep.drained = &ne, true, allAcked(c.Outputs)
	}
	// Resend what is pending now rather than after a timeout, and tell
	// upstream how far this task's durable state goes.
	for i := range m.out {
		m.send(i, m.out[i].pending)
	}
	m.ackInputs(true)
	if m.done {
		m.ready.Done = true
	}
	return nil
}

// Records returns the records the task has processed and emitted since its
// first checkpoint: what its next checkpoint will carry (its durable
// counts are those of its latest durable checkpoint).
func (m *TaskMachine) Records() (in, out uint64) { return m.recIn, m.recOut }

// Ready returns and clears what the machine wants done.
func (m *TaskMachine) Ready() Ready {
	r := m.ready
	m.ready = Ready{}
	return r
}

// Bad is how many records this task refused as malformed.
func (m *TaskMachine) Bad() uint64 { return m.bad }

// Deferred counts input batches left for a resend because outputs were
// backed up.
func (m *TaskMachine) Deferred() uint64 { return m.deferred }

// Batch delivers a batch from upstream task b.From.Index.
func (m *TaskMachine) Batch(b *wire.RainstormBatch) {
	if m.stopped || b.From.Stage != m.cfg.Task.Stage-1 || !m.ep.batch(m, b) {
		return
	}
	if m.stopped || m.final || b.From.Index < 0 || b.From.Index >= len(m.in) || b.From.Stage != m.cfg.Task.Stage-1 {
		if m.final && !m.stopped && b.From.Index >= 0 && b.From.Index < len(m.in) && m.in[b.From.Index].durableNext > 1 {
			ch := &m.in[b.From.Index]
			if m.cfg.AtLeastOnce && b.Incarnation > ch.inc && ch.eos && ch.durableNext == ch.next {
				// The predecessor's whole stream is durable here, so
				// everything its successor cuts again is in it: an ack
				// naming the successor, past whatever it numbered.
				m.ready.Acks = append(m.ready.Acks, &wire.RainstormBatchAck{From: m.cfg.Task, To: b.From.Index, Incarnation: m.cfg.Incarnation,
					UpTo: max(ch.durableNext-1, b.Seq), Epoch: uint64(m.ep.cur), Sender: b.Incarnation})
				return
			}
			m.ack(b.From.Index, ch.durableNext) // the sender missed an ack
		}
		return
	}
	ch := &m.in[b.From.Index]
	if b.Incarnation < ch.inc {
		return // from a replaced sender
	}
	if b.Incarnation > ch.inc {
		// A new sender incarnation may re-cut what the old one sent
		// before it was durable: nothing below here counts as seen.
		ch.procFrom = ch.next
		if m.cfg.AtLeastOnce && b.Base > 0 && b.Base < ch.next && !ch.eos {
			// From Base on, the new sender's batches are its own cut,
			// which may hold records the predecessor's batches of the same
			// numbers did not: take them all, from Base (over-counting what
			// both held, as at-least-once may). Counting the predecessor's
			// numbers as the new one's lost those records, and an end of
			// stream cut at a number already passed was taken before
			// the batches below it. The durable position goes back too:
			// an ack must not name the new sender's batches before they are
			// processed and durable here.
			ch.next, ch.procFrom = b.Base, b.Base
			ch.durableNext = min(ch.durableNext, b.Base)
			ch.ackedNext = min(ch.ackedNext, ch.durableNext)
			ch.rewinds++
		}
		if m.cfg.AtLeastOnce {
			// Nor do the old one's batches held for reordering: under
			// at-least-once a number names what one incarnation cut, not
			// one durable batch, so the new sender's batch of the same
			// number may hold other records or end the stream where the
			// held one did not. Taking the held one in its place lost
			// the new one's end of stream (and its epoch marker).
			ch.reorder = nil
		}
	}
	ch.inc = b.Incarnation
	switch {
	case b.Seq < ch.next:
		// A duplicate. If it is durable here, the sender resends because
		// the ack was lost: say it again.
		if b.Seq < ch.durableNext {
			m.ack(b.From.Index, ch.durableNext)
		}
		if !m.cfg.AtLeastOnce {
			return // its effect is already in this task's state
		}
		if b.Seq >= ch.procFrom {
			// Processed by this incarnation, from this very sender
			// incarnation (whose batch b.Seq never changes): a resend that
			// crossed the ack, not lost work. Taking it again over-counted
			// with no fault at all.
			return
		}
		// Beyond that at-least-once keeps no record of what it processed:
		// after a crash on either side, it processes again.
		if !m.backedUp() {
			m.process(b)
			m.dirty = true
			// A batch re-cut after a restart may end the stream where the
			// first one with this number did not, and then it carries the
			// epoch marker too: without it the task would take the end of
			// the epoch for the end of its part.
			if b.EOS && !ch.eos {
				ch.eos, ch.reorder = true, nil
				if b.Next != nil {
					m.ep.sawMarker(m, b.Next)
				}
			}
		}
		return
	case b.Seq > ch.next:
		if ch.reorder == nil {
			ch.reorder = map[uint64]*wire.RainstormBatch{}
		}
		if len(ch.reorder) < maxReorder {
			ch.reorder[b.Seq] = b
		}
		return
	}
	if ch.eos {
		return // nothing follows the end of a stream
	}
	for b != nil && !m.stopped {
		if m.backedUp() {
			m.deferred++
			return // not processed: the sender resends it
		}
		if m.deltaFull() {
			// Held until the next cut starts a new delta (drainHeld),
			// rather than left for the sender's resend timer.
			if ch.reorder == nil {
				ch.reorder = map[uint64]*wire.RainstormBatch{}
			}
			ch.reorder[ch.next] = b
			break
		}
		m.process(b)
		ch.next++
		if b.EOS {
			ch.eos = true
			ch.reorder = nil
			if b.Next != nil {
				m.ep.sawMarker(m, b.Next)
			}
			break
		}
		b = ch.reorder[ch.next]
		delete(ch.reorder, ch.next)
	}
	m.dirty = true
}

// backedUp reports whether any output channel holds MaxPending
// unacknowledged batches: input then waits, which bounds memory and the
// size of checkpoints.
func (m *TaskMachine) backedUp() bool {
	for i := range m.out {
		if len(m.out[i].pending) >= m.cfg.MaxPending {
			return true
		}
	}
	return false
}

// deltaFull reports whether what the next checkpoint carries (changed
// state, new rows and output records) has reached MaxDeltaBytes: input
// then waits for the cut, so one checkpoint stays far under a message
// however many distinct keys or records the inputs bring at once.
func (m *TaskMachine) deltaFull() bool {
	n := m.emitted
	if m.agg != nil {
		n += m.agg.DeltaBytes()
	}
	return n >= MaxDeltaBytes
}

func (m *TaskMachine) process(b *wire.RainstormBatch) {
	bad := func(err error) {
		m.bad++
		if m.cfg.FailOnBadRecord && m.ready.Failed == nil {
			m.fail(err)
		}
	}
	m.recIn += uint64(len(b.Records))
	if m.agg != nil {
		m.agg.Add(b.Records, bad)
		return
	}
	out, err := m.cfg.Transform.Apply(b.Records, m.scratch[:0], bad)
	if err != nil {
		m.fail(err)
		return
	}
	m.emit(out)
	clear(out)
	m.scratch = out[:0]
}

// emit routes records to the open batch of their downstream task, or to a
// sink's output.
func (m *TaskMachine) emit(recs []Record) {
	m.recOut += uint64(len(recs))
	for i := range recs {
		m.emitted += ckpt.RecordSize(&recs[i])
	}
	if m.cfg.Next == nil {
		m.rows = append(m.rows, recs...)
		return
	}
	for i := range recs {
		rec := m.cfg.Next.Narrow(recs[i]) // routed as the next stage reads it
		d := m.cfg.Next.RouteBy(&rec, m.ep.outTable)
		m.out[d].open = append(m.out[d].open, rec)
	}
}

func (m *TaskMachine) fail(err error) {
	m.stopped = true
	m.ready.Failed = err
}

// Ack delivers a downstream task's acknowledgement.
func (m *TaskMachine) Ack(a *wire.RainstormBatchAck) {
	if m.stopped || a.From.Index < 0 || a.From.Index >= len(m.out) || a.From.Stage != m.cfg.Task.Stage+1 || a.Epoch != uint64(m.ep.cur) {
		return
	}
	o := &m.out[a.From.Index]
	restarted := a.Incarnation != 0 && o.rt.receiverRestarted(a.Incarnation)
	// Under at-least-once an ack that names a predecessor's batches
	// says nothing of this incarnation's numbers from its base on.
	mine := !m.cfg.AtLeastOnce || a.Sender == 0 || a.Sender == m.cfg.Incarnation
	if mine && a.UpTo > o.acked {
		o.acked = a.UpTo
		k := 0
		for k < len(o.pending) && o.pending[k].Seq <= o.acked {
			k++
		}
		clear(o.pending[:k])
		o.pending = o.pending[k:]
		o.rt.acked(a.UpTo, m.tick)
		m.dirty = true
	}
	if restarted {
		// A replacement lost whatever its predecessor had not made
		// durable: give it everything now.
		m.send(a.From.Index, m.sendable(o))
	}
}

// Tick advances the machine's clock: it cuts a checkpoint when one is due
// and resends batches whose acknowledgement is overdue.
func (m *TaskMachine) Tick() {
	if m.stopped {
		return
	}
	m.tick++
	if m.inflight != nil && m.tick-m.lastCut >= m.cfg.ResendTicks {
		// The checkpoint or its answer was lost: the store takes a resend
		// of the same version as a no-op.
		m.ready.Checkpoint = m.inflight
		m.lastCut = m.tick
	}
	allEOS := true
	for i := range m.in {
		allEOS = allEOS && m.in[i].eos
	}
	// An aggregate emits its final values a few key groups per
	// checkpoint, each step once its outputs have room.
	flushWaits := allEOS && m.ep.next == nil && m.agg != nil && m.flushed < KeyGroups && m.backedUp()
	due := m.tick-m.lastCut >= m.cfg.CheckpointTicks || m.deltaFull()
	if m.inflight == nil && !m.final && !m.ep.entering && ((allEOS && !flushWaits) || (m.dirty && due)) {
		m.cut(allEOS)
	}
	m.ep.tick(m)
	for i := range m.out {
		o := &m.out[i]
		if len(o.pending) == 0 {
			continue
		}
		timeout := o.rt.timeout(m.cfg.ResendTicks)
		var due []*wire.RainstormBatch
		for _, b := range m.sendable(o) {
			if len(due) == resendBurst {
				break
			}
			if o.rt.due(b.Seq, m.tick, timeout) {
				due = append(due, b)
			}
		}
		if len(due) > 0 {
			m.send(i, due)
			o.rt.timedOut()
		}
	}
}

// Rerouted says downstream task to runs under a new incarnation (it was
// replaced and has opened): its unacknowledged batches go to it now rather
// than when the resend timer runs out. Only what a resend would send goes,
// so every batch sent is still the one durable batch of its number.
func (m *TaskMachine) Rerouted(to int) {
	if m.stopped || to < 0 || to >= len(m.out) {
		return
	}
	m.send(to, m.sendable(&m.out[to]))
}

// cut closes the open batches and asks for a checkpoint holding them.
func (m *TaskMachine) cut(final bool) {
	closing := final && m.ep.next != nil
	if final && m.agg != nil && !closing {
		if m.flushed < KeyGroups && !m.backedUp() {
			hi := m.agg.FlushEnd(m.flushed, m.cfg.FlushRows)
			m.emit(m.agg.GroupRows(m.flushed, hi))
			m.flushed = hi
		}
		final = m.flushed == KeyGroups
	}
	if final {
		m.final = true
	}
	c := &wire.RainstormCheckpoint{
		Task: m.cfg.Task, Incarnation: m.cfg.Incarnation, Version: m.version + 1,
		Inputs: make([]wire.RainstormInput, len(m.in)), Outputs: make([]wire.RainstormOutput, len(m.out)),
		BadRecords: m.bad, Done: final && !closing, RecordsIn: m.recIn, RecordsOut: m.recOut, Flushed: m.flushed,
	}
	m.inflightPos, m.inflightRew = m.inflightPos[:0], m.inflightRew[:0]
	for i := range m.in {
		ch := &m.in[i]
		c.Inputs[i] = wire.RainstormInput{From: i, Next: ch.next, EOS: ch.eos, Incarnation: ch.inc}
		m.inflightPos = append(m.inflightPos, ch.next)
		m.inflightRew = append(m.inflightRew, ch.rewinds)
	}
	m.inflightSeq = m.inflightSeq[:0]
	for i := range m.out {
		o := &m.out[i]
		first := len(o.pending)
		for len(o.open) > 0 || (final && !o.eos) {
			n := min(len(o.open), m.cfg.BatchRecords)
			b := &wire.RainstormBatch{From: m.cfg.Task, To: i, Incarnation: m.cfg.Incarnation, Seq: o.next, Records: o.open[:n:n], Epoch: uint64(m.ep.cur)}
			if m.cfg.AtLeastOnce {
				b.Base = o.base
			}
			o.open = o.open[n:]
			o.next++
			if final && len(o.open) == 0 {
				b.EOS, o.eos = true, true
				b.Next = m.ep.next
			}
			// Encoded once, here: the checkpoint below and every send
			// and resend after it carry these bytes.
			b.Freeze()
			o.pending = append(o.pending, b)
		}
		o.open = nil
		c.Outputs[i] = wire.RainstormOutput{To: i, Next: o.next, Acked: o.acked, EOS: o.eos}
		// Only the batches cut now: the store keeps earlier ones until the
		// acknowledged positions in Outputs drop them, so each batch is
		// written once however long its acknowledgement takes.
		c.Pending = append(c.Pending, derefBatches(o.pending[first:])...)
		m.inflightSeq = append(m.inflightSeq, o.next-1)
		if m.cfg.AtLeastOnce {
			m.send(i, o.pending[first:])
		}
	}
	if m.agg != nil {
		c.Groups = m.agg.Delta()
	}
	if closing {
		m.ep.close(m, c) // after the delta, which makes the given groups' state final in the store
	}
	if !m.ep.static {
		c.Epoch, c.Epochs = uint64(m.ep.cur), slices.Clone(m.ep.tabs.Epochs())
	}
	c.Rows, m.rows = m.rows, nil
	m.emitted = 0
	m.inflight = c
	m.dirty = false
	m.lastCut = m.tick
	m.ready.Checkpoint = c
	m.drainHeld()
}

// drainHeld processes the batches Batch held while the delta was full,
// now that a cut started a new one.
func (m *TaskMachine) drainHeld() {
	for i := range m.in {
		ch := &m.in[i]
		if b := ch.reorder[ch.next]; b != nil && !ch.eos {
			delete(ch.reorder, ch.next)
			m.Batch(b)
		}
	}
}

func derefBatches(bs []*wire.RainstormBatch) []wire.RainstormBatch {
	out := make([]wire.RainstormBatch, len(bs))
	for i, b := range bs {
		out[i] = *b
	}
	return out
}

// CheckpointResult delivers the store's answer to a checkpoint.
func (m *TaskMachine) CheckpointResult(a *wire.RainstormCheckpointAck) {
	c := m.inflight
	if m.stopped || c == nil || a.Version != c.Version || a.Incarnation != c.Incarnation {
		return // an answer to an older checkpoint, resent
	}
	if a.Refused {
		m.stopped = true
		if a.Current > m.cfg.Incarnation {
			m.ready.Fenced = true
			return
		}
		m.ready.Failed = fmt.Errorf("checkpoint %d of task %d.%d refused: %s", c.Version, m.cfg.Task.Stage, m.cfg.Task.Index, a.Reason)
		return
	}
	m.inflight = nil
	m.version = c.Version
	for i := range m.out {
		o := &m.out[i]
		seq := m.inflightSeq[i]
		if seq > o.durable {
			if !m.cfg.AtLeastOnce {
				// Durable now, so any resend will be these same bytes.
				var fresh []*wire.RainstormBatch
				for _, b := range o.pending {
					if b.Seq > o.durable && b.Seq <= seq {
						fresh = append(fresh, b)
					}
				}
				m.send(i, fresh)
			}
			o.durable = seq
		}
	}
	for i := range m.in {
		if m.in[i].rewinds == m.inflightRew[i] {
			m.in[i].durableNext = m.inflightPos[i]
		}
	}
	m.ackInputs(false)
	if c.Done {
		m.done = true
		m.ready.Done = true
	} else if c.Closing {
		m.ep.closedDurable(m, c)
	}
}

// sendable is the prefix of o's pending batches that may leave: in
// exactly-once mode only those in a durable checkpoint, so that whatever
// incarnation sends a batch, it sends the same records.
func (m *TaskMachine) sendable(o *outChan) []*wire.RainstormBatch {
	if m.cfg.AtLeastOnce {
		return o.pending
	}
	k := 0
	for k < len(o.pending) && o.pending[k].Seq <= o.durable {
		k++
	}
	return o.pending[:k]
}

func (m *TaskMachine) send(i int, bs []*wire.RainstormBatch) {
	if len(bs) == 0 {
		return
	}
	m.ready.Batches = append(m.ready.Batches, bs...)
	for _, b := range bs {
		m.out[i].rt.sentNow(b.Seq, m.tick)
	}
}

// ackInputs tells each upstream task how far this task's durable state
// covers its channel (only where that moved, unless all).
//
// all is a start: every upstream task hears from this incarnation, even
// with nothing durable yet (an ack up to 0), so a sender learns that its
// receiver was replaced and resends at once (see resend.go).
func (m *TaskMachine) ackInputs(all bool) {
	for i := range m.in {
		ch := &m.in[i]
		if all || (ch.durableNext > 1 && ch.durableNext > ch.ackedNext) {
			m.ack(i, ch.durableNext)
		}
	}
}

func (m *TaskMachine) ack(i int, durableNext uint64) {
	m.in[i].ackedNext = max(m.in[i].ackedNext, durableNext)
	m.ready.Acks = append(m.ready.Acks, &wire.RainstormBatchAck{
		From: m.cfg.Task, To: i, Incarnation: m.cfg.Incarnation, UpTo: durableNext - 1, Epoch: uint64(m.ep.cur), Sender: m.in[i].inc,
	})
}

// Finished reports whether the task has nothing left to do: its final
// checkpoint is durable and downstream has acknowledged every batch.
func (m *TaskMachine) Finished() bool {
	if !m.done {
		return false
	}
	for i := range m.out {
		if len(m.out[i].pending) > 0 {
			return false
		}
	}
	return true
}
