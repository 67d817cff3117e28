package rainstorm

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"tempest/wire"
)

// Unit tests of the machines' rules, one at a time; the simulation tests
// them together under faults.

func sinkTask(t *testing.T, store *MemStore, inc uint64, alo bool) *TaskMachine {
	t.Helper()
	p, err := Compile(&Spec{Source: Source{Path: "/in"}, Stages: []Stage{{Name: "c", Op: OpCount, Key: "1"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := wire.RainstormTask{Stage: 1}
	ckpt, err := store.Fence(id, inc)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewTaskMachine(TaskConfig{Task: id, Incarnation: inc, Upstream: 1, Stage: p.Stages[0], AtLeastOnce: alo, CheckpointTicks: 1}, ckpt)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// filterThenCount compiles a filter passing every record, then a count.
func filterThenCount(t *testing.T) *Pipeline {
	t.Helper()
	p, err := Compile(&Spec{Source: Source{Path: "/in"}, Stages: []Stage{
		{Name: "f", Op: OpFilter, Matches: "."}, {Name: "c", Op: OpCount, Key: "1"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func filterTask(t *testing.T, store *MemStore, inc uint64) *TaskMachine {
	t.Helper()
	p := filterThenCount(t)
	id := wire.RainstormTask{Stage: 1}
	ckpt, err := store.Fence(id, inc)
	if err != nil {
		t.Fatal(err)
	}
	tr, _ := p.Stages[0].NewTransform()
	m, err := NewTaskMachine(TaskConfig{Task: id, Incarnation: inc, Upstream: 1, Downstream: 1, Stage: p.Stages[0], Next: p.Stages[1],
		Transform: tr, CheckpointTicks: 1}, ckpt)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func batch(seq uint64, eos bool, keys ...string) *wire.RainstormBatch {
	b := &wire.RainstormBatch{Incarnation: 1, Seq: seq, EOS: eos}
	for i, k := range keys {
		b.Records = append(b.Records, Record{ID: seq*100 + uint64(i), Fields: []string{k}})
	}
	return b
}

// TestOutputOnlyOnceDurable: a task's output batches leave only after the
// store acknowledged the checkpoint holding them.
func TestOutputOnlyOnceDurable(t *testing.T) {
	store := NewMemStore()
	m := filterTask(t, store, 1)
	m.Batch(batch(1, false, "a", "b"))
	m.Tick()
	r := m.Ready()
	if len(r.Batches) != 0 || r.Checkpoint == nil || len(r.Checkpoint.Pending) != 1 {
		t.Fatalf("before durability: %d batches sent, checkpoint %+v", len(r.Batches), r.Checkpoint)
	}
	for range 20 {
		m.Tick() // resend timers must not leak the batch either
	}
	if r2 := m.Ready(); len(r2.Batches) != 0 {
		t.Fatalf("%d batches sent while the checkpoint is outstanding", len(r2.Batches))
	}
	m.CheckpointResult(store.Put(r.Checkpoint))
	r = m.Ready()
	if len(r.Batches) != 1 || len(r.Batches[0].Records) != 2 || len(r.Acks) != 1 || r.Acks[0].UpTo != 1 {
		t.Fatalf("after durability: batches %v, acks %v", r.Batches, r.Acks)
	}
}

// TestDuplicatesIgnoredAndReacked: exactly-once ignores a batch it has
// processed and acks it again once durable. At-least-once ignores a resend
// from the sender incarnation it processed the batch from (the same
// records: no fault, just an ack slower than the resend timer), and
// counts again one from a newer sender incarnation, which may have re-cut
// it after a crash (the over-count at-least-once allows under faults).
func TestDuplicatesIgnoredAndReacked(t *testing.T) {
	for _, alo := range []bool{false, true} {
		store := NewMemStore()
		m := sinkTask(t, store, 1, alo)
		m.Batch(batch(1, false, "a"))
		m.Batch(batch(1, false, "a")) // before durable: no ack
		m.Tick()
		r := m.Ready()
		m.CheckpointResult(store.Put(r.Checkpoint))
		m.Ready()
		m.Batch(batch(1, false, "a")) // after: ack again
		if r := m.Ready(); len(r.Acks) != 1 || r.Acks[0].UpTo != 1 {
			t.Fatalf("alo %v: duplicate of a durable batch gave acks %v", alo, r.Acks)
		}
		restarted := batch(1, false, "a")
		restarted.Incarnation = 2 // the sender restarted and resends it
		m.Batch(restarted)
		m.Ready()
		end := batch(2, true)
		end.Incarnation = 2
		m.Batch(end)
		m.Tick()
		r = m.Ready()
		m.CheckpointResult(store.Put(r.Checkpoint))
		got := store.Output(wire.RainstormTask{Stage: 1})
		want := "1"
		if alo {
			want = "2"
		}
		if len(got) != 1 || got[0].Fields[1] != want || !m.Ready().Done {
			t.Fatalf("alo %v: output %v, want a counted %s times", alo, got, want)
		}
	}
}

// TestAtLeastOnceRestartedSenderDropsHeldBatches: under at-least-once a
// restarted sender re-cuts its batches, so one it numbers like a batch
// its predecessor sent may hold other records and end the stream. The
// receiver must not take the predecessor's batch held for reordering in
// its place: that swallowed the new sender's end of stream and the
// pipeline never finished.
func TestAtLeastOnceRestartedSenderDropsHeldBatches(t *testing.T) {
	store := NewMemStore()
	m := sinkTask(t, store, 1, true)
	m.Batch(batch(1, false, "a"))
	m.Batch(batch(3, false, "c")) // incarnation 1's batch 3, held: 2 never came
	b2 := batch(2, false, "b")
	b2.Incarnation = 2 // the sender restarted before 2 and 3 were durable
	m.Batch(b2)
	end := batch(3, true, "c")
	end.Incarnation = 2 // its batch 3 ends the stream
	m.Batch(end)
	m.Tick()
	r := m.Ready()
	if r.Checkpoint == nil || !r.Checkpoint.Done || !r.Checkpoint.Inputs[0].EOS {
		t.Fatalf("the restarted sender's end of stream was lost: checkpoint %+v", r.Checkpoint)
	}
}

// TestAtLeastOnceRecutEndCarriesMarker: a restarted sender that re-cuts
// fewer batches ends its stream at a number the receiver has processed
// already. Under at-least-once the receiver takes that batch again, and
// the epoch marker on it with it: a task that took the end of an epoch
// for the end of its part cut a final checkpoint and never entered the
// next epoch.
func TestAtLeastOnceRecutEndCarriesMarker(t *testing.T) {
	p, err := Compile(&Spec{Source: Source{Path: "/in"}, Stages: []Stage{{Name: "c", Op: OpCount, Key: "1"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	store := NewMemStore()
	id := wire.RainstormTask{Stage: 1}
	if _, err := store.Fence(id, 1); err != nil {
		t.Fatal(err)
	}
	m, err := NewTaskMachine(TaskConfig{Task: id, Incarnation: 1, Stage: p.Stages[0], AtLeastOnce: true, CheckpointTicks: 1,
		Epochs: []wire.RainstormEpoch{{Tasks: []int{1}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Batch(batch(1, false, "a"))
	m.Batch(batch(2, false, "b"))
	end := batch(2, true, "b") // re-cut by incarnation 2: one batch fewer
	end.Incarnation = 2
	end.Next = &wire.RainstormEpoch{Epoch: 1, Segment: 1, Tasks: []int{1}}
	m.Batch(end)
	m.Tick()
	r := m.Ready()
	if r.Checkpoint == nil || !r.Checkpoint.Closing || r.Checkpoint.Done {
		t.Fatalf("the end of epoch 0 was taken for the end of the task: checkpoint %+v", r.Checkpoint)
	}
}

// TestAtLeastOnceRestartedSenderRenumbers: a restarted at-least-once
// sender cuts again, from its checkpoint's numbers (its Base), batches its
// predecessor sent before they were durable, and they may hold more
// records. The receiver takes the new sender's batches from Base on even
// where it passed those numbers, so neither the new records nor the order
// of the end of stream are lost.
func TestAtLeastOnceRestartedSenderRenumbers(t *testing.T) {
	store := NewMemStore()
	m := sinkTask(t, store, 1, true)
	m.Batch(batch(1, false, "a"))
	m.Batch(batch(2, false, "b")) // incarnation 1's batch 2, never durable there
	end := batch(3, true)
	end.Incarnation, end.Base = 2, 2
	m.Batch(end) // incarnation 2's end arrives before its batch 2
	m.Tick()
	if r := m.Ready(); r.Checkpoint != nil {
		if r.Checkpoint.Done {
			t.Fatalf("the stream ended before the new sender's batch 2: %+v", r.Checkpoint)
		}
		m.CheckpointResult(store.Put(r.Checkpoint))
	}
	b2 := batch(2, false, "b", "c") // cut again, with a record more
	b2.Incarnation, b2.Base = 2, 2
	m.Batch(b2)
	for range 3 {
		m.Tick()
		r := m.Ready()
		if r.Checkpoint != nil {
			m.CheckpointResult(store.Put(r.Checkpoint))
		}
	}
	got := map[string]string{}
	for _, r := range store.Output(wire.RainstormTask{Stage: 1}) {
		got[r.Fields[0]] = r.Fields[1]
	}
	if got["a"] != "1" || got["b"] != "2" || got["c"] != "1" {
		t.Fatalf("output %v, want a 1, b 2 (at least once), c 1", got)
	}
}

// TestAtLeastOnceEndedStreamAcksSuccessor: a receiver that took a sender's
// whole stream, durably, before the sender was replaced acknowledges the
// successor's re-cut batches in its name and past their numbers (they hold
// nothing the stream lacked), or the successor waits for acks forever and
// a resize never closes its epoch.
func TestAtLeastOnceEndedStreamAcksSuccessor(t *testing.T) {
	store := NewMemStore()
	m := sinkTask(t, store, 1, true)
	m.Batch(batch(1, false, "a"))
	m.Batch(batch(2, true, "b"))
	m.Tick()
	r := m.Ready()
	m.CheckpointResult(store.Put(r.Checkpoint))
	if !m.Ready().Done {
		t.Fatal("not done")
	}
	again := batch(3, true, "b") // the successor cut one batch more
	again.Incarnation, again.Base = 2, 2
	m.Batch(again)
	r = m.Ready()
	if len(r.Acks) != 1 || r.Acks[0].Sender != 2 || r.Acks[0].UpTo < 3 {
		t.Fatalf("acks %+v, want one naming incarnation 2 up to 3", r.Acks)
	}
}

// TestAtLeastOnceAckOfPredecessorIgnored: an ack naming a predecessor
// incarnation's batches does not acknowledge the batches a restarted
// at-least-once sender cut under the same numbers, which the receiver
// may never have had.
func TestAtLeastOnceAckOfPredecessorIgnored(t *testing.T) {
	p := filterThenCount(t)
	store := NewMemStore()
	id := wire.RainstormTask{Stage: 1}
	open := func(inc uint64) *TaskMachine {
		ckpt, err := store.Fence(id, inc)
		if err != nil {
			t.Fatal(err)
		}
		tr, _ := p.Stages[0].NewTransform()
		m, err := NewTaskMachine(TaskConfig{Task: id, Incarnation: inc, Upstream: 1, Downstream: 1, Stage: p.Stages[0], Next: p.Stages[1],
			Transform: tr, CheckpointTicks: 1, AtLeastOnce: true}, ckpt)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := open(1)
	m.Batch(batch(1, false, "a"))
	m.Tick()
	r := m.Ready()
	m.CheckpointResult(store.Put(r.Checkpoint)) // batch 1 durable
	m.Batch(batch(2, false, "b"))
	m.Tick() // batch 2 sent, never durable: incarnation 1 dies
	m2 := open(2)
	m2.Ready()
	m2.Batch(batch(2, false, "b", "c"))
	m2.Tick()
	r = m2.Ready()
	if len(r.Batches) != 1 || r.Batches[0].Seq != 2 || r.Batches[0].Base != 2 {
		t.Fatalf("restarted sender sent %+v, want its batch 2 with base 2", r.Batches)
	}
	m2.Ack(&wire.RainstormBatchAck{From: wire.RainstormTask{Stage: 2}, Incarnation: 1, UpTo: 2, Sender: 1})
	if p := m2.out[0].pending; len(p) == 0 || p[len(p)-1].Seq != 2 {
		t.Fatalf("an ack of incarnation 1's batch 2 acknowledged incarnation 2's: pending %v", p)
	}
	m2.Ack(&wire.RainstormBatchAck{From: wire.RainstormTask{Stage: 2}, Incarnation: 1, UpTo: 2, Sender: 2})
	if len(m2.out[0].pending) != 0 {
		t.Fatalf("its own ack left %d batches pending", len(m2.out[0].pending))
	}
}

// TestReorderedBatchesProcessedInOrder: batch 2 before batch 1 waits.
func TestReorderedBatchesProcessedInOrder(t *testing.T) {
	store := NewMemStore()
	m := sinkTask(t, store, 1, false)
	m.Batch(batch(3, true, "c"))
	m.Batch(batch(2, false, "b"))
	m.Tick()
	if r := m.Ready(); r.Checkpoint != nil {
		t.Fatalf("checkpointed with batch 1 missing: %+v", r.Checkpoint.Inputs)
	}
	m.Batch(batch(1, false, "a"))
	m.Tick()
	r := m.Ready()
	if r.Checkpoint == nil || !r.Checkpoint.Done || len(r.Checkpoint.Rows) != 3 {
		t.Fatalf("checkpoint %+v", r.Checkpoint)
	}
}

// TestStaleIncarnationPublishesNothing is the SIGSTOP case: incarnation 1
// is frozen, incarnation 2 starts from the latest durable checkpoint, and
// when 1 wakes up its checkpoint (with output rows) is refused, its output
// is never published, and it learns it was replaced.
func TestStaleIncarnationPublishesNothing(t *testing.T) {
	store := NewMemStore()
	old := sinkTask(t, store, 1, false)
	old.Batch(batch(1, false, "a"))
	old.Tick()
	r := old.Ready()
	old.CheckpointResult(store.Put(r.Checkpoint))
	old.Ready()
	// Frozen here. The replacement fences and restores version 1.
	repl := sinkTask(t, store, 2, false)
	if rr := repl.Ready(); len(rr.Acks) != 1 || rr.Acks[0].UpTo != 1 {
		t.Fatalf("replacement's first acks %v, want up to 1", rr.Acks)
	}
	// The old one wakes, finishes the stream and tries to publish.
	old.Batch(batch(2, true, "b"))
	old.Tick()
	r = old.Ready()
	if r.Checkpoint == nil || len(r.Checkpoint.Rows) == 0 {
		t.Fatalf("the stale task did not try to publish: %+v", r.Checkpoint)
	}
	ack := store.Put(r.Checkpoint)
	if !ack.Refused || ack.Current != 2 {
		t.Fatalf("store accepted a stale checkpoint: %+v", ack)
	}
	old.CheckpointResult(ack)
	if r := old.Ready(); !r.Fenced || len(r.Acks) != 0 || len(r.Batches) != 0 {
		t.Fatalf("stale task after refusal: %+v", r)
	}
	if out := store.Output(wire.RainstormTask{Stage: 1}); len(out) != 0 {
		t.Fatalf("stale output published: %v", out)
	}
	// The replacement finishes correctly.
	repl.Batch(batch(1, false, "a")) // a resend of what version 1 holds
	repl.Batch(batch(2, true, "b"))
	repl.Tick()
	r = repl.Ready()
	repl.CheckpointResult(store.Put(r.Checkpoint))
	var out [][]string
	for _, r := range store.Output(wire.RainstormTask{Stage: 1}) {
		out = append(out, r.Fields)
	}
	slices.SortFunc(out, slices.Compare)
	if want := [][]string{{"a", "1"}, {"b", "1"}}; !reflect.DeepEqual(out, want) {
		t.Fatalf("output %v, want %v", out, want)
	}
}

// TestStoreCompareAndSet covers the store's rules directly.
func TestStoreCompareAndSet(t *testing.T) {
	s := NewMemStore()
	id := wire.RainstormTask{Stage: 1}
	if _, err := s.Fence(id, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fence(id, 1); err == nil {
		t.Fatal("fenced twice with the same incarnation")
	}
	c1 := &wire.RainstormCheckpoint{Task: id, Incarnation: 2, Version: 1}
	if a := s.Put(c1); !a.Refused {
		t.Fatal("a checkpoint of an unfenced incarnation was stored")
	}
	c1.Incarnation = 1
	c1.Pending = []wire.RainstormBatch{{To: 0, Seq: 1}, {To: 0, Seq: 2}}
	if a := s.Put(c1); a.Refused {
		t.Fatal(a.Reason)
	}
	if a := s.Put(c1); a.Refused {
		t.Fatalf("a resent checkpoint was refused: %s", a.Reason)
	}
	if a := s.Put(&wire.RainstormCheckpoint{Task: id, Incarnation: 1, Version: 3}); !a.Refused {
		t.Fatal("a version gap was accepted")
	}
	c2 := &wire.RainstormCheckpoint{Task: id, Incarnation: 1, Version: 2, Outputs: []wire.RainstormOutput{{To: 0, Next: 4, Acked: 1}},
		Pending: []wire.RainstormBatch{{To: 0, Seq: 3}}}
	if a := s.Put(c2); a.Refused {
		t.Fatal(a.Reason)
	}
	latest, _ := s.Fence(id, 5)
	var seqs []uint64
	for _, b := range latest.Pending {
		seqs = append(seqs, b.Seq)
	}
	if !reflect.DeepEqual(seqs, []uint64{2, 3}) || latest.Version != 2 {
		t.Fatalf("composed pending %v version %d, want [2 3] and 2", seqs, latest.Version)
	}
}

// TestSourceBadRecordsAndResume: bad records are counted with their ids,
// survive a restart exactly, and fail the source under on_bad_record: fail.
func TestSourceBadRecordsAndResume(t *testing.T) {
	in := "a,b\n1,x\n2\n3,y\n\"4,z\n"
	p, err := Compile(&Spec{Source: Source{Path: "/in", Header: true}, Stages: []Stage{{Name: "c", Op: OpCount, Key: "b"}}}, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := SourceConfig{Downstream: 2, Next: p.Stages[0], SegmentRecords: 2, Incarnation: 1, CheckpointTicks: 1}
	src, _ := NewSourceMachine(cfg, nil)
	rd, _ := NewReader(strings.NewReader(in), ReaderOptions{Format: FormatCSV, Header: true})
	var sent []*wire.RainstormBatch
	for {
		idx, ok := src.Want()
		if !ok {
			break
		}
		seg, err := ReadSegment(rd, idx, 2)
		if err != nil {
			t.Fatal(err)
		}
		src.Segment(seg)
		sent = append(sent, src.Ready().Batches...)
	}
	if n, first := src.BadRecords(); n != 2 || !reflect.DeepEqual(first, []uint64{1, 3}) {
		t.Fatalf("bad %d %v, want 2 [1 3]", n, first)
	}
	// Ids 0-1, 2-3, then an empty last segment: the input ends exactly at a
	// segment boundary, which the reader only learns by reading on.
	if len(sent) != 6 || sent[3].EOS || !sent[4].EOS || !sent[5].EOS || len(sent[4].Records)+len(sent[5].Records) != 0 {
		t.Fatalf("sent %d batches (want 3 segments × 2 channels, the last marked end of stream)", len(sent))
	}
	// Segment 0 acknowledged everywhere: the checkpoint resumes at segment 1.
	for d := range 2 {
		src.Ack(&wire.RainstormBatchAck{From: wire.RainstormTask{Stage: 1, Index: d}, UpTo: 1})
	}
	src.Tick()
	c := src.Ready().Checkpoint
	if c == nil || c.Source.Segment != 1 || c.Source.Record != 2 || c.Source.BadRecords != 1 {
		t.Fatalf("checkpoint %+v", c.Source)
	}
	// A restart re-reads segment 1 from the recorded offset and cuts the
	// same batches.
	src2, _ := NewSourceMachine(SourceConfig{Downstream: 2, Next: p.Stages[0], SegmentRecords: 2, Incarnation: 2}, c)
	pos := src2.Resume()
	rd2 := ResumeReader(strings.NewReader(in[pos.Offset:]), pos, ReaderOptions{Format: FormatCSV, Header: true}, []string{"a", "b"})
	var again []*wire.RainstormBatch
	for {
		idx, ok := src2.Want()
		if !ok {
			break
		}
		seg, err := ReadSegment(rd2, idx, 2)
		if err != nil {
			t.Fatal(err)
		}
		src2.Segment(seg)
		again = append(again, src2.Ready().Batches...)
	}
	if len(again) != 4 {
		t.Fatalf("regenerated %d batches, want 4", len(again))
	}
	for i := range again {
		if again[i].Seq != sent[2+i].Seq || !reflect.DeepEqual(again[i].Records, sent[2+i].Records) || again[i].EOS != sent[2+i].EOS {
			t.Fatalf("regenerated batch %d differs", i)
		}
	}
	if n, first := src2.BadRecords(); n != 2 || !reflect.DeepEqual(first, []uint64{1, 3}) {
		t.Fatalf("after restart: bad %d %v, want 2 [1 3]", n, first)
	}

	cfg.FailOnBadRecord = true
	src3, _ := NewSourceMachine(cfg, nil)
	rd3, _ := NewReader(strings.NewReader(in), ReaderOptions{Format: FormatCSV, Header: true})
	seg, _ := ReadSegment(rd3, 0, 2)
	src3.Segment(seg)
	if r := src3.Ready(); r.Failed == nil || !strings.Contains(r.Failed.Error(), "record 2") {
		t.Fatalf("on_bad_record: fail gave %v", r.Failed)
	}
}

// TestExecFailureFailsTask: an exec program that keeps dying fails the task
// with its stderr.
func TestExecFailureFailsTask(t *testing.T) {
	script := writeScript(t, "echo 'no such column' >&2\nexit 1\n")
	p, err := Compile(&Spec{Source: Source{Path: "/in"}, Stages: []Stage{{Name: "x", Op: OpExec, Command: []string{script}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ex, _ := p.Stages[0].NewExec(ExecOptions{})
	defer ex.Close()
	m, err := NewTaskMachine(TaskConfig{Task: wire.RainstormTask{Stage: 1}, Incarnation: 1, Upstream: 1, Stage: p.Stages[0], Transform: ex}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Batch(batch(1, false, "a"))
	var ee *ExecError
	if r := m.Ready(); !errors.As(r.Failed, &ee) || !strings.Contains(ee.Stderr, "no such column") {
		t.Fatalf("failed %v", r.Failed)
	}
}

func TestGeneratorDeterministic(t *testing.T) {
	g := &Generate{Records: 10, Keys: 3}
	a := NewGenerator(g, 0)
	var all []Record
	for {
		r, err := a.Next()
		if err != nil {
			break
		}
		all = append(all, r)
	}
	b := NewGenerator(g, 7)
	r, _ := b.Next()
	if len(all) != 10 || !reflect.DeepEqual(r, all[7]) || all[4].Fields[1] != "k1" {
		t.Fatalf("generated %v; resumed at 7: %v", all, r)
	}
}

// TestStageBadRecords: a value a stage cannot use is counted (and kept in
// the checkpoint), or fails the task under on_bad_record: fail.
func TestStageBadRecords(t *testing.T) {
	for _, fail := range []bool{false, true} {
		p, err := Compile(&Spec{Source: Source{Path: "/in"}, Stages: []Stage{{Name: "s", Op: OpSum, Key: "1", Field: "2"}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		m, err := NewTaskMachine(TaskConfig{Task: wire.RainstormTask{Stage: 1}, Incarnation: 1, Upstream: 1, Stage: p.Stages[0],
			FailOnBadRecord: fail, CheckpointTicks: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		m.Batch(&wire.RainstormBatch{Incarnation: 1, Seq: 1, Records: []Record{
			{ID: 0, Fields: []string{"a", "1.5"}}, {ID: 1, Fields: []string{"a", "lots"}}, {ID: 2, Fields: []string{"a", "2"}}}})
		m.Tick()
		r := m.Ready()
		if fail {
			if r.Failed == nil || !strings.Contains(r.Failed.Error(), "record 2") {
				t.Fatalf("on_bad_record: fail gave %v", r.Failed)
			}
			continue
		}
		if r.Failed != nil || r.Checkpoint == nil || r.Checkpoint.BadRecords != 1 || len(r.Checkpoint.Groups) != 1 || r.Checkpoint.Groups[0].Entries[0].Sum != "3.5" {
			t.Fatalf("ready %+v", r)
		}
	}
}

// TestReroutedResendsNow: when a downstream task is replaced, a task sends
// it its durable, unacknowledged batches at once, without waiting for the
// resend timer; a batch not yet durable still waits, and one acknowledged
// is not sent again. The source does the same.
func TestReroutedResendsNow(t *testing.T) {
	store := NewMemStore()
	m := filterTask(t, store, 1)
	m.Batch(batch(1, false, "a"))
	m.Tick()
	r := m.Ready()
	m.CheckpointResult(store.Put(r.Checkpoint))
	if r = m.Ready(); len(r.Batches) != 1 {
		t.Fatalf("durable batch not sent: %v", r.Batches)
	}
	m.Batch(batch(2, false, "b")) // processed, in no durable checkpoint yet
	m.Rerouted(0)
	if r = m.Ready(); len(r.Batches) != 1 || r.Batches[0].Seq != 1 {
		t.Fatalf("rerouted: sent %v, want batch 1 alone (2 is not durable)", r.Batches)
	}
	m.Ack(&wire.RainstormBatchAck{From: wire.RainstormTask{Stage: 2}, UpTo: 1})
	m.Rerouted(0)
	if r = m.Ready(); len(r.Batches) != 0 {
		t.Fatalf("rerouted after the ack: sent %v", r.Batches)
	}
	m.Rerouted(7) // no such downstream task: nothing happens

	p, err := Compile(&Spec{Source: Source{Path: "/in"}, Stages: []Stage{{Name: "c", Op: OpCount, Key: "1"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	src, _ := NewSourceMachine(SourceConfig{Downstream: 2, Next: p.Stages[0], SegmentRecords: 2, Incarnation: 1}, nil)
	rd, _ := NewReader(strings.NewReader("1\n2\n3\n"), ReaderOptions{Format: FormatCSV})
	idx, _ := src.Want()
	seg, err := ReadSegment(rd, idx, 2)
	if err != nil {
		t.Fatal(err)
	}
	src.Segment(seg)
	src.Ready()
	src.Ack(&wire.RainstormBatchAck{From: wire.RainstormTask{Stage: 1, Index: 0}, UpTo: 1})
	src.Rerouted(1)
	got := src.Ready().Batches
	if len(got) != 1 || got[0].To != 1 || got[0].Seq != 1 {
		t.Fatalf("source rerouted to task 1: sent %+v, want its batch 1", got)
	}
	src.Rerouted(0) // acknowledged there: nothing to send
	if got := src.Ready().Batches; len(got) != 0 {
		t.Fatalf("source rerouted to task 0: sent %+v", got)
	}
}

// durableOutputs feeds filter task m n input batches, each made durable,
// so it holds n sent, unacknowledged output batches for task 0 of stage 2.
func durableOutputs(t *testing.T, store *MemStore, m *TaskMachine, from uint64, n int) (sent int) {
	t.Helper()
	for i := range n {
		m.Batch(batch(from+uint64(i), false, "x"))
		m.Tick()
		r := m.Ready()
		if r.Checkpoint == nil {
			t.Fatal("no checkpoint cut")
		}
		m.CheckpointResult(store.Put(r.Checkpoint))
		sent += len(m.Ready().Batches)
	}
	return sent
}

func downAck(inc, upTo uint64) *wire.RainstormBatchAck {
	return &wire.RainstormBatchAck{From: wire.RainstormTask{Stage: 2}, Incarnation: inc, UpTo: upTo}
}

// TestResendLearnsAckDelay: acks that always come later than the
// configured resend timeout (they wait for the receiver's checkpoint) stop
// causing resends once the sender has measured them; a fixed timer resent
// every batch, which at-least-once counts twice.
func TestResendLearnsAckDelay(t *testing.T) {
	const delay = 2 * DefaultResendTicks
	store := NewMemStore()
	m := filterTask(t, store, 1)
	m.Ready()
	resent := make([]int, 8)
	for round := range resent {
		if got := durableOutputs(t, store, m, uint64(round+1), 1); got != 1 {
			t.Fatalf("round %d: %d batches sent, want 1", round, got)
		}
		for range delay {
			m.Tick()
			resent[round] += len(m.Ready().Batches)
		}
		m.Ack(downAck(7, uint64(round+1)))
		m.Ready()
	}
	if resent[0] == 0 {
		t.Fatalf("resends per round %v: the first round should time out (ack delay %d > %d ticks)", resent, delay, DefaultResendTicks)
	}
	if late := resent[len(resent)-3:]; late[0]+late[1]+late[2] != 0 {
		t.Fatalf("resends per round %v: still resending once the ack delay is known", resent)
	}
}

// TestResendBoundedAndBackedOff: a timeout resends at most resendBurst
// batches, in order, and waits longer after each timeout without
// progress.
func TestResendBoundedAndBackedOff(t *testing.T) {
	store := NewMemStore()
	m := filterTask(t, store, 1)
	m.Ready()
	durableOutputs(t, store, m, 1, 40)
	var sends []int // ticks at which batches went again, and how many
	var first []uint64
	for tick := range 20 * DefaultResendTicks {
		m.Tick()
		if bs := m.Ready().Batches; len(bs) > 0 {
			sends = append(sends, tick, len(bs))
			if first == nil {
				for _, b := range bs {
					first = append(first, b.Seq)
				}
			}
		}
	}
	if len(sends) == 0 {
		t.Fatal("nothing resent without acks")
	}
	for i := 1; i < len(sends); i += 2 {
		if sends[i] > resendBurst {
			t.Fatalf("a timeout resent %d batches, more than %d: %v", sends[i], resendBurst, sends)
		}
	}
	if !slices.IsSorted(first) {
		t.Fatalf("first resend %v, want the oldest due batches in order", first)
	}
	// A fixed timer resends every batch every DefaultResendTicks: 40 × 20
	// times here. Backing off, each goes at most 1 + 2 + 4 + 8 + 8 + ...
	total := 0
	for i := 1; i < len(sends); i += 2 {
		total += sends[i]
	}
	if total > 40*20/3 {
		t.Fatalf("%d batches resent in %d ticks without an ack: no backoff (%v)", total, 20*DefaultResendTicks, sends)
	}
}

// TestReplacedReceiverGetsBatchesAtOnce: a replacement downstream task
// acks from its new incarnation as it starts, and the sender resends all
// it holds for it at once, not after a timeout.
func TestReplacedReceiverGetsBatchesAtOnce(t *testing.T) {
	store := NewMemStore()
	m := filterTask(t, store, 1)
	m.Ready()
	durableOutputs(t, store, m, 1, 30)
	m.Ack(downAck(7, 4))
	if bs := m.Ready().Batches; len(bs) != 0 {
		t.Fatalf("an ack from the same receiver resent %d batches", len(bs))
	}
	m.Ack(downAck(9, 4)) // the replacement's first ack: durable up to 4
	bs := m.Ready().Batches
	if len(bs) != 26 || bs[0].Seq != 5 || bs[25].Seq != 30 {
		t.Fatalf("the replacement got %d batches, want 5..30 at once", len(bs))
	}
	// And a fresh task says hello to every upstream task as it starts.
	f := filterTask(t, NewMemStore(), 3)
	if acks := f.Ready().Acks; len(acks) != 1 || acks[0].Incarnation != 3 || acks[0].UpTo != 0 {
		t.Fatalf("a fresh task's first acks: %+v", acks)
	}
}

// TestResendTimeoutCapped: an ack held up by a fault (here 30 timeouts
// long) does not teach a delay that would stall the channel after the next
// loss: a batch still goes again within maxTimeout × ResendTicks.
func TestResendTimeoutCapped(t *testing.T) {
	store := NewMemStore()
	m := filterTask(t, store, 1)
	m.Ready()
	durableOutputs(t, store, m, 1, 1)
	for range 30 * DefaultResendTicks {
		m.Tick()
	}
	m.Ack(downAck(7, 1))
	m.Ready()
	durableOutputs(t, store, m, 2, 1)
	for range maxTimeout*DefaultResendTicks + 1 {
		m.Tick()
		if len(m.Ready().Batches) > 0 {
			return
		}
	}
	t.Fatalf("no resend within %d ticks after a slow ack", maxTimeout*DefaultResendTicks)
}

// TestSourceResumedHeaderlessKnowsFieldCount: a headerless CSV's field
// count is learnt from its first record. A source restarted at a segment
// whose first record is malformed must still judge the records after it
// by that count (carried in its checkpoint), not by the malformed one:
// with 2-record segments, a fresh read and a read resumed at each segment
// find the same good and bad records from there on.
func TestSourceResumedHeaderlessKnowsFieldCount(t *testing.T) {
	in := "1,a,x\n2,b,y\n3,c\n4,d,x\n5,e,y\n6,f,x\n7,g,y\n8,h,x\n9,i,y\n"
	opts := ReaderOptions{Format: FormatCSV}
	p, err := Compile(&Spec{Source: Source{Path: "/in"}, Stages: []Stage{{Name: "c", Op: OpCount, Key: "3"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := SourceConfig{Downstream: 1, Next: p.Stages[0], SegmentRecords: 2, Incarnation: 1, CheckpointTicks: 1}

	// readFrom runs a source machine from ckpt to the end of the input and
	// returns the ids it sent and the ids it found malformed, per segment.
	readFrom := func(ckpt *wire.RainstormCheckpoint) (good, bad map[uint64][]uint64, m *SourceMachine) {
		m, err := NewSourceMachine(cfg, ckpt)
		if err != nil {
			t.Fatal(err)
		}
		var src RecordSource
		if pos := m.Resume(); pos == (Position{}) {
			rd, err := NewReader(strings.NewReader(in), opts)
			if err != nil {
				t.Fatal(err)
			}
			src = rd
		} else {
			src = ResumeReader(strings.NewReader(in[pos.Offset:]), pos, opts, nil)
		}
		good, bad = map[uint64][]uint64{}, map[uint64][]uint64{}
		for {
			idx, ok := m.Want()
			if !ok {
				return good, bad, m
			}
			seg, err := ReadSegment(src, idx, cfg.SegmentRecords)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range seg.Records {
				good[idx] = append(good[idx], r.ID)
			}
			bad[idx] = seg.Bad
			m.Segment(seg)
			m.Ready()
		}
	}
	fresh, freshBad, m := readFrom(nil)
	if n, first := m.BadRecords(); n != 1 || !reflect.DeepEqual(first, []uint64{2}) {
		t.Fatalf("fresh read: bad %d %v, want record id 2 alone", n, first)
	}
	for seg := uint64(1); seg <= 4; seg++ {
		// Segments before seg acknowledged: the checkpoint resumes at seg.
		m.Ack(&wire.RainstormBatchAck{From: wire.RainstormTask{Stage: 1}, UpTo: seg})
		m.Tick()
		c := m.Ready().Checkpoint
		if c == nil || c.Source.Segment != seg {
			t.Fatalf("no checkpoint resuming at segment %d: %+v", seg, c)
		}
		// The checkpoint goes through the wire to the store and back.
		b, err := wire.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		var stored wire.RainstormCheckpoint
		if err := wire.Unmarshal(b, &stored); err != nil {
			t.Fatal(err)
		}
		m.CheckpointResult(&wire.RainstormCheckpointAck{Task: c.Task, Incarnation: c.Incarnation, Version: c.Version})

		good, bad, r := readFrom(&stored)
		for s := seg; s <= 4; s++ {
			if !slices.Equal(good[s], fresh[s]) || !slices.Equal(bad[s], freshBad[s]) {
				t.Fatalf("resumed at segment %d: segment %d read good %v bad %v; the fresh read good %v bad %v",
					seg, s, good[s], bad[s], fresh[s], freshBad[s])
			}
		}
		if n, _ := r.BadRecords(); n != 1 {
			t.Fatalf("resumed at segment %d: %d bad records in all, want 1", seg, n)
		}
		// What it read counts from the input's start, as a fresh read's.
		if read, bad := r.Read(); read != 9 || bad != 1 {
			t.Fatalf("resumed at segment %d: read %d records, %d bad; want 9 and 1", seg, read, bad)
		}
	}
}

// A source whose final checkpoint was durable but whose worker never heard
// so (killed, frozen or fenced between the store's write and the answer) is
// placed again and handed that checkpoint. It has nothing left to read or
// send, so it must say it is done at once: its driver ends the task only
// then, and the job completes only when every task has (issue 23, item 12:
// the pipeline that stayed RUNNING).
func TestSourceRestoredFromItsFinalCheckpointIsDone(t *testing.T) {
	in := "a,b\n1,x\n2,y\n3,x\n"
	p, err := Compile(&Spec{Source: Source{Path: "/in", Header: true}, Stages: []Stage{{Name: "c", Op: OpCount, Key: "b"}}}, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := SourceConfig{Downstream: 1, Next: p.Stages[0], SegmentRecords: 2, Incarnation: 1, CheckpointTicks: 1}
	src, err := NewSourceMachine(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	rd, _ := NewReader(strings.NewReader(in), ReaderOptions{Format: FormatCSV, Header: true})
	var last uint64
	for {
		idx, ok := src.Want()
		if !ok {
			break
		}
		seg, err := ReadSegment(rd, idx, cfg.SegmentRecords)
		if err != nil {
			t.Fatal(err)
		}
		src.Segment(seg)
		for _, b := range src.Ready().Batches {
			last = max(last, b.Seq)
		}
	}
	// Every batch acknowledged: the next tick cuts the final checkpoint.
	src.Ack(&wire.RainstormBatchAck{From: wire.RainstormTask{Stage: 1}, Incarnation: 1, UpTo: last})
	src.Tick()
	final := src.Ready().Checkpoint
	if final == nil || !final.Done {
		t.Fatalf("all acknowledged, no final checkpoint: %+v", final)
	}

	// The store answers; the first incarnation's worker never hears it.
	again, err := NewSourceMachine(SourceConfig{Downstream: 1, Next: p.Stages[0], SegmentRecords: 2, Incarnation: 2}, final)
	if err != nil {
		t.Fatal(err)
	}
	if _, want := again.Want(); want {
		t.Fatal("a finished source wants to read again")
	}
	r := again.Ready()
	if !r.Done || len(r.Batches) != 0 || r.Checkpoint != nil {
		t.Fatalf("restored from its final checkpoint: done %t, %d batches, checkpoint %v; want done and nothing to send",
			r.Done, len(r.Batches), r.Checkpoint)
	}
}

// TestClosingTaskDrainsOnADoneReceiversAck: a receiver that retired with
// the epoch is Done, and its sender's driver acknowledges everything on its
// channel for it (UpTo the largest number). The closing task must count
// that channel drained and enter the next epoch: taken as "Acked+1" the
// number wrapped to 0, the channel never looked drained, and the task cut
// a drained checkpoint after every answer, for ever (33,225 checkpoints in
// 3.5 minutes on the real binaries), holding the next epoch's input and so
// the source's next resize.
func TestClosingTaskDrainsOnADoneReceiversAck(t *testing.T) {
	p := filterThenCount(t)
	store := NewMemStore()
	id := wire.RainstormTask{Stage: 1}
	if _, err := store.Fence(id, 1); err != nil {
		t.Fatal(err)
	}
	tr, _ := p.Stages[0].NewTransform()
	// Epoch 1 shrinks the count from 2 tasks to 1: count/1 retires.
	next := wire.RainstormEpoch{Epoch: 1, Segment: 1, Tasks: []int{1, 1}}
	m, err := NewTaskMachine(TaskConfig{Task: id, Incarnation: 1, Stage: p.Stages[0], Next: p.Stages[1], Transform: tr,
		CheckpointTicks: 1, Epochs: []wire.RainstormEpoch{{Tasks: []int{1, 2}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	step := func() (cuts int) {
		m.Tick()
		if c := m.Ready().Checkpoint; c != nil {
			m.CheckpointResult(store.Put(c))
			cuts++
		}
		return cuts
	}
	m.Batch(batch(1, false, "a", "b"))
	step()
	end := batch(2, true)
	end.Next = &next
	m.Batch(end)
	step() // the closing checkpoint: a marker on each output
	for to := range 2 {
		up := uint64(2) // count/0 acknowledges its batches
		if to == 1 {
			up = math.MaxUint64 // count/1 is Done: the driver acknowledges all of it
		}
		m.Ack(&wire.RainstormBatchAck{From: wire.RainstormTask{Stage: 2, Index: to}, UpTo: up, Epoch: 0})
	}
	cuts := 0
	for range 20 {
		cuts += step()
	}
	if m.Epoch() != 1 {
		t.Fatalf("the closing task is still in epoch %d after 20 ticks and %d more checkpoints: it never counted the Done receiver's channel drained", m.Epoch(), cuts)
	}
	if cuts > 2 {
		t.Errorf("%d checkpoints cut to drain one epoch", cuts)
	}
}
