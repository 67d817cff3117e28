package api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"tempest/api"
	"tempest/api/apitest"
	"tempest/internal/blobstore"
	"tempest/wire"
	"tempest/workflow"
)

// blobBackend is apitest.Backend plus an in-memory blob store with the
// manager's chunk rules; a commit is durable only on its second call, as
// when replication outlasts the first request.
type blobBackend struct {
	*apitest.Backend
	mu      sync.Mutex
	partial map[string][]byte
	stored  map[string][]byte
	commits map[string]int
	puts    int
	// leaderChange: the first commit finds half the upload (a new leader
	// that got only part of it).
	leaderChange bool
	// grow, when set, is the blob a previous leader is still replicating
	// here: before each chunk is taken, growStep more bytes of it land.
	grow     []byte
	growStep int
}

func newBlobBackend() *blobBackend {
	return &blobBackend{Backend: apitest.NewBackend(), partial: map[string][]byte{},
		stored: map[string][]byte{}, commits: map[string]int{}}
}

func (b *blobBackend) StatBlob(_ context.Context, sum string) (*api.BlobInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	data, ok := b.stored[sum]
	if !ok {
		return nil, wire.Errorf(wire.CodeNotFound, "blob %s not stored", sum)
	}
	return &api.BlobInfo{SHA256: sum, Size: int64(len(data)), Replicas: 2, Needed: 2, Durable: b.commits[sum] >= 2}, nil
}

func (b *blobBackend) PutBlobChunk(_ context.Context, sum string, off int64, data []byte) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.puts++
	if b.grow != nil {
		n := min(len(b.partial[sum])+b.growStep, len(b.grow))
		b.partial[sum] = append([]byte(nil), b.grow[:n]...)
	}
	have := int64(len(b.partial[sum]))
	switch {
	case off+int64(len(data)) <= have:
		return have, nil
	case off != have:
		return have, nil
	}
	b.partial[sum] = append(b.partial[sum], data...)
	return int64(len(b.partial[sum])), nil
}

func (b *blobBackend) CommitBlob(_ context.Context, sum string, size int64) (*api.BlobInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.leaderChange {
		b.leaderChange = false
		half := int64(len(b.partial[sum]) / 2)
		b.partial[sum] = b.partial[sum][:half]
		return nil, &api.BlobGapError{Sum: sum, Have: half, Size: size}
	}
	if _, ok := b.stored[sum]; !ok {
		data := b.partial[sum]
		h := sha256.Sum256(data)
		if int64(len(data)) != size || hex.EncodeToString(h[:]) != sum {
			delete(b.partial, sum)
			return nil, wire.Errorf(wire.CodeRejected, "blob %s does not match", sum)
		}
		b.stored[sum] = data
	}
	b.commits[sum]++
	return &api.BlobInfo{SHA256: sum, Size: size, Replicas: b.commits[sum], Needed: 2, Durable: b.commits[sum] >= 2}, nil
}

func (b *blobBackend) ReadBlob(_ context.Context, sum string, limit int64) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	data, ok := b.stored[sum]
	if !ok {
		return nil, wire.Errorf(wire.CodeNotFound, "blob %s not stored", sum)
	}
	if int64(len(data)) > limit {
		return nil, wire.Errorf(wire.CodeRejected, "too big")
	}
	return data, nil
}

