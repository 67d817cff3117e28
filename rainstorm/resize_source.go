package rainstorm

import (
	"errors"
	"slices"

	"tempest/wire"
)

// reserveAhead is how far past what it has read a source's checkpoint
// lets it read before the next one: twice what it read since the previous
// checkpoint, at least two segments and at most a window and a half. The
// reserve is also how far a resize asked for just after the source
// restarted has to wait (the new epoch starts past the reserve the source
// inherited), so it follows the rate: a slow source keeps a short one,
// and a fast one does not stop to checkpoint before every read.
func reserveAhead(window int, readSinceCut uint64) uint64 {
	return min(max(2*readSinceCut, 2), uint64(window)+uint64(window+1)/2)
}

// sourceEpochs is the source's side of resizing. The source is where an
// epoch is born: Resize records the epoch (its first segment and the
// stages' task counts) in the source's checkpoint, and once that is
// durable and every segment before it was read, the source closes the old
// epoch's channels with a marker batch (EOS with Next) and, once every
// first-stage task acknowledged the marker, sends the new epoch's
// segments, routed by the new tables. Every batch is a function of the
// segment and the durable epoch list, so a regenerated one is the one
// first sent.
type sourceEpochs struct {
	tabs *Tables
	cur  int // the epoch the source sends in
	// savedEpochs is how many epochs the latest durable checkpoint
	// records: the marker waits for the next epoch to be durable.
	savedEpochs int
	// reserve is the latest durable checkpoint's Reserve: the source reads
	// no segment at or past it. inherited is the Reserve of the
	// checkpoint this incarnation opened from: a resize starts no earlier,
	// since an earlier incarnation may have read up to it.
	reserve, inherited uint64
	unsaved            bool   // an epoch was added that no checkpoint carries yet
	cutSeg             uint64 // nextSeg when the last checkpoint was cut
	ahead              uint64 // the reserve's distance in the checkpoint in flight or durable
	// resizable: the driver gave epochs (or the checkpoint holds them).
	// Only then does the source keep a reserve, which costs one
	// checkpoint before its first read.
	resizable  bool
	markerSent bool // the current epoch's closing marker is in segs
}

func (e *sourceEpochs) open(cfg *SourceConfig, ckpt *wire.RainstormCheckpoint) error {
	epochs := cfg.Epochs
	if ckpt != nil && ckpt.Source != nil && len(ckpt.Source.Epochs) > 0 {
		epochs = ckpt.Source.Epochs
		e.cur = int(ckpt.Source.Epoch)
		e.reserve, e.inherited = ckpt.Source.Reserve, ckpt.Source.Reserve
	}
	e.resizable = len(epochs) > 0
	if len(epochs) == 0 {
		// A range's batches are numbered from its first segment.
		var first uint64
		if cfg.Range != nil {
			first = cfg.Range.Start.Record / uint64(cfg.SegmentRecords)
		}
		epochs = []wire.RainstormEpoch{{Segment: first, Tasks: []int{cfg.Downstream}}}
	}
	tabs, err := NewTables(epochs)
	if err != nil {
		return err
	}
	if e.cur >= tabs.Len() {
		return errors.New("rainstorm source: checkpoint's epoch is not in its epoch list")
	}
	e.tabs, e.savedEpochs = tabs, tabs.Len()
	if ckpt == nil || ckpt.Source == nil || len(ckpt.Source.Epochs) == 0 {
		e.savedEpochs = 0 // nothing durable records even epoch 0's reserve
	}
	return nil
}

// boundary is the first segment of the epoch after the current one, if
// one is recorded.
func (e *sourceEpochs) boundary() (uint64, bool) {
	if e.cur+1 < e.tabs.Len() {
		return e.tabs.Epoch(e.cur + 1).Segment, true
	}
	return 0, false
}

// seq is the batch number of segment index in the current epoch.
func (e *sourceEpochs) seq(index uint64) uint64 {
	return index - e.tabs.Epoch(e.cur).Segment + 1
}

// mayRead reports whether the next segment may be read: under the durable
// reserve, and before the next epoch's first segment until the source
// switched to it.
func (e *sourceEpochs) mayRead(m *SourceMachine) bool {
	if e.resizable && m.nextSeg >= e.reserve {
		return false
	}
	b, ok := e.boundary()
	return !ok || m.nextSeg < b
}

