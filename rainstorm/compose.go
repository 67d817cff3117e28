package rainstorm

import (
	"fmt"

	"tempest/wire"
)

// Compose folds checkpoint c (whose Pending is a delta) into the stored
// state prev, as the CheckpointStore contract asks of every store: the
// runtime's replicated store composes on the leader and replicates the
// result, so a peer that missed a group still holds a whole state.
func Compose(prev, c *wire.RainstormCheckpoint) *wire.RainstormCheckpoint { return compose(prev, c) }

// PackPending returns a copy of c whose Pending batches are encoded as
// PendingBlobs: the runtime's form, which the managers keep without
// decoding records. A batch its task froze when it cut it is not encoded
// again: its blob is the bytes its sends carry. c is not changed (a
// machine resends it as it is).
func PackPending(c *wire.RainstormCheckpoint) (*wire.RainstormCheckpoint, error) {
	if len(c.Pending) == 0 {
		return c, nil
	}
	out := *c
	out.Pending = nil
	out.PendingBlobs = make([]wire.RainstormBatchBlob, 0, len(c.PendingBlobs)+len(c.Pending))
	out.PendingBlobs = append(out.PendingBlobs, c.PendingBlobs...)
	for i := range c.Pending {
		b := &c.Pending[i]
		raw, err := b.MarshalCBOR()
		if err != nil {
			return nil, fmt.Errorf("encode batch %d to task %d: %w", b.Seq, b.To, err)
		}
		out.PendingBlobs = append(out.PendingBlobs, wire.RainstormBatchBlob{From: b.From, To: b.To, Seq: b.Seq, Batch: raw})
	}
	return &out, nil
}

// UnpackPending decodes c's PendingBlobs into Pending, checking that each
// blob holds the batch its label says.
func UnpackPending(c *wire.RainstormCheckpoint) error {
	for _, bl := range c.PendingBlobs {
		var b wire.RainstormBatch
		if err := wire.Unmarshal(bl.Batch, &b); err != nil {
			return fmt.Errorf("decode batch %d to task %d: %w", bl.Seq, bl.To, err)
		}
		if b.To != bl.To || b.Seq != bl.Seq || b.From != c.Task {
			return fmt.Errorf("batch %d to task %d of %d.%d holds batch %d to task %d of %d.%d",
				bl.Seq, bl.To, c.Task.Stage, c.Task.Index, b.Seq, b.To, b.From.Stage, b.From.Index)
		}
		c.Pending = append(c.Pending, b)
	}
	c.PendingBlobs = nil
	return nil
}
