package rainstorm

import (
	"fmt"
	"sync"

	"tempest/rainstorm/ckpt"
	"tempest/wire"
)

// CheckpointStore keeps every task's latest durable checkpoint. The
// runtime's store lives on a majority of the datacenter's managers; its
// contract is this interface's:
//
//   - Fence makes inc the task's incarnation and returns the task's latest
//     checkpoint, atomically: from then on, Put refuses checkpoints of any
//     older incarnation. A replacement task calls it before it does
//     anything, so a frozen predecessor that wakes up can publish nothing.
//   - A checkpoint's Pending and Rows are deltas: Pending holds the batches
//     cut since the previous checkpoint, and the store keeps every earlier
//     batch until the checkpoint's Outputs say the receiver acknowledged
//     it; Fence returns the composed state (all unacknowledged batches).
//   - Put is a compare-and-set: it stores ckpt only if ckpt.Incarnation is
//     the task's current incarnation and ckpt.Version is one past the
//     stored version. A checkpoint's Rows are published (appended to the
//     task's output) in the same atomic step. A repeated Put of the stored
//     version by the same incarnation is acknowledged again without effect,
//     so a resent checkpoint is harmless.
type CheckpointStore interface {
	Fence(task wire.RainstormTask, inc uint64) (*wire.RainstormCheckpoint, error)
	Put(ckpt *wire.RainstormCheckpoint) *wire.RainstormCheckpointAck
}

// MemStore is an in-memory CheckpointStore: the reference for the
// runtime's replicated store, and the store of the simulation and the
// benchmarks. Safe for concurrent use.
type MemStore struct {
	mu    sync.Mutex
	tasks map[wire.RainstormTask]*storedTask
	// Encode marshals every checkpoint, as a store that writes them would
	// (the benchmarks count the cost).
	Encode bool
	Bytes  int64 // total encoded bytes when Encode
}

type storedTask struct {
	inc    uint64
	latest *wire.RainstormCheckpoint
	rows   []Record
}

// NewMemStore returns an empty store.
func NewMemStore() *MemStore {
	return &MemStore{tasks: map[wire.RainstormTask]*storedTask{}}
}

func (s *MemStore) task(t wire.RainstormTask) *storedTask {
	st := s.tasks[t]
	if st == nil {
		st = &storedTask{}
		s.tasks[t] = st
	}
	return st
}

// Fence implements CheckpointStore.
func (s *MemStore) Fence(t wire.RainstormTask, inc uint64) (*wire.RainstormCheckpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.task(t)
	if inc <= st.inc {
		return nil, fmt.Errorf("fence task %s/%d.%d: incarnation %d is not newer than %d", t.Workflow, t.Stage, t.Index, inc, st.inc)
	}
	st.inc = inc
	return st.latest, nil
}

// Put implements CheckpointStore.
func (s *MemStore) Put(c *wire.RainstormCheckpoint) *wire.RainstormCheckpointAck {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.task(c.Task)
	ack := &wire.RainstormCheckpointAck{Task: c.Task, Incarnation: c.Incarnation, Version: c.Version, Current: st.inc}
	var have uint64
	if st.latest != nil {
		have = st.latest.Version
	}
	switch {
	case c.Incarnation != st.inc:
		ack.Refused = true
		ack.Reason = fmt.Sprintf("incarnation %d is not the task's current %d", c.Incarnation, st.inc)
	case c.Version == have && st.latest != nil && st.latest.Incarnation == c.Incarnation:
		// The same checkpoint again (a resend): already durable.
	case c.Version != have+1:
		ack.Refused = true
		ack.Reason = fmt.Sprintf("version %d does not follow the stored %d", c.Version, have)
	default:
		if s.Encode {
			b, err := wire.Marshal(c)
			if err != nil {
				ack.Refused, ack.Reason = true, err.Error()
				return ack
			}
			s.Bytes += int64(len(b))
		}
		st.latest = compose(st.latest, c)
		st.rows = append(st.rows, c.Rows...)
	}
	return ack
}

// compose folds checkpoint c into the stored state prev: c's positions and
// operator state, prev's still-unacknowledged batches followed by c's.
func compose(prev, c *wire.RainstormCheckpoint) *wire.RainstormCheckpoint {
	if prev == nil {
		return c
	}
	out := *c
	out.Groups = ckpt.ComposeGroups(prev.Groups, c.Groups)
	if len(prev.Pending) == 0 {
		return &out
	}
	out.Rows = nil // published already; the composed state is for restarts
	out.Pending = ckpt.Unacked(prev.Pending, c.Pending, c.Outputs,
		func(b *wire.RainstormBatch) (int, uint64) { return b.To, b.Seq })
	return &out
}

// Output returns the rows task has published, in checkpoint order.
func (s *MemStore) Output(t wire.RainstormTask) []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.tasks[t]; st != nil {
		return append([]Record(nil), st.rows...)
	}
	return nil
}

// Done reports whether task's latest durable checkpoint is its final one.
func (s *MemStore) Done(t wire.RainstormTask) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.tasks[t]
	return st != nil && st.latest != nil && st.latest.Done
}

// Latest returns task's latest durable checkpoint.
func (s *MemStore) Latest(t wire.RainstormTask) *wire.RainstormCheckpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.tasks[t]; st != nil {
		return st.latest
	}
	return nil
}
