package blobstore

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"tempest/internal/lifecycle"
	"tempest/internal/testutil"
	"tempest/transport"
	"tempest/wire"
)

// roleNode is a Node serving its group's blob messages on a Hub the way
// both roles do: writes from members only, reads through HandleGet.
func roleNode(t *testing.T, hub *transport.Hub, id string, members []string, now func() time.Time) *Node {
	t.Helper()
	life := lifecycle.New()
	if err := life.Start(); err != nil {
		t.Fatal(err)
	}
	tr := hub.Node(id)
	isMember := func(from string) bool { return from != id && slices.Contains(members, from) }
	n, err := OpenNode(NodeConfig{DataDir: testutil.DataDir(t, id), Tr: tr, Log: testutil.Logger(t, 0), Now: now,
		Peers: func() ([]string, int) {
			var out []string
			for _, m := range members {
				if m != id {
					out = append(out, m)
				}
			}
			return out, len(members)/2 + 1
		},
		Spawn: life.Go})
	if err != nil {
		t.Fatal(err)
	}
	lifecycle.Handle(life, tr, "test", wire.TypeBlobChunkPut, MembersOnly(isMember, "a member", n.Rep.HandlePut))
	lifecycle.Handle(life, tr, "test", wire.TypeBlobCommit, MembersOnly(isMember, "a member", n.Rep.HandleCommit))
	lifecycle.Handle(life, tr, "test", wire.TypeBlobStat, n.Rep.HandleStat)
	lifecycle.Handle(life, tr, "test", wire.TypeBlobChunkGet, n.HandleGet(isMember))
	t.Cleanup(func() {
		life.Close()
		life.Cancel()
		life.Wait()
		_ = tr.Close()
	})
	return n
}

// HandleGet, the read both roles serve: an outsider (a worker, a manager
// reading through a gate) is served a blob this node lacks once it fetched
// it from the group; a member asking is never made to wait on a fetch; a
// blob nobody holds and a malformed sum get typed answers.
func TestNodeHandleGet(t *testing.T) {
	hub := transport.NewHub()
	members := []string{"m1", "m2", "m3"}
	m1, m2 := roleNode(t, hub, "m1", members, nil), roleNode(t, hub, "m2", members, nil)
	roleNode(t, hub, "m3", members, nil)
	outsider := hub.Node("w1")
	t.Cleanup(func() { _ = outsider.Close() })
	onlyM2 := randomBytes(ChunkSize+5, 30)
	put(t, m2.Store, onlyM2, ChunkSize)
	forMember := randomBytes(100, 31)
	put(t, m2.Store, forMember, ChunkSize)
	nowhere := Of([]byte("held by nobody"))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		from transport.Transport
		sum  []byte
		code wire.Code // 0 = served
		held bool      // m1 holds the blob afterwards
	}{
		{"an outsider reads a blob m1 lacks", outsider, sumBytes(Of(onlyM2)), 0, true},
		{"a member is not made to wait on a fetch", hub.Node("m3"), sumBytes(Of(forMember)), wire.CodeNotFound, false},
		{"nobody holds it", outsider, sumBytes(nowhere), wire.CodeNotFound, false},
		{"a malformed sum", outsider, []byte("short"), wire.CodeMalformed, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reply, err := tc.from.Call(ctx, "m1", &wire.BlobChunkGet{Sum: tc.sum, Length: 64})
			if tc.code != 0 {
				if wire.CodeOf(err) != tc.code {
					t.Fatalf("get: %v, %v; want %s", reply, err, tc.code)
				}
			} else if c, ok := reply.(*wire.BlobChunk); err != nil || !ok || len(c.Data) != 64 {
				t.Fatalf("get: %v, %v; want 64 bytes", reply, err)
			}
			if sum, err := SumFromBytes(tc.sum); err == nil {
				if ok, _ := m1.Cluster.HasLocal(sum); ok != tc.held {
					t.Fatalf("m1 holds the blob: %v, want %v", ok, tc.held)
				}
			}
		})
	}
}

func sumBytes(s Sum) []byte { return s[:] }

// Collect keeps what live names, whatever its age, removes the rest once
// its retention has passed, and ignores a name that is not a sum.
func TestNodeCollect(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	n := roleNode(t, transport.NewHub(), "m1", []string{"m1"}, clock)
	kept, dropped := randomBytes(10, 40), randomBytes(10, 41)
	put(t, n.Store, kept, ChunkSize)
	put(t, n.Store, dropped, ChunkSize)
	live := []string{Of(kept).String(), "not a sum"}
	if res, err := n.Collect(live, time.Hour); err != nil || len(res.Blobs) != 0 {
		t.Fatalf("collect within retention: %+v, %v; want nothing removed", res, err)
	}
	now.Add(int64(2 * time.Hour))
	res, err := n.Collect(live, time.Hour)
	if err != nil || len(res.Blobs) != 1 || res.Blobs[0] != Of(dropped) {
		t.Fatalf("collect after retention: %+v, %v; want only the unreferenced blob removed", res, err)
	}
	if ok, _ := n.Cluster.HasLocal(Of(kept)); !ok {
		t.Fatal("a live blob was removed")
	}
}
