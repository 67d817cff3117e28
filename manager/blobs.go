package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"tempest/api"
	"tempest/blobstore"
	"tempest/transport"
	"tempest/wire"
)

// Blobs (docs/blobs.md): files jobs reference by SHA-256, stored by every
// manager of the datacenter. A client uploads to the leader in chunks; the
// leader commits locally (verified against the sum), pushes the blob to its
// peers and calls it durable once a majority of the configured managers,
// itself counting one, hold it complete and verified. A submission naming
// a blob is accepted only when the blob is durable. Workers read blobs by
// range from the manager that dispatched to them; a manager asked for a
// blob it lacks (a new leader) fetches it from a peer first.

// blobPartialTTL is how long an upload nobody appends to is kept.
const blobPartialTTL = time.Hour

// blobGCEvery is how often a manager looks for blobs to remove.
const blobGCEvery = 10 * time.Minute

// blobState is the manager's blob store and the replications in flight.
type blobState struct {
	store *blobstore.Store
	rep   *blobstore.Replicator

	mu       sync.Mutex
	inflight map[blobstore.Sum]chan struct{} // closed when that ensureDurable ends
}

// openBlobs opens the blob store in the data dir; New calls it once the
// transport exists.
func (m *Manager) openBlobs() error {
	st, err := blobstore.Open(filepath.Join(m.cfg.DataDir, "blobs"), m.log, m.clock.Now)
	if err != nil {
		return err
	}
	m.blobs = &blobState{
		store:    st,
		rep:      &blobstore.Replicator{Store: st, Tr: m.tr, Log: m.log},
		inflight: map[blobstore.Sum]chan struct{}{},
	}
	return nil
}

// registerBlobHandlers: only peer managers may write blobs here; any node
// of the cluster (a worker, a gate) may ask for one or read it.
func (m *Manager) registerBlobHandlers() {
	b := m.blobs
	handle(m, wire.TypeBlobChunkPut, func(ctx context.Context, from transport.Peer, msg *wire.BlobChunkPut) (wire.Message, error) {
		if !m.isPeer(from.NodeID) {
			return nil, wire.Errorf(wire.CodeRejected, "%s is not a manager of this datacenter", from.NodeID)
		}
		return b.rep.HandlePut(ctx, from, msg)
	})
	handle(m, wire.TypeBlobCommit, func(ctx context.Context, from transport.Peer, msg *wire.BlobCommit) (wire.Message, error) {
		if !m.isPeer(from.NodeID) {
			return nil, wire.Errorf(wire.CodeRejected, "%s is not a manager of this datacenter", from.NodeID)
		}
		return b.rep.HandleCommit(ctx, from, msg)
	})
	handle(m, wire.TypeBlobStat, b.rep.HandleStat)
	handle(m, wire.TypeBlobChunkGet, m.handleBlobGet)
}

// handleBlobGet serves a range read, fetching the blob from a peer first
// when this manager lacks it and a worker asks (it leads now, or a worker
// still reads from it).
func (m *Manager) handleBlobGet(ctx context.Context, from transport.Peer, msg *wire.BlobChunkGet) (wire.Message, error) {
	sum, err := blobstore.SumFromBytes(msg.Sum)
	if err != nil {
		return nil, wire.Errorf(wire.CodeMalformed, "%v", err)
	}
	if _, err := m.blobs.store.Stat(sum); errors.Is(err, blobstore.ErrNotFound) && !m.isPeer(from.NodeID) {
		// Peers asking are themselves looking for a holder: never recurse.
		if err := m.fetchBlob(ctx, sum); err != nil {
			return nil, wire.Errorf(wire.CodeNotFound, "blob %s: %v", sum, err)
		}
	}
	return m.blobs.rep.HandleGet(ctx, from, msg)
}

// peerAddrs lists the other configured managers' addresses.
func (m *Manager) peerAddrs() []string {
	out := make([]string, 0, len(m.peerIDs))
	for _, id := range m.peerIDs {
		out = append(out, m.peers[id])
	}
	return out
}

