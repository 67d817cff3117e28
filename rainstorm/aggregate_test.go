package rainstorm

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"tempest/wire"
)

// keyRecords returns n records whose key (column 1) is k<from+i>.
func keyRecords(from, n int) []Record {
	out := make([]Record, n)
	for i := range out {
		out[i] = Record{ID: uint64(from + i), Fields: []string{fmt.Sprint("k", from+i)}}
	}
	return out
}

// A checkpoint carries only the keys changed since the previous one, per
// key group, and the store's composition of the deltas is the whole state:
// what a restart gets back. Logs the bytes per checkpoint with the old
// whole-state layout and with deltas, over 100k distinct keys.
func TestAggregateDeltasCompose(t *testing.T) {
	cs := compileStage(t, nil, Stage{Name: "c", Op: OpCount, Key: "1"})
	m, err := NewTaskMachine(TaskConfig{Task: wire.RainstormTask{Stage: 1}, Incarnation: 1, Upstream: 1, Stage: cs, CheckpointTicks: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	store := NewMemStore()
	if _, err := store.Fence(wire.RainstormTask{Stage: 1}, 1); err != nil {
		t.Fatal(err)
	}
	const keys, perBatch = 100_000, 4096
	var deltaBytes, wholeBytes, cuts, wholeCuts int
	seq := uint64(1)
	for pass := 0; pass < 2; pass++ { // every key twice
		for from := 0; from < keys; from += perBatch {
			recs := keyRecords(from, min(perBatch, keys-from))
			m.Batch(&wire.RainstormBatch{Incarnation: 1, Seq: seq, Records: recs})
			seq++
			m.Tick()
			r := m.Ready()
			if r.Checkpoint == nil {
				t.Fatalf("batch %d cut no checkpoint", seq-1)
			}
			c := r.Checkpoint
			changed := 0
			for _, g := range c.Groups {
				changed += len(g.Entries)
			}
			if changed != len(recs) {
				t.Fatalf("checkpoint %d carries %d keys, %d changed", c.Version, changed, len(recs))
			}
			b, _ := wire.Marshal(c)
			deltaBytes += len(b)
			cuts++
			if cuts%5 == 0 { // the old layout's size, sampled (a snapshot costs)
				whole := *c
				whole.Groups = m.agg.Snapshot()
				b, _ = wire.Marshal(&whole)
				wholeBytes += len(b)
				wholeCuts++
			}
			m.CheckpointResult(store.Put(c))
			if r := m.Ready(); r.Failed != nil {
				t.Fatal(r.Failed)
			}
		}
	}
	t.Logf("count over %d keys, %d checkpoints: %d bytes per checkpoint with whole state, %d with deltas",
		keys, cuts, wholeBytes/wholeCuts, deltaBytes/cuts)
	got := store.Latest(wire.RainstormTask{Stage: 1}).Groups
	if want := m.agg.Snapshot(); !reflect.DeepEqual(got, want) {
		t.Fatalf("composed state: %d groups, want %d", len(got), len(want))
	}
	total := 0
	for _, g := range got {
		for _, e := range g.Entries {
			total++
			if e.Count != 2 || KeyGroup(e.Key) != g.Group {
				t.Fatalf("entry %+v in group %d", e, g.Group)
			}
		}
	}
	if total != keys {
		t.Fatalf("%d keys composed, want %d", total, keys)
	}
	if deltaBytes/cuts*4 > wholeBytes/wholeCuts {
		t.Fatalf("deltas %d bytes, whole states %d: not incremental", deltaBytes, wholeBytes)
	}
	// A restart from the composed checkpoint holds every key.
	m2, err := NewTaskMachine(TaskConfig{Task: wire.RainstormTask{Stage: 1}, Incarnation: 2, Upstream: 1, Stage: cs}, store.Latest(wire.RainstormTask{Stage: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m2.agg.Snapshot(), got) || len(m2.agg.Delta()) != 0 {
		t.Fatal("restored state differs, or counts as changed")
	}
}

// After its inputs end an aggregate emits its final values a few key
// groups per checkpoint, never more than FlushRows rows of whole groups
// in one, and a restart mid-flush resumes at the recorded group.
func TestAggregateFlushesInSteps(t *testing.T) {
	cs := compileStage(t, nil, Stage{Name: "c", Op: OpCount, Key: "1"})
	task := wire.RainstormTask{Stage: 1}
	cfg := TaskConfig{Task: task, Incarnation: 1, Upstream: 1, Stage: cs, CheckpointTicks: 1, FlushRows: 200}
	m, err := NewTaskMachine(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	store := NewMemStore()
	store.Fence(task, 1)
	const keys = 5000
	m.Batch(&wire.RainstormBatch{Incarnation: 1, Seq: 1, Records: keyRecords(0, keys), EOS: true})
	cuts, restarted := 0, false
	for !store.Done(task) {
		m.Tick()
		r := m.Ready()
		if r.Checkpoint == nil {
			continue
		}
		if n := len(r.Checkpoint.Rows); n > 200+keys/KeyGroups*2 {
			t.Fatalf("checkpoint %d carries %d rows", r.Checkpoint.Version, n)
		}
		cuts++
		m.CheckpointResult(store.Put(r.Checkpoint))
		if !restarted && r.Checkpoint.Flushed > KeyGroups/2 {
			restarted = true
			cfg.Incarnation = 2
			latest, _ := store.Fence(task, 2)
			if m, err = NewTaskMachine(cfg, latest); err != nil {
				t.Fatal(err)
			}
		}
	}
	if cuts < 10 || !restarted {
		t.Fatalf("%d checkpoints (restarted %v)", cuts, restarted)
	}
	seen := map[string]bool{}
	for _, r := range store.Output(task) {
		if seen[r.Fields[0]] || r.Fields[1] != "1" {
			t.Fatalf("row %v twice or wrong", r.Fields)
		}
		seen[r.Fields[0]] = true
	}
	if len(seen) != keys {
		t.Fatalf("%d rows, want %d", len(seen), keys)
	}
}

// However many distinct keys arrive between two cuts, one checkpoint's
// delta stays near MaxDeltaBytes: input waits for the cut (the sender
// resends it), so no checkpoint outgrows a message.
func TestCheckpointDeltaBounded(t *testing.T) {
	cs := compileStage(t, nil, Stage{Name: "c", Op: OpCount, Key: "1"})
	m, err := NewTaskMachine(TaskConfig{Task: wire.RainstormTask{Stage: 1}, Incarnation: 1, Upstream: 1, Stage: cs, CheckpointTicks: 1000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("x", 100)
	const batches, per = 24, 4096 // about 12 MB of distinct keys
	for b := range batches {
		recs := make([]Record, per)
		for i := range recs {
			recs[i] = Record{ID: uint64(b*per + i), Fields: []string{fmt.Sprint(b*per+i, pad)}}
		}
		m.Batch(&wire.RainstormBatch{Incarnation: 1, Seq: uint64(b + 1), Records: recs})
	}
	m.Tick()
	c := m.Ready().Checkpoint
	if c == nil {
		t.Fatal("a full delta cut no checkpoint")
	}
	size, err := wire.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(size) > MaxDeltaBytes+per*(len(pad)+32) || c.Inputs[0].Next > batches {
		t.Fatalf("checkpoint of %d bytes after %d batches", len(size), c.Inputs[0].Next-1)
	}
	// The held batches go into the next checkpoints, each bounded too,
	// without waiting for their senders to resend.
	for c.Inputs[0].Next <= batches {
		m.CheckpointResult(&wire.RainstormCheckpointAck{Task: c.Task, Incarnation: 1, Version: c.Version})
		m.Tick()
		next := m.Ready().Checkpoint
		if next == nil || next.Inputs[0].Next <= c.Inputs[0].Next {
			t.Fatalf("no progress past batch %d", c.Inputs[0].Next-1)
		}
		if b, _ := wire.Marshal(next); len(b) > MaxDeltaBytes+per*(len(pad)+32) {
			t.Fatalf("checkpoint of %d bytes", len(b))
		}
		c = next
	}
	if m.Deferred() != 0 {
		t.Fatalf("%d batches left for a resend", m.Deferred())
	}
}

// A checkpoint of the old layout (the whole state in State) restores, and
// the next checkpoint carries those entries as groups, so a store that
// composes groups holds them from then on.
func TestAggregateRestoresOldLayout(t *testing.T) {
	cs := compileStage(t, nil, Stage{Name: "c", Op: OpCount, Key: "1"})
	a, _ := cs.NewAggregate()
	old := []wire.RainstormAggregate{{Key: "a", Count: 2}, {Key: "b", Count: 3}}
	if err := a.Restore(nil, old); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range a.Delta() {
		n += len(g.Entries)
	}
	if n != 2 {
		t.Fatalf("the next delta carries %d of the old layout's 2 entries", n)
	}
}
