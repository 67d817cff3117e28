package worker

import (
	"context"
	"errors"
	"fmt"
	"io"

	"tempest/internal/blobstore"
)

// rsBlobReader reads a `file:` source's blob by range from the managers,
// one chunk at a time, so a source of any size costs one chunk of memory.
// It seeks, for a restart from a checkpoint's offset.
type rsBlobReader struct {
	ctx   context.Context
	w     *Worker
	sum   blobstore.Sum
	off   int64
	size  int64 // -1 until the first chunk tells
	buf   []byte
	bufAt int64
}

func (w *Worker) openBlob(ctx context.Context, s string) (*rsBlobReader, error) {
	sum, err := blobstore.ParseSum(s)
	if err != nil {
		return nil, err
	}
	return &rsBlobReader{ctx: ctx, w: w, sum: sum, size: -1}, nil
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

// fetch reads the chunk at r.off from the leader (any manager holding the
// blob would do; a manager that lacks it fetches it from a peer first).
func (r *rsBlobReader) fetch() error {
	addr, err := r.leaderAddr()
	if err != nil {
		return err
	}
	rep := &blobstore.Replicator{Tr: r.w.tr}
	c, err := rep.GetChunk(r.ctx, addr, r.sum, r.off, blobstore.ChunkSize)
	if err != nil {
		return fmt.Errorf("read source blob %s at %d: %w", r.sum, r.off, err)
	}
	r.size = c.Size
	r.buf, r.bufAt = c.Data, r.off
	return nil
}

// leaderAddr is the leader's address, waiting while the worker knows none
// (it lost its leader and is registering again; on a loaded host SWIM
// takes a slow manager for dead and back within seconds) for as long as
// the task runs. Failing at once failed the source, and with it the job,
// whenever it opened during such a gap.
func (r *rsBlobReader) leaderAddr() (string, error) {
	for {
		changed := r.w.leader.changedCh() // before the check, so no change is missed
		if _, addr := r.w.leader.current(); addr != "" {
			return addr, nil
		}
		select {
		case <-changed:
		case <-r.ctx.Done():
			return "", fmt.Errorf("read source blob: no manager known: %w", context.Cause(r.ctx))
		}
	}
}

func (r *rsBlobReader) Seek(offset int64, whence int) (int64, error) {
	if whence != io.SeekStart || offset < 0 {
		return 0, errors.New("source blob: only absolute seeks")
	}
	r.off = offset
	return offset, nil
}

func (r *rsBlobReader) Close() error { return nil }
