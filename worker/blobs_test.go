package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"tempest/transport"
	"tempest/wire"
	"tempest/workflow"
)

// Two shards naming one data blob, dispatched to one worker, read it from
// the manager once (range reads of PeerChunk), and run with its rows; a
// blob whose bytes do not match its name is refused at dispatch.
func TestDispatchReadsDataBlobOnce(t *testing.T) {
	var csv strings.Builder
	csv.WriteString("user,pad\n")
	for i := range 2 {
		fmt.Fprintf(&csv, "u%d,%s\n", i, strings.Repeat("p", 300_000)) // two rows, three read chunks
	}
	content := []byte(csv.String())
	h := sha256.Sum256(content)
	sum := hex.EncodeToString(h[:])
	served := content
	var gets atomic.Int32
	var mu sync.Mutex
	seen := map[string]int{}
	// The requests wait until both shards run, so the first is still using
	// the blob when the second is dispatched.
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		mu.Lock()
		seen[r.URL.Path]++
		mu.Unlock()
	}))
	defer srv.Close()

	hs := startHarness(t, harnessOption{before: func(hs *harness) {
		hs.m.tr.Handle(wire.TypeBlobChunkGet, func(_ context.Context, _ transport.Peer, msg wire.Message) (wire.Message, error) {
			g := msg.(*wire.BlobChunkGet)
			gets.Add(1)
			end := min(g.Offset+g.Length, int64(len(served)))
			return &wire.BlobChunk{Sum: g.Sum, Offset: g.Offset, Size: int64(len(served)), Data: served[g.Offset:end]}, nil
		})
	}})
	hs.waitRegistered(t, hs.m)
	spec := func(shard, offset int) wire.WorkflowSpec {
		params, err := wire.Marshal(&workflow.HTTPParams{VUs: 1, Iterations: 3, VUOffset: offset,
			Data:  &workflow.HTTPData{File: "users.csv", Mode: workflow.DataPerVU, Blob: sum},
			Steps: []workflow.HTTPStep{{Name: "s", Method: "GET", URL: srv.URL + "/{{data.user}}"}}})
		if err != nil {
			t.Fatal(err)
		}
		return wire.WorkflowSpec{Name: "w", Type: "http", Cores: 1, Params: params, Shard: shard, Shards: 2}
	}
	hs.m.mustStart(t, "w1", dispatchOf("job-1", "wf-1", spec(1, 0), 7))
	hs.m.mustStart(t, "w1", dispatchOf("job-1", "wf-2", spec(2, 1), 7))
	close(release)
	for _, wf := range []string{"wf-1", "wf-2"} {
		if p := hs.m.waitFinal(t, wf); p.Status != wire.WorkflowCompleted || p.CompletedCount != 3 {
			t.Fatalf("%s: %s, %d completed (%s)", wf, p.Status, p.CompletedCount, p.Error)
		}
	}
	want := int32((len(content) + 256<<10 - 1) / (256 << 10))
	if got := gets.Load(); got != want {
		t.Fatalf("%d chunk reads for two shards, want %d (one read of the blob)", got, want)
	}
	mu.Lock()
	if seen["/u0"] != 3 || seen["/u1"] != 3 {
		t.Fatalf("requests %v, want 3 each for /u0 and /u1 (per_vu rows)", seen)
	}
	mu.Unlock()

	// Once no execution uses it, the content is forgotten; a corrupt copy
	// is then refused.
	hs.waitIdle(t)
	served = append([]byte(nil), content...)
	served[len(served)-2] ^= 1
	ack, err := hs.m.dispatch(t, "w1", dispatchOf("job-2", "wf-3", spec(1, 0), 8))
	if err != nil {
		t.Fatal(err)
	}
	if ack.Accepted || !strings.Contains(ack.Error, "does not match") {
		t.Fatalf("dispatch with a corrupt blob: accepted %v, %q", ack.Accepted, ack.Error)
	}
}
