package blobstore

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"tempest/internal/lifecycle"
	"tempest/internal/testutil"
	"tempest/transport"
	"tempest/wire"
)

// node is one store serving its blobs on a Hub.
type node struct {
	id    string
	store *Store
	rep   *Replicator
	life  *lifecycle.Owner
}

func newNode(t *testing.T, hub *transport.Hub, id string) *node {
	t.Helper()
	st := openStore(t, testutil.DataDir(t, id), nil)
	tr := hub.Node(id)
	n := &node{id: id, store: st, rep: &Replicator{Store: st, Tr: tr, Log: testutil.Logger(t, 0)}, life: lifecycle.New()}
	if err := n.life.Start(); err != nil {
		t.Fatal(err)
	}
	lifecycle.Handle(n.life, tr, "test", wire.TypeBlobChunkPut, n.rep.HandlePut)
	lifecycle.Handle(n.life, tr, "test", wire.TypeBlobCommit, n.rep.HandleCommit)
	lifecycle.Handle(n.life, tr, "test", wire.TypeBlobStat, n.rep.HandleStat)
	lifecycle.Handle(n.life, tr, "test", wire.TypeBlobChunkGet, n.rep.HandleGet)
	t.Cleanup(func() {
		n.life.Close()
		n.life.Cancel()
		n.life.Wait()
		_ = tr.Close()
	})
	return n
}

func (n *node) holds(t *testing.T, b []byte) bool {
	t.Helper()
	got := make([]byte, len(b))
	if _, err := n.store.ReadAt(Of(b), got, 0); err != nil {
		return false
	}
	return bytes.Equal(got, b)
}

func TestReplicateToMajorityWithOnePeerDown(t *testing.T) {
	hub := transport.NewHub()
	a, b, c := newNode(t, hub, "m1"), newNode(t, hub, "m2"), newNode(t, hub, "m3")
	data := randomBytes(3*ChunkSize+17, 20)
	sum := put(t, a.store, data, ChunkSize)
	hub.Isolate("m3")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holders, err := a.rep.Replicate(ctx, a.life.Go, sum, []string{"m2", "m3"}, 2)
	if err != nil || holders != 2 {
		t.Fatalf("Replicate with one of three down = %d, %v; want a majority of 2", holders, err)
	}
	if !b.holds(t, data) {
		t.Fatal("m2 does not hold the verified blob")
	}
	if c.holds(t, data) {
		t.Fatal("isolated m3 holds the blob")
	}
	// Both peers down: no majority, and the caller is told so.
	hub.Isolate("m2")
	other := randomBytes(ChunkSize/2, 21)
	osum := put(t, a.store, other, ChunkSize)
	if _, err := a.rep.Replicate(ctx, a.life.Go, osum, []string{"m2", "m3"}, 2); err == nil {
		t.Fatal("Replicate succeeded with both peers cut off")
	}

	// Healed, the peer that missed the blob fetches it from one that has it.
	hub.Heal()
	if err := c.rep.Fetch(ctx, "m2", sum); err != nil {
		t.Fatalf("Fetch from a peer: %v", err)
	}
	if !c.holds(t, data) {
		t.Fatal("m3 does not hold the fetched blob")
	}
	if got := a.rep.Holders(ctx, sum, []string{"m2", "m3"}); len(got) != 2 {
		t.Fatalf("Holders = %v", got)
	}
}

func TestPushResumesAPartialAndRefusesCorruption(t *testing.T) {
	hub := transport.NewHub()
	a, b := newNode(t, hub, "m1"), newNode(t, hub, "m2")
	data := randomBytes(2*ChunkSize+5, 22)
	sum := put(t, a.store, data, ChunkSize)
	// m2 already holds the first chunk (an earlier push cut short).
	if _, err := b.store.WriteChunk(sum, 0, data[:ChunkSize]); err != nil {
		t.Fatal(err)
	}
	puts := 0
	hub.SetHook(func(from, to string, msg wire.Message) bool {
		if m, ok := msg.(*wire.BlobChunkPut); ok && to == "m2" {
			puts++
			if m.Offset == 0 {
				t.Errorf("push resent offset 0 to a receiver holding it")
			}
		}
		return true
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.rep.Push(ctx, "m2", sum); err != nil {
		t.Fatal(err)
	}
	hub.SetHook(nil)
	want := (len(data) - ChunkSize + PeerChunk - 1) / PeerChunk // only what m2 lacked
	if puts != want || !b.holds(t, data) {
		t.Fatalf("puts = %d (want %d), held = %v", puts, want, b.holds(t, data))
	}

	// A receiver never publishes bytes that do not match the sum.
	bad := randomBytes(1000, 23)
	badSum := Of(randomBytes(1000, 24))
	if _, err := a.rep.call(ctx, "m2", &wire.BlobChunkPut{Sum: badSum[:], Data: bad}); err != nil {
		t.Fatal(err)
	}
	_, err := a.rep.call(ctx, "m2", &wire.BlobCommit{Sum: badSum[:], Size: 1000})
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeRejected {
		t.Fatalf("commit of corrupt bytes = %v, want a rejected error", err)
	}
	if _, err := b.store.Stat(badSum); !errors.Is(err, ErrNotFound) {
		t.Fatalf("corrupt blob visible: %v", err)
	}
}
