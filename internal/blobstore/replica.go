package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"tempest/transport"
	"tempest/wire"
)

// ChunkSize is the most one chunk message may carry.
const ChunkSize = wire.MaxBlobChunk

// PeerChunk is what a push or a fetch sends per message: a quarter of the
// bound, because a chunk holds up whatever shares its transport stream
// (election heartbeats too) until it is written, and a 256 MiB replication
// on a busy machine must not cost the leader its term.
const PeerChunk = 256 << 10

// callTimeout bounds one chunk call: a megabyte on a loaded machine.
const callTimeout = 30 * time.Second

// statTimeout bounds a BlobStat: small, and asked of every member while a
// client waits, so a member cut off must not hold the answer long.
const statTimeout = 5 * time.Second

// Replicator moves blobs between a node's Store and other nodes over the
// transport: it serves BlobChunkPut, BlobCommit, BlobStat and BlobChunkGet
// (the role registers the Handle* methods, deciding who may call them), and
// pushes or fetches whole blobs.
type Replicator struct {
	Store *Store
	Tr    transport.Transport
	Log   *slog.Logger

	mu     sync.Mutex
	pushes map[pushKey]*pushCall // one push per (blob, node) at a time
}

type pushKey struct {
	sum  Sum
	addr string
}

type pushCall struct {
	done chan struct{}
	err  error
}

// ---- serving ------------------------------------------------------------------

func blobErr(sum Sum, err error) error {
	var gap *GapError
	switch {
	case errors.As(err, &gap):
		return nil // answered as a BlobAck with Have
	case errors.Is(err, ErrNotFound):
		return wire.Errorf(wire.CodeNotFound, "blob %s not held here", sum)
	case errors.Is(err, ErrMismatch):
		return wire.Errorf(wire.CodeRejected, "%v", err)
	case errors.Is(err, ErrNoSpace):
		return wire.Errorf(wire.CodeInsufficientStorage, "%v", err)
	case errors.Is(err, ErrOutOfRange):
		return wire.Errorf(wire.CodeMalformed, "%v", err)
	}
	return fmt.Errorf("blob %s: %w", sum, err)
}

func (r *Replicator) ack(sum Sum) (*wire.BlobAck, error) {
	have, complete, err := r.Store.Have(sum)
	if err != nil {
		return nil, err
	}
	a := &wire.BlobAck{Sum: sum[:], Complete: complete}
	if complete {
		a.Size = have
	} else {
		a.Have = have
	}
	return a, nil
}

// HandlePut serves BlobChunkPut: the answer says how much is now held, so a
// sender out of step resumes where the receiver is.
// MembersOnly guards a handler that writes blobs: only members of the
// group (isMember) may push here; anyone may still read. what names the
// group in the refusal ("a gate").
func MembersOnly[M wire.Message](isMember func(id string) bool, what string,
	h func(context.Context, transport.Peer, M) (wire.Message, error)) func(context.Context, transport.Peer, M) (wire.Message, error) {
	return func(ctx context.Context, from transport.Peer, msg M) (wire.Message, error) {
		if !isMember(from.NodeID) {
			return nil, wire.Errorf(wire.CodeRejected, "%s is not %s", from.NodeID, what)
		}
		return h(ctx, from, msg)
	}
}

func (r *Replicator) HandlePut(_ context.Context, _ transport.Peer, m *wire.BlobChunkPut) (wire.Message, error) {
	sum, err := SumFromBytes(m.Sum)
	if err != nil {
		return nil, wire.Errorf(wire.CodeMalformed, "%v", err)
	}
	if len(m.Data) > ChunkSize {
		return nil, wire.Errorf(wire.CodeMalformed, "chunk of %d bytes, more than %d", len(m.Data), ChunkSize)
	}
	if _, err := r.Store.WriteChunk(sum, m.Offset, m.Data); err != nil {
		if e := blobErr(sum, err); e != nil {
			return nil, e
		}
	}
	return r.ack(sum)
}

