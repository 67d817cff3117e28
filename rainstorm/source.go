package rainstorm

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"tempest/wire"
)

// Source defaults.
const (
	// DefaultSegmentRecords is the records per source segment. Segments
	// are cut by input id (segment j holds ids [j*n, (j+1)*n)), so a
	// restarted source cuts the same ones and regenerates batches
	// identical to those it sent.
	DefaultSegmentRecords = 1024
	// DefaultWindow is the unacknowledged segments a source keeps. A
	// segment is acknowledged one checkpoint of the first stage after it
	// was sent (a group commit on a majority of managers, a few hundred
	// milliseconds on a loaded machine), so the window bounds the rate:
	// 128 × 1024 records per ack delay. 32 capped it near 64k records/s.
	DefaultWindow = 128
	maxBadFirst   = 10
)

// RecordSource is what a source reads: a *Reader or a *Generator.
type RecordSource interface {
	Next() (Record, error)
	Pos() Position
}

// Segment is one run of input records: ids [Index*n, (Index+1)*n) of
// SegmentRecords n, fewer only at the end of input (EOF).
type Segment struct {
	Index   uint64
	Start   Position // before the segment's first record
	End     Position // after its last
	Records []Record
	Bad     []uint64 // ids of malformed records in the segment
	EOF     bool
	// Chained: Records went through the source's chain as they were read
	// (ReadChainedSegment); Refused are the ids its operators refused, the
	// first for RefusedErr.
	Chained    bool
	Refused    []uint64
	RefusedErr error
}

// ReadSegment reads segment index from src, which must stand at its first
// record, with n records per segment. A malformed record still takes its
// id, so segments do not depend on what could be parsed.
func ReadSegment(src RecordSource, index uint64, n int) (Segment, error) {
	// Sized for a whole segment at once: grown record by record it was
	// eleven allocations and copies of the records a segment.
	seg := Segment{Index: index, Start: src.Pos(), Records: make([]Record, 0, n)}
	end := (index + 1) * uint64(n)
	// One for the segment: errors.As takes its address, which puts it on
	// the heap, and declared in the loop that was an allocation a record.
	var bad *BadRecordError
	for src.Pos().Record < end {
		rec, err := src.Next()
		switch {
		case err == nil:
			seg.Records = append(seg.Records, rec)
		case errors.Is(err, io.EOF):
			seg.EOF = true
			seg.End = src.Pos()
			return seg, nil
		case errors.As(err, &bad):
			seg.Bad = append(seg.Bad, bad.Record)
		default:
			return seg, err
		}
	}
	seg.End = src.Pos()
	return seg, nil
}

// Generator makes a generate source's records: record i has the fields
// id (i), key ("k" + i mod keys) and value (a number from i), the same on
// every read, so it can resume anywhere.
type Generator struct {
	records, keys uint64
	next          uint64
}

// NewGenerator starts a generator at record index from.
func NewGenerator(g *Generate, from uint64) *Generator {
	return &Generator{records: uint64(g.Records), keys: uint64(max(g.Keys, 1)), next: from}
}

// Next implements RecordSource.
func (g *Generator) Next() (Record, error) {
	if g.next >= g.records {
		return Record{}, io.EOF
	}
	i := g.next
	g.next++
	return Record{ID: i, Fields: []string{
		strconv.FormatUint(i, 10),
		"k" + strconv.FormatUint(i%g.keys, 10),
		strconv.FormatUint(mix64(i)%1000, 10),
	}}, nil
}

// Pos implements RecordSource.
func (g *Generator) Pos() Position { return Position{Record: g.next} }

