package rainstorm

import (
	"bytes"
	"reflect"
	"testing"
	"unsafe"

	"tempest/wire"
)

// A batch is encoded once: the blob its checkpoint carries to the
// managers and the bytes each send and resend of it carries are the same
// memory, written when the task cut the batch.
func TestBatchEncodedOnceForCheckpointAndSend(t *testing.T) {
	store := NewMemStore()
	m := filterTask(t, store, 1)
	m.Batch(batch(1, false, "a", "b", "c"))
	m.Tick()
	r := m.Ready()
	if r.Checkpoint == nil || len(r.Checkpoint.Pending) != 1 {
		t.Fatalf("checkpoint %+v: want one pending batch", r.Checkpoint)
	}
	packed, err := PackPending(r.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	m.CheckpointResult(store.Put(r.Checkpoint))
	sent := m.Ready().Batches
	for range 3 * DefaultResendTicks {
		m.Tick() // unacknowledged: resent
	}
	sent = append(sent, m.Ready().Batches...)
	if len(sent) < 2 {
		t.Fatalf("%d sends of the batch, want the first and a resend", len(sent))
	}
	blob := packed.PendingBlobs[0].Batch
	for i, b := range sent {
		raw, err := b.MarshalCBOR()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(raw, blob) || unsafe.SliceData(raw) != unsafe.SliceData(blob) {
			t.Fatalf("send %d encoded the batch again (%d bytes) instead of carrying the checkpoint's %d", i, len(raw), len(blob))
		}
	}
	// What the managers keep reads back as the batch that was sent.
	var got wire.RainstormBatch
	if err := wire.Unmarshal(blob, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Records, sent[0].Records) || got.Seq != sent[0].Seq {
		t.Fatalf("the blob reads as %+v, the send had %+v", got, sent[0])
	}
}

// A source's batch, too, is encoded once however often it is resent.
func TestSourceBatchEncodedOnce(t *testing.T) {
	p, err := Compile(&Spec{Source: Source{Path: "/in"}, Stages: []Stage{{Name: "c", Op: OpCount, Key: "1"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSourceMachine(SourceConfig{Task: wire.RainstormTask{}, Incarnation: 1, Downstream: 1, Next: p.Stages[0]}, nil)
	if err != nil {
		t.Fatal(err)
	}
	src.Segment(Segment{Index: 0, Records: []Record{{ID: 0, Fields: []string{"x"}}, {ID: 1, Fields: []string{"y"}}}, End: Position{Record: 2}})
	first := src.Ready().Batches
	for range 3 * DefaultResendTicks {
		src.Tick()
	}
	again := src.Ready().Batches
	if len(first) != 1 || len(again) == 0 {
		t.Fatalf("sent %d, then resent %d batches", len(first), len(again))
	}
	a, _ := first[0].MarshalCBOR()
	b, _ := again[0].MarshalCBOR()
	if unsafe.SliceData(a) != unsafe.SliceData(b) {
		t.Fatal("the resend encoded the source's batch again")
	}
}

// An aggregate stores a copy of each new key: a received batch's fields
// are cut from one string per batch, which a stored key would otherwise
// keep whole for the task's life (every batch, over many keys).
func TestAggregateKeyDoesNotHoldItsBatch(t *testing.T) {
	p, err := Compile(&Spec{Source: Source{Path: "/in"}, Stages: []Stage{{Name: "c", Op: OpCount, Key: "1"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	agg, err := p.Stages[0].NewAggregate()
	if err != nil {
		t.Fatal(err)
	}
	b := viaWire(t, batch(1, false, "alpha", "beta", "alpha"))
	agg.Add(b.Records, func(err error) { t.Fatal(err) })
	held := map[*byte]string{}
	for _, r := range b.Records {
		held[unsafe.StringData(r.Fields[0])] = r.Fields[0]
	}
	n := 0
	for g := range agg.groups {
		for k := range agg.groups[g] {
			n++
			if s, ok := held[unsafe.StringData(k)]; ok {
				t.Fatalf("the stored key %q is the batch's own string %q", k, s)
			}
		}
	}
	if n != 2 {
		t.Fatalf("%d keys stored, want 2", n)
	}
}