// HandleCommit serves BlobCommit.
func (r *Replicator) HandleCommit(_ context.Context, _ transport.Peer, m *wire.BlobCommit) (wire.Message, error) {
	sum, err := SumFromBytes(m.Sum)
	if err != nil {
		return nil, wire.Errorf(wire.CodeMalformed, "%v", err)
	}
	if err := r.Store.Commit(sum, m.Size); err != nil {
		if e := blobErr(sum, err); e != nil {
			return nil, e
		}
	}
	return r.ack(sum)
}

// HandleStat serves BlobStat.
func (r *Replicator) HandleStat(_ context.Context, _ transport.Peer, m *wire.BlobStat) (wire.Message, error) {
	sum, err := SumFromBytes(m.Sum)
	if err != nil {
		return nil, wire.Errorf(wire.CodeMalformed, "%v", err)
	}
	return r.ack(sum)
}

// HandleGet serves BlobChunkGet from complete blobs only.
func (r *Replicator) HandleGet(_ context.Context, _ transport.Peer, m *wire.BlobChunkGet) (wire.Message, error) {
	sum, err := SumFromBytes(m.Sum)
	if err != nil {
		return nil, wire.Errorf(wire.CodeMalformed, "%v", err)
	}
	return r.ReadChunk(sum, m.Offset, m.Length)
}

// ReadChunk reads one range of a complete local blob as a BlobChunk.
func (r *Replicator) ReadChunk(sum Sum, off, length int64) (*wire.BlobChunk, error) {
	info, err := r.Store.Stat(sum)
	if err != nil {
		return nil, blobErr(sum, err)
	}
	if off < 0 || off > info.Size || length < 0 {
		return nil, wire.Errorf(wire.CodeMalformed, "range at %d of %d bytes outside blob %s of %d bytes", off, length, sum, info.Size)
	}
	n := min(length, ChunkSize, info.Size-off)
	buf := make([]byte, n)
	got, err := r.Store.ReadAt(sum, buf, off)
	if err != nil && !(errors.Is(err, io.EOF) && int64(got) == n) {
		return nil, blobErr(sum, err)
	}
	return &wire.BlobChunk{Sum: sum[:], Offset: off, Size: info.Size, Data: buf}, nil
}

// ---- moving whole blobs -----------------------------------------------------------

// Stat asks the node at addr what it holds of sum.
func (r *Replicator) Stat(ctx context.Context, addr string, sum Sum) (*wire.BlobAck, error) {
	cctx, cancel := context.WithTimeout(ctx, statTimeout)
	defer cancel()
	reply, err := r.Tr.Call(cctx, addr, &wire.BlobStat{Sum: sum[:]}, transport.WithRetries(2), transport.Idempotent())
	if err != nil {
		return nil, fmt.Errorf("stat blob %s at %s: %w", sum, addr, err)
	}
	a, ok := reply.(*wire.BlobAck)
	if !ok {
		return nil, fmt.Errorf("stat blob %s at %s: answered %s", sum, addr, reply.Type())
	}
	return a, nil
}