// SourceConfig configures the source task's machine.
type SourceConfig struct {
	Task        wire.RainstormTask // Stage 0
	Incarnation uint64
	Downstream  int
	Next        *CompiledStage // the first stage (routes records)
	// Chain runs the stages chained into the source, and the first
	// stage's combiner, on every segment before it is routed (nil: none;
	// Pipeline.NewChain).
	Chain           *Chain
	FailOnBadRecord bool
	SegmentRecords  int
	Window          int
	CheckpointTicks int
	ResendTicks     int
	// File identifies a `path:` source's input as opened now. A fresh
	// source checkpoints it before it reads a record; a resumed one must
	// have been handed a checkpoint recording the same file (the driver
	// checks, SameFile).
	File *wire.RainstormFileID
	// Range is the part of a split input this source reads (nil: all of
	// it). Its segments are those of the whole input's grid (ids
	// [j·n, (j+1)·n)) that its records fall in, the first and last
	// possibly partial, numbered on its channels from 1; a split source
	// cannot resize (no Epochs).
	Range *Range
	// Epochs is the pipeline's resize epochs as the driver knows them
	// (at least epoch 0, the stages' task counts at submit); nil means one
	// epoch of Downstream first-stage tasks, which cannot resize. A
	// checkpoint's own list wins over it.
	Epochs []wire.RainstormEpoch
}

type sourceSeg struct {
	index      uint64
	seq        uint64 // its batches' number in their epoch
	start      Position
	badBefore  uint64 // malformed records before this segment
	sentBefore uint64 // records sent downstream before this segment
	batches    []*wire.RainstormBatch
}

// SourceMachine is the source task's state machine. The driver reads
// segments when Want says so and hands them to Segment. The source's
// batches are regenerable, so it sends them at once; its checkpoint is
// only where to resume (the oldest unacknowledged segment) and what each
// channel has acknowledged, and it needs no checkpoint before sending.
type SourceMachine struct {
	cfg      SourceConfig
	acked    []uint64      // per channel: highest acknowledged seq (= segment index + 1)
	rt       []resendTimer // per channel
	segs     []*sourceSeg  // unacknowledged, oldest first
	nextSeg  uint64
	eof      bool
	lastSeq  uint64 // the EOS batch's seq once known
	sent     uint64 // records sent downstream, from the input's start
	bad      uint64
	badFirst []uint64
	resume   wire.RainstormSourcePos
	readPos  Position // after the last segment read

	version  uint64
	inflight *wire.RainstormCheckpoint
	saved    uint64 // resume segment of the latest durable checkpoint
	done     bool
	stopped  bool
	tick     int
	lastCut  int
	ready    Ready
	// identifying: the checkpoint recording the input file is not durable
	// yet, and nothing is read until it is.
	identifying bool
	ep          sourceEpochs
}

