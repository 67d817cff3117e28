package worker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tempest/internal/blobstore"
	"tempest/transport"
	"tempest/wire"
)

// serveBlob makes m answer chunk reads of content, counting them.
func serveBlob(m *testManager, content []byte, served *atomic.Int32) {
	m.tr.Handle(wire.TypeBlobChunkGet, func(_ context.Context, _ transport.Peer, msg wire.Message) (wire.Message, error) {
		g := msg.(*wire.BlobChunkGet)
		served.Add(1)
		end := min(g.Offset+g.Length, int64(len(content)))
		return &wire.BlobChunk{Sum: g.Sum, Offset: g.Offset, Size: int64(len(content)), Data: content[g.Offset:end]}, nil
	})
}

// TestSourceBlobReadSurvivesLeaderLoss: a `file:` source reads its blob
// chunk by chunk from the managers. When the leader dies in the middle of
// the read, the next chunks come from another manager that holds the blob,
// and the source reads the whole input.
func TestSourceBlobReadSurvivesLeaderLoss(t *testing.T) {
	content := bytes.Repeat([]byte("0123456789abcdef"), 3*blobstore.ChunkSize/16+100) // four chunks
	h := sha256.Sum256(content)
	var fromLeader, fromOther atomic.Int32
	var m2 *testManager
	hs := startHarness(t, harnessOption{
		cfg: func(c *Config) { c.Managers = []string{"m1", "m2"} },
		before: func(hs *harness) {
			m2 = newTestManager(t, hs.hub, "m2")
			serveBlob(m2, content, &fromOther)
			var leaderAlive atomic.Bool
			leaderAlive.Store(true)
			hs.m.tr.Handle(wire.TypeBlobChunkGet, func(ctx context.Context, p transport.Peer, msg wire.Message) (wire.Message, error) {
				if !leaderAlive.Load() {
					return nil, errors.New("leader gone")
				}
				// The leader serves one chunk, then dies.
				leaderAlive.Store(false)
				fromLeader.Add(1)
				g := msg.(*wire.BlobChunkGet)
				end := min(g.Offset+g.Length, int64(len(content)))
				go func() { _ = hs.m.tr.Close() }()
				return &wire.BlobChunk{Sum: g.Sum, Offset: g.Offset, Size: int64(len(content)), Data: content[g.Offset:end]}, nil
			})
		},
	})
	hs.waitRegistered(t, hs.m)
	if _, leader := hs.w.leader.current(); leader != "m1" {
		t.Fatalf("leader %q, want m1", leader)
	}

	r, err := hs.w.openBlob(context.Background(), hex.EncodeToString(h[:]))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("source read failed after the leader's loss: %v", err)
	}
	if !bytes.Equal(got, content) {
		t.Fatalf("read %d bytes, not the blob's %d", len(got), len(content))
	}
	if fromLeader.Load() != 1 || fromOther.Load() < 3 {
		t.Fatalf("chunks: %d from the leader, %d from m2; want 1 and the other 3", fromLeader.Load(), fromOther.Load())
	}
}

// TestSourceBlobReadGivesUp: with no manager answering, a chunk read backs
// off between rounds and fails once its bound has passed.
func TestSourceBlobReadGivesUp(t *testing.T) {
	var asked atomic.Int32
	hs := startHarness(t, harnessOption{before: func(hs *harness) {
		hs.m.tr.Handle(wire.TypeBlobChunkGet, func(context.Context, transport.Peer, wire.Message) (wire.Message, error) {
			asked.Add(1)
			return nil, &wire.Error{Code: wire.CodeNotFound, Message: "no such blob"}
		})
	}})
	hs.waitRegistered(t, hs.m)
	h := sha256.Sum256([]byte("absent"))
	r, err := hs.w.openBlob(context.Background(), hex.EncodeToString(h[:]))
	if err != nil {
		t.Fatal(err)
	}
	r.giveUp = 500 * time.Millisecond
	_, err = r.Read(make([]byte, 10))
	if err == nil || !strings.Contains(err.Error(), "no manager answered") || !strings.Contains(err.Error(), "no such blob") {
		t.Fatalf("read of a blob no manager serves: %v", err)
	}
	if n := asked.Load(); n < 2 {
		t.Fatalf("asked %d times before giving up, want a retry at least", n)
	}
}