// Push sends the local complete blob sum to the node at addr, from where
// that node's partial upload ends, and commits it there. It returns once
// the node holds the complete, verified blob. A push of the same blob to
// the same node already running is waited for rather than doubled.
func (r *Replicator) Push(ctx context.Context, addr string, sum Sum) error {
	key := pushKey{sum, addr}
	r.mu.Lock()
	if r.pushes == nil {
		r.pushes = map[pushKey]*pushCall{}
	}
	if c, ok := r.pushes[key]; ok {
		r.mu.Unlock()
		select {
		case <-c.done:
			if c.err == nil {
				return nil
			}
			return r.Push(ctx, addr, sum) // that one failed: try again
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	c := &pushCall{done: make(chan struct{})}
	r.pushes[key] = c
	r.mu.Unlock()
	c.err = r.push(ctx, addr, sum)
	r.mu.Lock()
	delete(r.pushes, key)
	r.mu.Unlock()
	close(c.done)
	return c.err
}

func (r *Replicator) push(ctx context.Context, addr string, sum Sum) error {
	info, err := r.Store.Stat(sum)
	if err != nil {
		return err
	}
	f, err := r.Store.Open(sum)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := r.Stat(ctx, addr, sum)
	if err != nil {
		return err
	}
	if st.Complete {
		return nil
	}
	off := st.Have
	if off > info.Size {
		off = 0 // a partial longer than the blob cannot be resumed; the commit refuses it
	}
	buf := make([]byte, PeerChunk)
	for resumes := 0; off < info.Size; {
		n, err := f.ReadAt(buf[:min(int64(PeerChunk), info.Size-off)], off)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("push blob %s: read: %w", sum, err)
		}
		a, err := r.call(ctx, addr, &wire.BlobChunkPut{Sum: sum[:], Offset: off, Data: buf[:n]})
		if err != nil {
			return fmt.Errorf("push blob %s to %s at %d: %w", sum, addr, off, err)
		}
		switch {
		case a.Complete:
			return nil
		case a.Have > info.Size:
			return fmt.Errorf("push blob %s to %s: receiver holds %d bytes of a %d-byte blob", sum, addr, a.Have, info.Size)
		case a.Have > off:
			// At or past this chunk's end, or inside it: another sender (an
			// earlier push still running) wrote the same bytes. Go on from
			// there.
			off = a.Have
		default:
			// Behind: the receiver lost its partial (a restart). Go back
			// to what it holds, a few times only.
			if resumes++; resumes > 3 {
				return fmt.Errorf("push blob %s to %s: receiver holds %d bytes after a chunk at %d", sum, addr, a.Have, off)
			}
			off = a.Have
		}
	}
	a, err := r.call(ctx, addr, &wire.BlobCommit{Sum: sum[:], Size: info.Size})
	if err != nil {
		return fmt.Errorf("commit blob %s at %s: %w", sum, addr, err)
	}
	if !a.Complete {
		return fmt.Errorf("commit blob %s at %s: receiver holds %d of %d bytes", sum, addr, a.Have, info.Size)
	}
	return nil
}

func (r *Replicator) call(ctx context.Context, addr string, m wire.Message) (*wire.BlobAck, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	// Chunk puts and commits are idempotent: a repeat is recognised by
	// offset, a second commit finds the blob complete.
	reply, err := r.Tr.Call(cctx, addr, m, transport.WithRetries(2), transport.Idempotent())
	if err != nil {
		return nil, err
	}
	a, ok := reply.(*wire.BlobAck)
	if !ok {
		return nil, fmt.Errorf("answered %s", reply.Type())
	}
	return a, nil
}

// Fetch copies the complete blob sum from the node at addr into the local
// store, resuming a local partial upload, and commits (verifies) it.
func (r *Replicator) Fetch(ctx context.Context, addr string, sum Sum) error {
	if _, err := r.Store.Stat(sum); err == nil {
		return nil
	}
	have, _, err := r.Store.Have(sum)
	if err != nil {
		return err
	}
	size := int64(-1)
	for off := have; size < 0 || off < size; {
		c, err := r.GetChunk(ctx, addr, sum, off, PeerChunk)
		if err != nil {
			return err
		}
		size = c.Size
		if off > size {
			return fmt.Errorf("fetch blob %s from %s: local partial of %d bytes is longer than the blob (%d)", sum, addr, off, size)
		}
		if len(c.Data) == 0 && off < size {
			return fmt.Errorf("fetch blob %s from %s: empty chunk at %d of %d", sum, addr, off, size)
		}
		next, err := r.Store.WriteChunk(sum, off, c.Data)
		var gap *GapError
		switch {
		case errors.As(err, &gap) && gap.Have > off:
			next = gap.Have // a push from the leader wrote the same bytes meanwhile
		case err != nil:
			return fmt.Errorf("fetch blob %s: %w", sum, err)
		}
		off = next
	}
	if err := r.Store.Commit(sum, size); err != nil {
		return fmt.Errorf("fetch blob %s from %s: %w", sum, addr, err)
	}
	return nil
}

// GetChunk reads one range of sum from the node at addr.
func (r *Replicator) GetChunk(ctx context.Context, addr string, sum Sum, off, length int64) (*wire.BlobChunk, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	reply, err := r.Tr.Call(cctx, addr, &wire.BlobChunkGet{Sum: sum[:], Offset: off, Length: length},
		transport.WithRetries(2), transport.Idempotent())
	if err != nil {
		return nil, fmt.Errorf("read blob %s at %d from %s: %w", sum, off, addr, err)
	}
	c, ok := reply.(*wire.BlobChunk)
	if !ok {
		return nil, fmt.Errorf("read blob %s from %s: answered %s", sum, addr, reply.Type())
	}
	if c.Offset != off || int64(len(c.Data)) > length {
		return nil, fmt.Errorf("read blob %s from %s: asked %d bytes at %d, got %d at %d", sum, addr, length, off, len(c.Data), c.Offset)
	}
	return c, nil
}

// Replicate makes sum durable: the local store must hold it complete; it is
// pushed to every peer address that lacks it, in parallel. Replicate
// returns nil once need holders (this node counting one) hold the complete
// blob, or an error once that can no longer happen or ctx ends. Pushes still
// running then go on under the spawn'd goroutines (spawn runs a function on
// a goroutine its owner stops), so the remaining peers catch up too.
func (r *Replicator) Replicate(ctx context.Context, spawn func(func(context.Context)) bool, sum Sum, peers []string, need int) (holders int, err error) {
	if _, err := r.Store.Stat(sum); err != nil {
		return 0, err
	}
	holders = 1
	if holders >= need {
		// Nothing to wait for, but the peers should still get it.
		for _, addr := range peers {
			spawn(func(ctx context.Context) { r.pushLogged(ctx, addr, sum) })
		}
		return holders, nil
	}
	type result struct {
		addr string
		err  error
	}
	// Buffered so pushes finishing after Replicate returned never block.
	results := make(chan result, len(peers))
	started := 0
	for _, addr := range peers {
		if spawn(func(ctx context.Context) { results <- result{addr, r.pushLogged(ctx, addr, sum)} }) {
			started++
		}
	}
	var errs []error
	for range started {
		select {
		case res := <-results:
			if res.err != nil {
				errs = append(errs, res.err)
				if 1+started-len(errs) < need {
					return holders, fmt.Errorf("blob %s on %d of the %d nodes needed: %w", sum, holders, need, errors.Join(errs...))
				}
				continue
			}
			if holders++; holders >= need {
				return holders, nil
			}
		case <-ctx.Done():
			return holders, fmt.Errorf("blob %s on %d of the %d nodes needed: %w", sum, holders, need, context.Cause(ctx))
		}
	}
	return holders, fmt.Errorf("blob %s on %d of the %d nodes needed: %w", sum, holders, need, errors.Join(errs...))
}

func (r *Replicator) pushLogged(ctx context.Context, addr string, sum Sum) error {
	err := r.Push(ctx, addr, sum)
	if err != nil && ctx.Err() == nil && r.Log != nil {
		r.Log.Warn("blob push failed", "sum", sum.String(), "peer", addr, "err", err)
	}
	return err
}

// Holders counts the peers (of addrs) holding the complete blob, asking
// them in parallel; unreachable peers count as not holding it.
func (r *Replicator) Holders(ctx context.Context, sum Sum, addrs []string) []string {
	var (
		mu  sync.Mutex
		out []string
		wg  sync.WaitGroup
	)
	for _, addr := range addrs {
		wg.Go(func() {
			if a, err := r.Stat(ctx, addr, sum); err == nil && a.Complete {
				mu.Lock()
				out = append(out, addr)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}
