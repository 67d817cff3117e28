package rsstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"tempest/rainstorm"
	"tempest/wire"
)

// soloHost runs a store alone: no peers, every request admitted.
type soloHost struct{}

func (soloHost) Peers() ([]string, int) { return nil, 1 }
func (soloHost) Call(context.Context, string, wire.Message) (wire.Message, error) {
	return nil, errors.New("no peers")
}
func (soloHost) Admit(*Request) *Result               { return nil }
func (soloHost) Opened(uint64, []*wire.RainstormOpen) {}
func (soloHost) StaleReason(string, uint64) string    { return "" }
func (soloHost) Logger() *slog.Logger                 { return slog.New(slog.DiscardHandler) }

func openSolo(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, soloHost{}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A peer stores deltas composed with its own state, each batch once: an
// acknowledged batch leaves the disk, a delta whose base the peer does not
// hold is named missing and not stored, a whole state repairs it, and a
// group undone after it missed a majority leaves the state before it, and
// a deposed leader's group is refused once a newer leader read the store.
func TestStoreDeltas(t *testing.T) {
	dir := t.TempDir()
	s := openSolo(t, dir)
	task := wire.RainstormTask{Job: "j", Workflow: "pipe", Stage: 1}
	batch := func(seq uint64) wire.RainstormBatch {
		return wire.RainstormBatch{From: task, Seq: seq, Records: []wire.RainstormRecord{{ID: seq, Fields: []string{fmt.Sprint(seq)}}}}
	}
	ckpt := func(inc, version, acked uint64, seqs ...uint64) wire.RainstormCheckpoint {
		c := wire.RainstormCheckpoint{Task: task, Incarnation: inc, Version: version,
			Inputs: []wire.RainstormInput{{Next: version + 1}}, Outputs: []wire.RainstormOutput{{Acked: acked}}}
		for _, q := range seqs {
			c.Pending = append(c.Pending, batch(q))
		}
		packed, err := rainstorm.PackPending(&c)
		if err != nil {
			t.Fatal(err)
		}
		return *packed
	}
	seqs := func(c *wire.RainstormCheckpoint) []uint64 {
		var out []uint64
		for _, b := range c.PendingBlobs {
			out = append(out, b.Seq)
		}
		return out
	}
	onDisk := func() int {
		n := 0
		if err := s.db.View(func(tx *bolt.Tx) error {
			n = tx.Bucket(bucketBatch).Stats().KeyN
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	replicate := func(deltas ...wire.RainstormDelta) (int, []wire.RainstormTask) {
		t.Helper()
		n, missing, err := s.storeReplicated(&wire.RainstormReplicate{Term: 5, Deltas: deltas}, func() string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		return n, missing
	}
	if n, missing := replicate(wire.RainstormDelta{Checkpoint: ckpt(5, 1, 0, 1, 2)}); n != 1 || len(missing) > 0 {
		t.Fatalf("first delta: stored %d, missing %v", n, missing)
	}
	if n, missing := replicate(wire.RainstormDelta{BaseVersion: 1, BaseIncarnation: 5, Checkpoint: ckpt(5, 2, 1, 3)}); n != 1 || len(missing) > 0 {
		t.Fatalf("second delta: stored %d, missing %v", n, missing)
	}
	if got := seqs(s.Latest(task)); !slices.Equal(got, []uint64{2, 3}) || onDisk() != 2 {
		t.Fatalf("after an ack of 1: pending %v, %d batches on disk; want [2 3] and 2", got, onDisk())
	}
	// The same delta again (a leader's retry) is stored already.
	if n, missing := replicate(wire.RainstormDelta{BaseVersion: 1, BaseIncarnation: 5, Checkpoint: ckpt(5, 2, 1, 3)}); n != 1 || len(missing) > 0 {
		t.Fatalf("repeated delta: stored %d, missing %v", n, missing)
	}
	// A group this peer missed (version 3): version 4's base is not here.
	if n, missing := replicate(wire.RainstormDelta{BaseVersion: 3, BaseIncarnation: 5, Checkpoint: ckpt(5, 4, 3, 5)}); n != 0 || !slices.Equal(missing, []wire.RainstormTask{task}) {
		t.Fatalf("delta on a missing base: stored %d, missing %v", n, missing)
	}
	if l := s.Latest(task); l.Version != 2 {
		t.Fatalf("a delta on a missing base was stored: version %d", l.Version)
	}
	whole := ckpt(5, 4, 3, 4, 5)
	if _, _, err := s.storeReplicated(&wire.RainstormReplicate{Term: 5, Checkpoints: []wire.RainstormCheckpoint{whole}}, func() string { return "" }); err != nil {
		t.Fatal(err)
	}
	if got := seqs(s.Latest(task)); !slices.Equal(got, []uint64{4, 5}) || onDisk() != 2 {
		t.Fatalf("after a whole state: pending %v, %d batches on disk; want [4 5] and 2", got, onDisk())
	}
	// Once a leader of term 6 read this store, a deposed leader's group
	// (term 5) is refused: it could be acknowledged on a majority the new
	// leader did not see.
	s.promise(6, nil, nil, syncAsk{})
	if _, _, err := s.storeReplicated(&wire.RainstormReplicate{Term: 5, Deltas: []wire.RainstormDelta{{BaseVersion: 4, BaseIncarnation: 5, Checkpoint: ckpt(5, 5, 4, 6)}}},
		func() string { return "" }); !errors.Is(err, wire.ErrStaleFence) {
		t.Fatalf("a group of a term older than a sync answered: %v, want a stale fence", err)
	}
	if l := s.Latest(task); l.Version != 4 {
		t.Fatalf("a deposed leader's group was stored: version %d", l.Version)
	}
	// A leader's group that missed a majority is undone on its disk.
	prev := s.Latest(task)
	next := ckpt(5, 5, 5, 6)
	group := []change{{prev: prev, next: &next}}
	if err := s.persist(group, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.revert(group); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openSolo(t, dir)
	defer s.Close()
	l := s.Latest(task)
	if l == nil || l.Version != 4 || !slices.Equal(seqs(l), []uint64{4, 5}) || onDisk() != 2 {
		t.Fatalf("reloaded: %+v, %d batches on disk; want version 4 holding [4 5]", l, onDisk())
	}
}

// A store larger than one message is read by a new leader in pages, each
// under the transport's limit, together holding every task's state and
// rows once: one response for everything wedged every later leader once
// the pipelines' states outgrew 10 MiB.
func TestSyncPages(t *testing.T) {
	s := openSolo(t, t.TempDir())
	defer s.Close()
	field := strings.Repeat("x", 100)
	var whole []wire.RainstormCheckpoint
	for i := range 4 {
		task := wire.RainstormTask{Job: "j", Workflow: "pipe", Stage: 1, Index: i}
		c := wire.RainstormCheckpoint{Task: task, Incarnation: 1, Version: 1, Outputs: []wire.RainstormOutput{{}},
			Rows: []wire.RainstormRecord{{Fields: []string{"k", "1"}}}}
		for seq := range 35 {
			b := wire.RainstormBatch{From: task, Seq: uint64(seq + 1)}
			for r := range 1000 {
				b.Records = append(b.Records, wire.RainstormRecord{ID: uint64(r), Fields: []string{field}})
			}
			c.Pending = append(c.Pending, b)
		}
		packed, err := rainstorm.PackPending(&c)
		if err != nil {
			t.Fatal(err)
		}
		whole = append(whole, *packed)
	}
	if _, _, err := s.storeReplicated(&wire.RainstormReplicate{Term: 1, Checkpoints: whole}, func() string { return "" }); err != nil {
		t.Fatal(err)
	}
	var after []byte
	latest, rows, pages := map[int]int{}, map[int]int{}, 0
	for {
		page := s.snapshot(nil, after, syncAsk{})
		pages++
		b, err := wire.Marshal(page)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 10<<20 {
			t.Fatalf("page %d is %d bytes, over the transport's 10 MiB", pages, len(b))
		}
		for _, c := range page.Checkpoints {
			if c.Incarnation != 0 {
				latest[c.Task.Index] += len(c.PendingBlobs)
			} else {
				rows[c.Task.Index] += len(c.Rows)
			}
		}
		if !page.More {
			break
		}
		after = page.Next
	}
	for i := range 4 {
		if latest[i] != 35 || rows[i] != 1 {
			t.Fatalf("task %d read as %d pending batches and %d rows over %d pages, want 35 and 1", i, latest[i], rows[i], pages)
		}
	}
	if pages < 2 {
		t.Fatalf("%d page for about 14 MB", pages)
	}
}