func sumOf(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// An upload resumes where the server's copy ends, waits through a 202
// until the blob is durable, and is skipped once the cluster holds it.
func TestUploadBlobResumesAndWaitsForDurable(t *testing.T) {
	be := newBlobBackend()
	srv := apitest.Serve(t, be, nil)
	c := newClient(t, srv.URL())
	data := bytes.Repeat([]byte("0123456789abcdef"), (5*api.MaxBlobChunk/2)/16)
	sum := sumOf(data)
	be.partial[sum] = append([]byte(nil), data[:api.MaxBlobChunk+100]...) // a cut-off earlier upload
	var sent []int64
	info, err := c.UploadBlob(context.Background(), sum, bytes.NewReader(data), int64(len(data)), func(s, _ int64) { sent = append(sent, s) })
	if err != nil {
		t.Fatal(err)
	}
	if !info.Durable || be.commits[sum] != 2 || !bytes.Equal(be.stored[sum], data) {
		t.Fatalf("info %+v after %d commits; stored intact: %v", info, be.commits[sum], bytes.Equal(be.stored[sum], data))
	}
	// Chunk 0 answered "I have more", then the client went on from there.
	if len(sent) < 2 || sent[0] != api.MaxBlobChunk+100 || sent[len(sent)-1] != int64(len(data)) {
		t.Fatalf("progress %v", sent)
	}
	puts := be.puts
	if _, err := c.UploadBlob(context.Background(), sum, bytes.NewReader(data), int64(len(data)), nil); err != nil || be.puts != puts {
		t.Fatalf("second upload sent %d chunks (err %v), want none", be.puts-puts, err)
	}
}

func TestBlobRoutesRefuseBadRequests(t *testing.T) {
	be := newBlobBackend()
	srv := apitest.Serve(t, be, nil)
	rc := newRawClient(t)
	sum := sumOf([]byte("abc"))
	for _, tc := range []struct {
		name, method, path string
		body               []byte
		status             int
		code               string
	}{
		{"short sum", "PUT", "/v1/blobs/abc?offset=0", []byte("x"), 400, api.CodeMalformed},
		{"not hex", "GET", "/v1/blobs/" + strings.Repeat("g", 64), nil, 400, api.CodeMalformed},
		{"no offset", "PUT", "/v1/blobs/" + sum, []byte("x"), 400, api.CodeMalformed},
		{"negative offset", "PUT", "/v1/blobs/" + sum + "?offset=-1", []byte("x"), 400, api.CodeMalformed},
		{"two offsets", "PUT", "/v1/blobs/" + sum + "?offset=0&offset=1", []byte("x"), 400, api.CodeMalformed},
		{"gap", "PUT", "/v1/blobs/" + sum + "?offset=2", []byte("c"), 409, api.CodeRejected},
		{"chunk too large", "PUT", "/v1/blobs/" + sum + "?offset=0", make([]byte, api.MaxBlobChunk+1), 413, api.CodeTooLarge},
		{"unknown", "GET", "/v1/blobs/" + sum, nil, 404, api.CodeNotFound},
		{"commit short", "POST", "/v1/blobs/" + sum + "/commit?size=3", nil, 409, api.CodeRejected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rc.do(tc.method, srv.URL()+tc.path, tc.body, map[string]string{"Authorization": "Bearer " + apitest.Token})
			if resp.StatusCode != tc.status {
				t.Fatalf("%s %s = %d %s, want %d", tc.method, tc.path, resp.StatusCode, body, tc.status)
			}
			if e := decodeErrorBody(t, body); e.Code != tc.code {
				t.Fatalf("code %q (%s), want %q", e.Code, e.Error, tc.code)
			}
			if tc.name == "gap" {
				if e := decodeErrorBody(t, body); e.Have == nil || *e.Have != 0 {
					t.Fatalf("gap answer without have=0: %s", body)
				}
			}
		})
	}
	// A backend without blobs (a gate) says so.
	plain := apitest.Serve(t, apitest.NewBackend(), nil)
	resp, body := rc.do("GET", plain.URL()+"/v1/blobs/"+sum, nil, map[string]string{"Authorization": "Bearer " + apitest.Token})
	if resp.StatusCode != http.StatusNotImplemented || decodeErrorBody(t, body).Code != api.CodeUnsupported {
		t.Fatalf("blob route on a blob-less backend: %d %s", resp.StatusCode, body)
	}
}

// tempest submit's path: data files are uploaded as blobs first and the
// job names them, so the shards' params carry no CSV; against a backend
// without blobs the bytes go inline as before.
func TestSubmitWithDataUploadsBlobs(t *testing.T) {
	job := []byte(`name: j
workflows:
  - {name: w, type: http, vus: 3, iterations: 3, shards: 3, data: {file: users.csv}, steps: [{name: s, url: "http://x/{{data.user}}"}]}
`)
	csv := []byte("user\n" + strings.Repeat("alice\n", 10_000))
	for _, blobs := range []bool{true, false} {
		var be interface {
			api.Backend
			Submissions() []*wire.JobSubmission
		}
		if blobs {
			be = newBlobBackend()
		} else {
			be = apitest.NewBackend()
		}
		srv := apitest.Serve(t, be, nil)
		c := newClient(t, srv.URL())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.SubmitWithData(ctx, job, "job.yaml", map[string][]byte{"users.csv": csv}); err != nil {
			t.Fatalf("blobs=%v: %v", blobs, err)
		}
		subs := be.Submissions()
		if len(subs) != 1 || len(subs[0].Workflows) != 3 {
			t.Fatalf("blobs=%v: submissions %+v", blobs, subs)
		}
		for _, spec := range subs[0].Workflows {
			got, err := workflow.DefaultRegistry().SpecBlobs(spec)
			if err != nil {
				t.Fatal(err)
			}
			small := len(spec.Params) < len(csv)
			if blobs && (len(got) != 1 || got[0] != sumOf(csv) || !small) {
				t.Fatalf("shard %d names blobs %v with %d bytes of params; want the data file's blob and no text", spec.Shard, got, len(spec.Params))
			}
			if !blobs && (len(got) != 0 || small) {
				t.Fatalf("without blobs, shard %d names %v with %d bytes of params; want the text inline", spec.Shard, got, len(spec.Params))
			}
		}
	}
}