// fetchBlob copies sum from the first peer that holds it.
func (m *Manager) fetchBlob(ctx context.Context, sum blobstore.Sum) error {
	holders := m.blobs.rep.Holders(ctx, sum, m.peerAddrs())
	if len(holders) == 0 {
		return fmt.Errorf("blob %s: %w on any manager", sum, blobstore.ErrNotFound)
	}
	var errs []error
	for _, addr := range holders {
		err := m.blobs.rep.Fetch(ctx, addr, sum)
		if err == nil {
			m.log.Info("blob fetched from a peer", "sum", sum.String(), "peer", addr)
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ensureDurable makes sum durable: held complete and verified by a majority
// of the configured managers. This manager fetches it first if it lacks it;
// peers that lack it get it pushed. It returns how many managers hold it.
// Pushes still running when it returns go on in the background.
func (m *Manager) ensureDurable(ctx context.Context, sum blobstore.Sum) (int, error) {
	b := m.blobs
	for {
		b.mu.Lock()
		wait, busy := b.inflight[sum]
		if !busy {
			b.inflight[sum] = make(chan struct{})
		}
		b.mu.Unlock()
		if !busy {
			break
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return 0, fmt.Errorf("blob %s: %w", sum, context.Cause(ctx))
		}
	}
	defer func() {
		b.mu.Lock()
		close(b.inflight[sum])
		delete(b.inflight, sum)
		b.mu.Unlock()
	}()
	if _, err := b.store.Stat(sum); errors.Is(err, blobstore.ErrNotFound) {
		if err := m.fetchBlob(ctx, sum); err != nil {
			return 0, err
		}
	} else if err != nil {
		return 0, err
	}
	peers := m.peerAddrs()
	have := b.rep.Holders(ctx, sum, peers)
	if 1+len(have) >= m.quorumSize {
		if len(have) < len(peers) {
			// Durable already; the stragglers catch up in the background.
			missing := slices.DeleteFunc(slices.Clone(peers), func(a string) bool { return slices.Contains(have, a) })
			_, _ = b.rep.Replicate(ctx, m.spawn, sum, missing, 1)
		}
		return 1 + len(have), nil
	}
	missing := slices.DeleteFunc(slices.Clone(peers), func(a string) bool { return slices.Contains(have, a) })
	n, err := b.rep.Replicate(ctx, m.spawn, sum, missing, m.quorumSize-len(have))
	return n + len(have), err
}

// blobInfo answers the API about sum after a durability check.
func (m *Manager) blobInfo(sum blobstore.Sum, holders int) *api.BlobInfo {
	info, _ := m.blobs.store.Stat(sum)
	return &api.BlobInfo{SHA256: sum.String(), Size: info.Size, Replicas: holders, Needed: m.quorumSize,
		Durable: holders >= m.quorumSize}
}

func parseBlobSum(s string) (blobstore.Sum, error) {
	sum, err := blobstore.ParseSum(s)
	if err != nil {
		return sum, wire.Errorf(wire.CodeMalformed, "%v", err)
	}
	return sum, nil
}

// StatBlob implements api.BlobBackend (leader only): whether the blob is
// stored, and on how many managers. A client that finds it durable skips
// the upload; the check restarts the blob's retention period.
func (m *Manager) StatBlob(ctx context.Context, s string) (*api.BlobInfo, error) {
	if _, err := m.awaitLeader(ctx, m.notLeaderAPI); err != nil {
		return nil, err
	}
	sum, err := parseBlobSum(s)
	if err != nil {
		return nil, err
	}
	if _, err := m.blobs.store.Stat(sum); err != nil {
		if errors.Is(err, blobstore.ErrNotFound) {
			return nil, wire.Errorf(wire.CodeNotFound, "blob %s not stored", sum)
		}
		return nil, err
	}
	_ = m.blobs.store.Touch(sum)
	holders := 1 + len(m.blobs.rep.Holders(ctx, sum, m.peerAddrs()))
	return m.blobInfo(sum, holders), nil
}

// PutBlobChunk implements api.BlobBackend (leader only): it appends a chunk
// to the leader's partial upload and returns the bytes held, which is not
// offset+len(data) when the chunk did not start where the upload ends.
func (m *Manager) PutBlobChunk(ctx context.Context, s string, offset int64, data []byte) (int64, error) {
	if _, err := m.awaitLeader(ctx, m.notLeaderAPI); err != nil {
		return 0, err
	}
	sum, err := parseBlobSum(s)
	if err != nil {
		return 0, err
	}
	have, err := m.blobs.store.WriteChunk(sum, offset, data)
	var gap *blobstore.GapError
	if errors.As(err, &gap) {
		return gap.Have, nil
	}
	return have, err
}

// CommitBlob implements api.BlobBackend (leader only): verify the upload,
// store it, replicate it to a majority. When ctx ends first the blob is not
// yet durable (Durable false) and replication goes on; the client asks
// again.
func (m *Manager) CommitBlob(ctx context.Context, s string, size int64) (*api.BlobInfo, error) {
	if _, err := m.awaitLeader(ctx, m.notLeaderAPI); err != nil {
		return nil, err
	}
	sum, err := parseBlobSum(s)
	if err != nil {
		return nil, err
	}
	if err := m.blobs.store.Commit(sum, size); err != nil {
		var gap *blobstore.GapError
		switch {
		case errors.As(err, &gap):
			return nil, wire.Errorf(wire.CodeRejected, "blob %s: %d of %d bytes received; upload the rest first", sum, gap.Have, size)
		case errors.Is(err, blobstore.ErrMismatch):
			return nil, wire.Errorf(wire.CodeRejected, "%v; upload it again", err)
		}
		return nil, err
	}
	// Replication outlives a client that gives up waiting: its goroutines
	// belong to the manager, and the next commit or stat finds the result.
	rctx, cancel := context.WithTimeout(m.life.Context(), time.Hour)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	holders, err := m.ensureDurable(rctx, sum)
	if err != nil && ctx.Err() == nil {
		m.log.Warn("blob not durable", "sum", sum.String(), "holders", holders, "err", err)
		return nil, wire.Errorf(wire.CodeNoQuorum, "blob %s is on %d of the %d managers needed: %v", sum, holders, m.quorumSize, err)
	}
	m.log.Info("blob committed", "sum", sum.String(), "bytes", size, "holders", holders)
	return m.blobInfo(sum, holders), nil
}

// ReadBlob implements api.BlobBackend: a small blob's whole content (a data
// file the API server parses a job file against), fetched from a peer when
// this manager lacks it. More than limit bytes is an error.
func (m *Manager) ReadBlob(ctx context.Context, s string, limit int64) ([]byte, error) {
	sum, err := parseBlobSum(s)
	if err != nil {
		return nil, err
	}
	if _, err := m.blobs.store.Stat(sum); errors.Is(err, blobstore.ErrNotFound) {
		if err := m.fetchBlob(ctx, sum); err != nil {
			return nil, wire.Errorf(wire.CodeNotFound, "blob %s was not uploaded (or has expired): %v", sum, err)
		}
	}
	f, err := m.blobs.store.Open(sum)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read blob %s: %w", sum, err)
	}
	if int64(len(b)) > limit {
		return nil, wire.Errorf(wire.CodeRejected, "blob %s is more than the %d bytes allowed here", sum, limit)
	}
	return b, nil
}

// submissionBlobs lists the blobs a submission references.
func (m *Manager) submissionBlobs(sub *wire.JobSubmission) ([]blobstore.Sum, error) {
	var out []blobstore.Sum
	for i, spec := range sub.Workflows {
		sums, err := m.reg.SpecBlobs(spec)
		if err != nil {
			return nil, fmt.Errorf("workflows[%d]: %w", i, err)
		}
		for _, s := range sums {
			sum, err := blobstore.ParseSum(s)
			if err != nil {
				return nil, fmt.Errorf("workflows[%d]: %w", i, err)
			}
			if !slices.Contains(out, sum) {
				out = append(out, sum)
			}
		}
	}
	return out, nil
}

// checkSubmissionBlobs refuses a submission naming a blob that is not on a
// majority of the managers (after trying to make it so): a job must never
// be acknowledged while the data it needs could be lost with one manager.
func (m *Manager) checkSubmissionBlobs(ctx context.Context, sub *wire.JobSubmission) error {
	sums, err := m.submissionBlobs(sub)
	if err != nil {
		return wire.Errorf(wire.CodeRejected, "invalid job: %v", err)
	}
	for _, sum := range sums {
		holders, err := m.ensureDurable(ctx, sum)
		if err == nil {
			continue
		}
		if errors.Is(err, blobstore.ErrNotFound) {
			return wire.Errorf(wire.CodeRejected, "job %q references blob %s, which no manager holds: upload it first (tempest submit does)", sub.Name, sum)
		}
		return wire.Errorf(wire.CodeNoQuorum, "job %q references blob %s, which is on %d of the %d managers needed: %v", sub.Name, sum, holders, m.quorumSize, err)
	}
	return nil
}

// liveBlobs is every blob a job this manager still keeps references
// (finished jobs count until their retention ends, so a re-run of a
// finished job's workflow still finds its data).
func (m *Manager) liveBlobs() map[blobstore.Sum]bool {
	m.mu.Lock()
	specs := make([]wire.WorkflowSpec, 0, len(m.jobs))
	for _, j := range m.jobs {
		specs = append(specs, j.rec.Submission.Workflows...)
	}
	m.mu.Unlock()
	live := map[blobstore.Sum]bool{}
	for _, spec := range specs {
		sums, _ := m.reg.SpecBlobs(spec)
		for _, s := range sums {
			if sum, err := blobstore.ParseSum(s); err == nil {
				live[sum] = true
			}
		}
	}
	return live
}

// blobGCLoop removes blobs no kept job references once their retention
// (the manager's job retention) has passed, and abandoned partial uploads.
func (m *Manager) blobGCLoop(ctx context.Context) {
	t := time.NewTicker(blobGCEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.collectBlobs()
		}
	}
}

func (m *Manager) collectBlobs() {
	live := m.liveBlobs()
	if _, err := m.blobs.store.GC(blobstore.GCPolicy{
		Live:       func(s blobstore.Sum) bool { return live[s] },
		Retention:  m.cfg.Retention,
		PartialTTL: blobPartialTTL,
	}); err != nil {
		m.log.Warn("blob gc", "err", err)
	}
}

// repairBlobs runs when this manager starts leading: every blob a kept job
// references is made durable again (fetched here, pushed to peers that
// lost it), so a worker's read never waits on a missing copy.
func (m *Manager) repairBlobs(ctx context.Context) {
	for sum := range m.liveBlobs() {
		if _, err := m.ensureDurable(ctx, sum); err != nil && ctx.Err() == nil {
			m.log.Warn("blob repair", "sum", sum.String(), "err", err)
		}
	}
}
