package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"tempest/internal/blobstore"
)

// A chunk read goes to any manager that can serve the blob (each holds it
// or fetches it from a peer), so a leader's death in the middle of a read
// costs a retry, not the source and its job. One manager gets
// rsChunkAttempt (a dead one would otherwise hold the read for the
// transport's whole call timeout); rounds over the managers back off
// between these bounds and give up after rsChunkGiveUp without one answer:
// by then the datacenter has lost its managers, not one of them.
const (
	rsChunkAttempt     = 10 * time.Second
	rsChunkBackoffBase = 100 * time.Millisecond
	rsChunkBackoffMax  = 2 * time.Second
	rsChunkGiveUp      = time.Minute
)

// rsBlobReader reads a `file:` source's blob by range from the managers,
// one chunk at a time, so a source of any size costs one chunk of memory.
// It seeks, for a restart from a checkpoint's offset.
type rsBlobReader struct {
	ctx    context.Context
	w      *Worker
	sum    blobstore.Sum
	off    int64
	size   int64 // -1 until the first chunk tells
	buf    []byte
	bufAt  int64
	from   string        // the manager that served the last chunk, asked first
	giveUp time.Duration // rsChunkGiveUp; shorter in tests
}

func (w *Worker) openBlob(ctx context.Context, s string) (*rsBlobReader, error) {
	sum, err := blobstore.ParseSum(s)
	if err != nil {
		return nil, err
	}
	return &rsBlobReader{ctx: ctx, w: w, sum: sum, size: -1, giveUp: rsChunkGiveUp}, nil
}

// Size is the blob's size, known from the first chunk read (fetched now
// if none was).
func (r *rsBlobReader) Size() (int64, error) {
	if r.size < 0 {
		if err := r.fetch(); err != nil {
			return 0, err
		}
	}
	return r.size, nil
}

func (r *rsBlobReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if r.off < r.bufAt || r.off >= r.bufAt+int64(len(r.buf)) {
		if r.size >= 0 && r.off >= r.size {
			return 0, io.EOF
		}
		if err := r.fetch(); err != nil {
			return 0, err
		}
		if r.off >= r.bufAt+int64(len(r.buf)) {
			return 0, io.EOF
		}
	}
	n := copy(p, r.buf[r.off-r.bufAt:])
	r.off += int64(n)
	return n, nil
}

// fetch reads the chunk at r.off: from the manager that served the last
// one, else the leader, else every other manager the worker knows, in
// rounds with backoff until one answers or rsChunkGiveUp has passed.
func (r *rsBlobReader) fetch() error {
	rep := &blobstore.Replicator{Tr: r.w.tr}
	start := time.Now()
	var errs []error
	for round := 0; ; round++ {
		errs = errs[:0]
		for _, addr := range r.sources() {
			actx, cancel := context.WithTimeout(r.ctx, rsChunkAttempt)
			c, err := rep.GetChunk(actx, addr, r.sum, r.off, blobstore.ChunkSize)
			cancel()
			if err == nil {
				r.size = c.Size
				r.buf, r.bufAt = c.Data, r.off
				r.from = addr
				return nil
			}
			if r.ctx.Err() != nil {
				return fmt.Errorf("read source blob %s at %d: %w", r.sum, r.off, context.Cause(r.ctx))
			}
			errs = append(errs, err)
		}
		if len(errs) == 0 {
			errs = append(errs, errors.New("no manager known"))
		}
		if time.Since(start) >= r.giveUp {
			return fmt.Errorf("read source blob %s at %d: no manager answered in %d rounds over %s: %w",
				r.sum, r.off, round+1, r.giveUp, errors.Join(errs...))
		}
		r.w.log.Debug("rainstorm: source blob chunk read failed, retrying", "sum", r.sum.String(), "offset", r.off,
			"round", round+1, "err", errors.Join(errs...))
		t := time.NewTimer(min(backoff(round, rsChunkBackoffBase, rsChunkBackoffMax), r.giveUp-time.Since(start)))
		select {
		case <-r.ctx.Done():
			t.Stop()
			return fmt.Errorf("read source blob %s at %d: %w", r.sum, r.off, context.Cause(r.ctx))
		case <-t.C:
		}
	}
}

// sources lists the managers to ask for a chunk, best first.
func (r *rsBlobReader) sources() []string {
	_, leader := r.w.leader.current()
	all := append([]string{r.from, leader}, r.w.cfg.Managers...)
	all = append(all, r.w.leader.knownAddrs()...)
	out := all[:0]
	for _, a := range all {
		if a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

func (r *rsBlobReader) Seek(offset int64, whence int) (int64, error) {
	if whence != io.SeekStart || offset < 0 {
		return 0, errors.New("source blob: only absolute seeks")
	}
	r.off = offset
	return offset, nil
}

func (r *rsBlobReader) Close() error { return nil }
