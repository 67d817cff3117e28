package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"tempest/internal/blobstore"
	"tempest/transport"
	"tempest/wire"
	"tempest/workflow"
)

// Blobs: a workflow whose params name a data file by blob (its SHA-256)
// gets the content from the manager that dispatched it, by range reads,
// before its runner is built. The content is kept by sum while any
// execution here uses it, so the shards of one workflow placed on this
// worker, and a re-dispatch, read it once.

// maxWorkerBlob bounds what a worker holds in memory for one blob: data
// files are small by contract (workflow.MaxDataSize).
const maxWorkerBlob = workflow.MaxDataSize

// blobCache holds blob content by sum. Guarded by its own lock, never held
// while Worker.mu is taken.
type blobCache struct {
	mu      sync.Mutex
	entries map[string]*blobEntry
}

type blobEntry struct {
	ready chan struct{} // closed once data or err is set
	data  []byte
	err   error
}

// attachBlobs returns spec with the content of every blob it names filled
// in, and the sums it used.
func (w *Worker) attachBlobs(ctx context.Context, from transport.Peer, spec wire.WorkflowSpec) (wire.WorkflowSpec, []string, error) {
	sums, err := w.registry.SpecBlobs(spec)
	if err != nil || len(sums) == 0 {
		return spec, nil, err
	}
	w.pruneBlobs()
	spec, err = w.registry.AttachSpecBlobs(spec, func(sum string) ([]byte, error) {
		return w.blobs.get(ctx, sum, func(ctx context.Context) ([]byte, error) {
			return w.fetchBlob(ctx, from.Addr, sum)
		})
	})
	return spec, sums, err
}

// get returns sum's content, fetching it once however many ask at a time.
func (c *blobCache) get(ctx context.Context, sum string, fetch func(context.Context) ([]byte, error)) ([]byte, error) {
	c.mu.Lock()
	if c.entries == nil {
		c.entries = map[string]*blobEntry{}
	}
	e, ok := c.entries[sum]
	if !ok {
		e = &blobEntry{ready: make(chan struct{})}
		c.entries[sum] = e
	}
	c.mu.Unlock()
	if !ok {
		e.data, e.err = fetch(ctx)
		if e.err != nil {
			c.mu.Lock()
			delete(c.entries, sum) // the next dispatch tries again
			c.mu.Unlock()
		}
		close(e.ready)
	}
	select {
	case <-e.ready:
		return e.data, e.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// pruneBlobs forgets content no execution here uses any more.
func (w *Worker) pruneBlobs() {
	w.mu.Lock()
	var used []string
	for _, e := range w.execs {
		if !e.finished {
			used = append(used, e.blobs...)
		}
	}
	w.mu.Unlock()
	c := &w.blobs
	c.mu.Lock()
	defer c.mu.Unlock()
	for sum, e := range c.entries {
		select {
		case <-e.ready:
			if !slices.Contains(used, sum) {
				delete(c.entries, sum)
			}
		default: // being fetched for a dispatch right now
		}
	}
}

// fetchBlob reads a whole blob from the manager at addr, chunk by chunk,
// and checks it against its sum.
func (w *Worker) fetchBlob(ctx context.Context, addr, s string) ([]byte, error) {
	sum, err := blobstore.ParseSum(s)
	if err != nil {
		return nil, err
	}
	r := &blobstore.Replicator{Tr: w.tr}
	var out []byte
	for size := int64(-1); size < 0 || int64(len(out)) < size; {
		c, err := r.GetChunk(ctx, addr, sum, int64(len(out)), blobstore.PeerChunk)
		if err != nil {
			return nil, err
		}
		if size = c.Size; size > maxWorkerBlob {
			return nil, fmt.Errorf("blob %s is %d bytes, more than the %d a data file may have", sum, size, maxWorkerBlob)
		}
		if len(c.Data) == 0 && int64(len(out)) < size {
			return nil, errors.New("empty chunk before the end of the blob")
		}
		if out == nil {
			out = make([]byte, 0, size)
		}
		out = append(out, c.Data...)
	}
	if err := workflow.VerifyBlob(s, out); err != nil {
		return nil, err
	}
	w.log.Info("blob fetched", "sum", s, "bytes", len(out), "from", addr)
	return out, nil
}
