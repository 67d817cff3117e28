package rainstorm

import (
	"reflect"
	"testing"

	"tempest/wire"
)

// A checkpoint's batches survive the trip through their encoded form, and
// a blob whose batch is not the one its label names is refused.
func TestPackUnpackPending(t *testing.T) {
	task := wire.RainstormTask{Job: "j", Workflow: "w", Stage: 1, Index: 2}
	c := &wire.RainstormCheckpoint{Task: task, Incarnation: 3, Version: 4}
	for seq := range uint64(3) {
		c.Pending = append(c.Pending, wire.RainstormBatch{From: task, To: int(seq % 2), Seq: seq + 1,
			Records: []wire.RainstormRecord{{ID: seq, Fields: []string{"", "a,b", "x\ny"}}}})
	}
	packed, err := PackPending(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(packed.Pending) != 0 || len(packed.PendingBlobs) != 3 || len(c.Pending) != 3 {
		t.Fatalf("packed %d batches and %d blobs; the original keeps %d", len(packed.Pending), len(packed.PendingBlobs), len(c.Pending))
	}
	got := *packed
	if err := UnpackPending(&got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Pending, c.Pending) || got.PendingBlobs != nil {
		t.Fatalf("round trip: %+v, want %+v", got.Pending, c.Pending)
	}
	bad := *packed
	bad.PendingBlobs = append([]wire.RainstormBatchBlob(nil), packed.PendingBlobs...)
	bad.PendingBlobs[0].Seq = 9
	if err := UnpackPending(&bad); err == nil {
		t.Fatal("a blob labelled with another batch's number was accepted")
	}
}

func FuzzUnpackPending(f *testing.F) {
	task := wire.RainstormTask{Job: "j", Workflow: "w", Stage: 1}
	b, _ := wire.Marshal(&wire.RainstormBatch{From: task, Seq: 1, Records: []wire.RainstormRecord{{Fields: []string{"a"}}}})
	f.Add(b, 0, uint64(1))
	f.Add([]byte{0xa1, 0x04, 0x01}, 1, uint64(2))
	f.Fuzz(func(t *testing.T, raw []byte, to int, seq uint64) {
		c := &wire.RainstormCheckpoint{Task: task, PendingBlobs: []wire.RainstormBatchBlob{{From: task, To: to, Seq: seq, Batch: raw}}}
		if err := UnpackPending(c); err != nil {
			return
		}
		if len(c.Pending) != 1 || c.Pending[0].Seq != seq || c.Pending[0].To != to || c.Pending[0].From != task {
			t.Fatalf("accepted a batch that is not the labelled one: %+v", c.Pending)
		}
	})
}