// A commit that finds the upload short (the leader changed after the last
// chunk) sends the client back to upload the rest.
func TestUploadBlobResumesAfterShortCommit(t *testing.T) {
	be := newBlobBackend()
	be.leaderChange = true
	srv := apitest.Serve(t, be, nil)
	c := newClient(t, srv.URL())
	data := bytes.Repeat([]byte("xyz"), api.MaxBlobChunk) // 3 MiB
	sum := sumOf(data)
	info, err := c.UploadBlob(context.Background(), sum, bytes.NewReader(data), int64(len(data)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Durable || !bytes.Equal(be.stored[sum], data) {
		t.Fatalf("after a short commit: %+v, stored intact %v", info, bytes.Equal(be.stored[sum], data))
	}
}

// A previous leader may still be replicating the blob to the new leader
// while the client uploads to it: the copy grows under the client, and
// every chunk is answered "I hold more than that, send from there". Those
// answers move the upload forward, so they do not use up the few resumes
// it allows for being sent back (TestBlobUpload256MiB failed so under load).
func TestUploadBlobFollowsACopyGrowingUnderIt(t *testing.T) {
	be := newBlobBackend()
	data := bytes.Repeat([]byte("growing!"), 5*api.MaxBlobChunk/8) // 5 MiB
	sum := sumOf(data)
	be.grow, be.growStep = data, 192<<10 // every chunk finds the copy ahead of it
	srv := apitest.Serve(t, be, nil)
	c := newClient(t, srv.URL())
	info, err := c.UploadBlob(context.Background(), sum, bytes.NewReader(data), int64(len(data)), nil)
	if err != nil {
		t.Fatalf("upload while the copy grows: %v (after %d chunks)", err, be.puts)
	}
	if !info.Durable || !bytes.Equal(be.stored[sum], data) {
		t.Fatalf("%+v, stored intact %v", info, bytes.Equal(be.stored[sum], data))
	}
}

// Chunks are requests: an upload faster than the per-client rate limit
// waits as told instead of failing.
func TestUploadBlobWaitsOutRateLimit(t *testing.T) {
	be := newBlobBackend()
	srv := apitest.Serve(t, be, func(cfg *api.ServerConfig) { cfg.RateLimit, cfg.RateBurst = 20, 2 })
	c := newClient(t, srv.URL())
	data := bytes.Repeat([]byte("r"), 3*api.MaxBlobChunk/2)
	data = append(data, bytes.Repeat([]byte("s"), 3*api.MaxBlobChunk)...)
	sum := sumOf(data)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := c.UploadBlob(ctx, sum, bytes.NewReader(data), int64(len(data)), nil)
	if err != nil {
		t.Fatalf("upload through a rate limit of 20/s, burst 2: %v", err)
	}
	if !info.Durable || !bytes.Equal(be.stored[sum], data) {
		t.Fatalf("%+v", info)
	}
}

// The blob routes over a real store: a chunk that would cross the node's
// free-space floor is 507 naming the setting, and offsets no blob can
// have are client errors, never 500.
func TestBlobRoutesOverAFullStore(t *testing.T) {
	n, err := blobstore.OpenNode(blobstore.NodeConfig{DataDir: t.TempDir(),
		Peers: func() ([]string, int) { return nil, 1 }, Spawn: func(func(context.Context)) bool { return false },
		// A floor no disk can keep: every write would cross it.
		Limits: blobstore.Limits{MinFree: math.MaxInt64 / 2}})
	if err != nil {
		t.Fatal(err)
	}
	be := struct {
		*apitest.Backend
		*api.BlobService
	}{apitest.NewBackend(), api.NewBlobService(n.Cluster, func(context.Context) error { return nil }, t.Context(), slog.New(slog.DiscardHandler))}
	srv := apitest.Serve(t, be, nil)
	rc := newRawClient(t)
	auth := map[string]string{"Authorization": "Bearer " + apitest.Token}
	sum := sumOf([]byte("abc"))
	for _, tc := range []struct {
		name, path string
		status     int
		code, text string
	}{
		{"full disk", "/v1/blobs/" + sum + "?offset=0", http.StatusInsufficientStorage, api.CodeInsufficientStorage, "blob_min_free"},
		{"offset of the issue", "/v1/blobs/" + sum + "?offset=17179869184", http.StatusBadRequest, api.CodeMalformed, "largest blob"},
		{"chunk ending past the largest blob", "/v1/blobs/" + sum + "?offset=" + strconv.FormatInt(blobstore.MaxSize-1, 10), http.StatusBadRequest, api.CodeMalformed, "largest blob"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rc.do("PUT", srv.URL()+tc.path, []byte("abc"), auth)
			e := decodeErrorBody(t, body)
			if resp.StatusCode != tc.status || e.Code != tc.code || !strings.Contains(e.Error, tc.text) {
				t.Fatalf("PUT %s = %d %s, want %d %s mentioning %q", tc.path, resp.StatusCode, body, tc.status, tc.code, tc.text)
			}
		})
	}
	resp, body := rc.do("POST", srv.URL()+"/v1/blobs/"+sum+"/commit?size=17179869185", nil, auth)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("commit of a size past the largest blob = %d %s, want 400", resp.StatusCode, body)
	}
}