// lowReserve reports whether the source should checkpoint to extend its
// reserve before it runs into it.
func (e *sourceEpochs) lowReserve(m *SourceMachine) bool {
	return e.resizable && m.nextSeg+e.ahead/2 >= e.reserve
}

// reserveAt returns the reserve a checkpoint cut now carries.
func (e *sourceEpochs) reserveAt(m *SourceMachine) uint64 {
	e.ahead = reserveAhead(m.cfg.Window, m.nextSeg-min(e.cutSeg, m.nextSeg))
	e.cutSeg = m.nextSeg
	return m.nextSeg + e.ahead
}

// saved takes a durable checkpoint's position.
func (e *sourceEpochs) saved(m *SourceMachine, pos *wire.RainstormSourcePos) {
	e.reserve = pos.Reserve
	e.savedEpochs = max(e.savedEpochs, len(pos.Epochs))
	e.marker(m)
}

// marker queues the current epoch's closing batches once the next epoch
// is durable and every segment before it was read.
func (e *sourceEpochs) marker(m *SourceMachine) {
	b, ok := e.boundary()
	if !ok || e.markerSent || m.stopped || m.done || m.eof || m.nextSeg != b || e.savedEpochs <= e.cur+1 {
		return
	}
	next := e.tabs.Epoch(e.cur + 1)
	s := &sourceSeg{index: b, seq: e.seq(b), start: m.readPos, badBefore: m.bad, sentBefore: m.sent, batches: make([]*wire.RainstormBatch, len(m.acked))}
	for d := range s.batches {
		s.batches[d] = &wire.RainstormBatch{From: m.cfg.Task, To: d, Incarnation: m.cfg.Incarnation, Seq: s.seq,
			EOS: true, Epoch: uint64(e.cur), Next: &next}
	}
	e.markerSent = true
	if slices.Min(m.acked) >= s.seq {
		// Acknowledged before a restart: the epoch is closed already.
		e.advance(m)
		return
	}
	m.segs = append(m.segs, s)
	for d, bt := range s.batches {
		if bt.Seq > m.acked[d] {
			m.ready.Batches = append(m.ready.Batches, bt)
			m.rt[d].sentNow(bt.Seq, m.tick)
		}
	}
}

// advance switches to the next epoch once every first-stage task
// acknowledged the marker (all of the epoch is then durable downstream).
func (e *sourceEpochs) advance(m *SourceMachine) {
	if !e.markerSent || len(m.segs) > 0 {
		return
	}
	e.cur++
	e.markerSent = false
	// Recorded promptly: the driver places the new epoch's tasks once a
	// durable checkpoint shows the source sending in it.
	e.unsaved = true
	n := e.tabs.Tasks(e.cur, 1)
	m.acked, m.rt = make([]uint64, n), make([]resendTimer, n)
	e.marker(m) // a further epoch may start where this one does
}

// Resize asks the source to start an epoch with these task counts per
// stage (index 0 is stage 1). It reports whether it did: not while an
// earlier resize is still closing its epoch, after the input ended, or
// when the counts are the current ones. The epoch starts at the next
// segment not yet read by this incarnation or any before it, and becomes
// real once the checkpoint recording it is durable; a source that
// restarts before then has forgotten it, and the driver asks again.
func (m *SourceMachine) Resize(tasks []int) bool {
	e := &m.ep
	if !e.resizable || m.stopped || m.done || m.eof || e.cur != e.tabs.Len()-1 || slices.Equal(e.tabs.Epoch(e.cur).Tasks, tasks) {
		return false
	}
	last := e.tabs.Epoch(e.cur)
	next := wire.RainstormEpoch{Epoch: last.Epoch + 1, Segment: max(m.nextSeg, e.inherited, last.Segment+1), Tasks: slices.Clone(tasks)}
	if err := e.tabs.Add(next); err != nil {
		return false
	}
	e.unsaved = true
	if m.inflight == nil {
		m.cut(false)
	}
	return true
}

// Epochs returns the epochs the source knows, oldest first, and the one it
// sends in.
func (m *SourceMachine) Epochs() ([]wire.RainstormEpoch, int) { return m.ep.tabs.Epochs(), m.ep.cur }