// NewSourceMachine starts the source from its latest durable checkpoint
// (nil for a fresh start). The driver opens the input at Resume().
func NewSourceMachine(cfg SourceConfig, ckpt *wire.RainstormCheckpoint) (*SourceMachine, error) {
	if cfg.SegmentRecords <= 0 {
		cfg.SegmentRecords = DefaultSegmentRecords
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.CheckpointTicks <= 0 {
		cfg.CheckpointTicks = DefaultCheckpointTicks
	}
	if cfg.ResendTicks <= 0 {
		cfg.ResendTicks = DefaultResendTicks
	}
	if cfg.Downstream < 1 || cfg.Next == nil {
		return nil, errors.New("rainstorm source: downstream and next stage must be set")
	}
	if cfg.Range != nil && len(cfg.Epochs) > 0 {
		return nil, errors.New("rainstorm source: a split source cannot resize")
	}
	m := &SourceMachine{cfg: cfg}
	if err := m.ep.open(&cfg, ckpt); err != nil {
		return nil, err
	}
	n := m.ep.tabs.Tasks(m.ep.cur, 1)
	m.acked, m.rt = make([]uint64, n), make([]resendTimer, n)
	if ckpt != nil {
		if ckpt.Source == nil || len(ckpt.Outputs) != n {
			return nil, errors.New("rainstorm source: checkpoint is not a source's of this shape")
		}
		m.version = ckpt.Version
		m.resume = *ckpt.Source
		m.nextSeg, m.saved = m.resume.Segment, m.resume.Segment
		m.bad, m.badFirst = m.resume.BadRecords, append([]uint64(nil), m.resume.BadFirst...)
		m.sent = ckpt.RecordsOut
		for i, o := range ckpt.Outputs {
			m.acked[i] = o.Acked
		}
		// A final checkpoint the previous incarnation never heard was
		// durable: every batch is acknowledged, so this one is done at
		// once, or its task would run, with nothing to do, forever.
		m.done = ckpt.Done
		m.ready.Done = m.done
	} else if r := cfg.Range; r != nil {
		m.resume = wire.RainstormSourcePos{Segment: m.firstSegment(), Record: r.Start.Record, Offset: r.Start.Offset, Fields: r.Start.Fields}
		m.nextSeg, m.saved = m.resume.Segment, m.resume.Segment
	}
	m.readPos = m.Resume()
	if cfg.File != nil && m.resume.File == nil && !m.done {
		// Recorded before the first batch leaves: a replacement that
		// finds another file must know, whatever was sent already.
		m.resume.File = cfg.File
		m.identifying = true
	}
	if !m.done && (m.identifying || m.ep.lowReserve(m)) {
		m.cut(false)
	}
	m.ep.marker(m)
	return m, nil
}

// firstSegment is the index of the source's first segment: 0, or for a
// range the segment of the whole input's grid its first record is in.
func (m *SourceMachine) firstSegment() uint64 {
	if r := m.cfg.Range; r != nil {
		return r.Start.Record / uint64(m.cfg.SegmentRecords)
	}
	return 0
}

// cut starts a checkpoint of the current position.
func (m *SourceMachine) cut(done bool) {
	pos := m.position()
	if m.ep.resizable {
		pos.Epochs, pos.Epoch = slices.Clone(m.ep.tabs.Epochs()), uint64(m.ep.cur)
		pos.Reserve = m.ep.reserveAt(m)
	}
	m.ep.unsaved = false
	c := &wire.RainstormCheckpoint{Task: m.cfg.Task, Incarnation: m.cfg.Incarnation, Version: m.version + 1,
		Source: &pos, Outputs: make([]wire.RainstormOutput, len(m.acked)), BadRecords: pos.BadRecords, Done: done,
		RecordsOut: m.sentAt()}
	for d, x := range m.acked {
		// x is the largest number when a Done receiver acknowledged its
		// whole channel: Next stays past every batch, not wrapped to 0.
		c.Outputs[d] = wire.RainstormOutput{To: d, Next: max(x+1, x), Acked: x}
	}
	m.inflight = c
	m.lastCut = m.tick
	m.ready.Checkpoint = c
}

// RecordedFile is the input file the source's checkpoints record (nil for
// a source that records none).
func (m *SourceMachine) RecordedFile() *wire.RainstormFileID { return m.resume.File }

// Resume is where the driver opens the input: the first record of the
// oldest segment not acknowledged on every channel.
func (m *SourceMachine) Resume() Position {
	return Position{Record: m.resume.Record, Offset: m.resume.Offset, Fields: m.resume.Fields}
}

// Want reports whether the source wants its next segment read (window not
// full, input not ended), and which.
func (m *SourceMachine) Want() (uint64, bool) {
	return m.nextSeg, !m.stopped && !m.identifying && !m.eof && !m.done && len(m.segs) < m.cfg.Window && m.ep.mayRead(m)
}

// Ready returns and clears what the machine wants done.
func (m *SourceMachine) Ready() Ready {
	r := m.ready
	m.ready = Ready{}
	return r
}

// Read returns the input records read so far, from the input's start
// (malformed ones included), and how many of them were malformed.
func (m *SourceMachine) Read() (records, bad uint64) { return m.readPos.Record, m.bad }

// Sent returns the records sent downstream, from the input's start: after
// the source's chain, so the first stage's records in, not the input's.
// A restart counts on from its checkpoint, as Read does.
func (m *SourceMachine) Sent() uint64 { return m.sent }

// BadRecords is the count of malformed input records and the first few ids.
func (m *SourceMachine) BadRecords() (uint64, []uint64) { return m.bad, m.badFirst }

// Segment hands the machine the segment Want asked for.
func (m *SourceMachine) Segment(seg Segment) {
	if m.stopped || seg.Index != m.nextSeg || m.eof {
		return
	}
	s := &sourceSeg{index: seg.Index, start: seg.Start, badBefore: m.bad, sentBefore: m.sent, batches: make([]*wire.RainstormBatch, len(m.acked))}
	for _, id := range seg.Bad {
		m.bad++
		if len(m.badFirst) < maxBadFirst {
			m.badFirst = append(m.badFirst, id)
		}
	}
	if len(seg.Bad) > 0 && m.cfg.FailOnBadRecord {
		m.stopped = true
		m.ready.Failed = fmt.Errorf("malformed input record %d (on_bad_record: fail)", seg.Bad[0]+1)
		return
	}
	recs := seg.Records
	refused, refusedErr := seg.Refused, seg.RefusedErr
	if m.cfg.Chain != nil && !seg.Chained {
		// A function of the segment's records, so a restart re-cuts the
		// same batches (I1).
		out, err := m.cfg.Chain.Apply(recs, func(err error) {
			var fe *FieldError
			if errors.As(err, &fe) {
				refused = append(refused, fe.Record)
			}
			if refusedErr == nil {
				refusedErr = err
			}
		})
		if err != nil {
			m.stopped = true
			m.ready.Failed = err
			return
		}
		recs = out
	}
	// A record a chained operator refuses counts with the malformed
	// ones, in the segment it belongs to.
	for _, id := range refused {
		m.bad++
		if len(m.badFirst) < maxBadFirst {
			m.badFirst = append(m.badFirst, id)
		}
	}
	if refusedErr != nil && m.cfg.FailOnBadRecord {
		m.stopped = true
		m.ready.Failed = fmt.Errorf("%w (on_bad_record: fail)", refusedErr)
		return
	}
	seq := m.ep.seq(seg.Index)
	s.seq = seq
	for d := range s.batches {
		s.batches[d] = &wire.RainstormBatch{From: m.cfg.Task, To: d, Incarnation: m.cfg.Incarnation, Seq: seq, EOS: seg.EOF, Epoch: uint64(m.ep.cur)}
	}
	m.sent += uint64(len(recs))
	table := m.ep.tabs.Table(m.ep.cur, 1)
	for i := range recs {
		rec := m.cfg.Next.Narrow(recs[i]) // routed as the next stage reads it
		d := m.cfg.Next.RouteBy(&rec, table)
		s.batches[d].Records = append(s.batches[d].Records, rec)
	}
	for _, b := range s.batches {
		b.Freeze() // encoded once for the send and every resend
	}
	m.segs = append(m.segs, s)
	m.nextSeg++
	m.readPos = seg.End
	if seg.EOF {
		m.eof, m.lastSeq = true, seq
	}
	for d, b := range s.batches {
		if b.Seq > m.acked[d] {
			m.ready.Batches = append(m.ready.Batches, b)
			m.rt[d].sentNow(b.Seq, m.tick)
		}
	}
	m.dropAcked()
	m.ep.marker(m)
}

// Ack delivers a first-stage task's acknowledgement.
func (m *SourceMachine) Ack(a *wire.RainstormBatchAck) {
	d := a.From.Index
	if m.stopped || a.From.Stage != 1 || d < 0 || d >= len(m.acked) || a.Epoch != uint64(m.ep.cur) {
		return
	}
	if a.Incarnation != 0 && m.rt[d].receiverRestarted(a.Incarnation) {
		// After the ack below drops what it covers (unless it closed the
		// epoch: then nothing of this one is left to send).
		ep := m.ep.cur
		defer func() {
			if m.ep.cur == ep {
				m.resend(d, true)
			}
		}()
	}
	if a.UpTo <= m.acked[d] {
		return
	}
	m.acked[d] = a.UpTo
	m.rt[d].acked(a.UpTo, m.tick)
	m.dropAcked()
}

// dropAcked forgets the segments every channel has acknowledged. A
// restarted source can read again segments that acks it got since it
// opened already cover: they go at once too, or nothing would drop them
// when no later ack comes (the last ones of an epoch).
func (m *SourceMachine) dropAcked() {
	low := slices.Min(m.acked)
	k := 0
	for k < len(m.segs) && m.segs[k].seq <= low {
		k++
	}
	clear(m.segs[:k])
	m.segs = m.segs[k:]
	m.ep.advance(m)
}

// Rerouted says downstream task to runs under a new incarnation: its
// unacknowledged batches go to it now rather than when the resend timer
// runs out (they are a function of the input, so any resend is the same).
func (m *SourceMachine) Rerouted(to int) {
	if m.stopped || to < 0 || to >= len(m.acked) {
		return
	}
	m.resend(to, true)
}

// resend sends channel d's unacknowledged batches again: all of them for
// a replaced receiver, else those due by the channel's timeout, at most
// resendBurst.
func (m *SourceMachine) resend(d int, all bool) {
	rt := &m.rt[d]
	timeout := rt.timeout(m.cfg.ResendTicks)
	sent := 0
	for _, s := range m.segs {
		if !all && sent == resendBurst {
			break
		}
		if b := s.batches[d]; b.Seq > m.acked[d] && (all || rt.due(b.Seq, m.tick, timeout)) {
			m.ready.Batches = append(m.ready.Batches, b)
			rt.sentNow(b.Seq, m.tick)
			sent++
		}
	}
	if sent > 0 && !all {
		rt.timedOut()
	}
}

// Tick advances the clock: resend overdue batches, checkpoint progress.
func (m *SourceMachine) Tick() {
	if m.stopped {
		return
	}
	m.tick++
	if m.inflight != nil && m.tick-m.lastCut >= m.cfg.ResendTicks {
		m.ready.Checkpoint = m.inflight // lost on the way, or its answer was
		m.lastCut = m.tick
	}
	for d := range m.acked {
		m.resend(d, false)
	}
	allAcked := m.eof
	for _, x := range m.acked {
		allAcked = allAcked && x >= m.lastSeq
	}
	pos := m.position()
	if m.inflight == nil && !m.done && (allAcked || m.ep.unsaved || m.ep.lowReserve(m) || (pos.Segment > m.saved && m.tick-m.lastCut >= m.cfg.CheckpointTicks)) {
		m.cut(allAcked)
	}
}

// position is where a restart resumes: the oldest unacknowledged segment,
// or the next to read when all are acknowledged.
func (m *SourceMachine) position() wire.RainstormSourcePos {
	if len(m.segs) > 0 {
		s := m.segs[0]
		return wire.RainstormSourcePos{Segment: s.index, Record: s.start.Record, Offset: s.start.Offset,
			Fields: s.start.Fields, BadRecords: s.badBefore, BadFirst: m.firstBadBefore(s.badBefore), File: m.resume.File}
	}
	return wire.RainstormSourcePos{Segment: m.nextSeg, Record: m.readPos.Record, Offset: m.readPos.Offset,
		Fields: m.readPos.Fields, BadRecords: m.bad, BadFirst: m.badFirst, File: m.resume.File}
}

// sentAt is the records sent before position(): what a checkpoint at it
// carries as RecordsOut, so the first stage's durable RecordsIn can be held
// against it (after a chain, not the records read).
func (m *SourceMachine) sentAt() uint64 {
	if len(m.segs) > 0 {
		return m.segs[0].sentBefore
	}
	return m.sent
}

func (m *SourceMachine) firstBadBefore(n uint64) []uint64 {
	k := min(uint64(len(m.badFirst)), n)
	return append([]uint64(nil), m.badFirst[:k]...)
}

// CheckpointResult delivers the store's answer to a checkpoint.
func (m *SourceMachine) CheckpointResult(a *wire.RainstormCheckpointAck) {
	c := m.inflight
	if m.stopped || c == nil || a.Version != c.Version || a.Incarnation != c.Incarnation {
		return
	}
	m.inflight = nil
	if a.Refused {
		m.stopped = true
		if a.Current > m.cfg.Incarnation {
			m.ready.Fenced = true
			return
		}
		m.ready.Failed = fmt.Errorf("source checkpoint %d refused: %s", c.Version, a.Reason)
		return
	}
	m.version = c.Version
	m.saved = c.Source.Segment
	m.identifying = false
	m.ep.saved(m, c.Source)
	if c.Done {
		m.done = true
		m.ready.Done = true
	}
}
