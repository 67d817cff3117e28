package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"tempest/internal/blobstore"
	"tempest/wire"
)

// BlobService implements BlobBackend over a node's blob store and its
// replication group: what the manager and the gate both serve. A role
// embeds it, so the role is the BlobBackend its API server finds; Stat, Put
// and Commit answer only while it leads, Read on any node.
type BlobService struct {
	cluster *blobstore.Cluster
	ready   func(ctx context.Context) error
	life    context.Context
	log     *slog.Logger
}

// NewBlobService serves cluster's blobs. ready is asked first by the
// methods that change or report the group's state: a role answers a typed
// not-leader error when it does not lead. life is the parent of
// replication that outlives a request: it ends at the role's shutdown.
func NewBlobService(cluster *blobstore.Cluster, ready func(ctx context.Context) error, life context.Context, log *slog.Logger) *BlobService {
	return &BlobService{cluster: cluster, ready: ready, life: life, log: log}
}

func parseSum(s string) (blobstore.Sum, error) {
	sum, err := blobstore.ParseSum(s)
	if err != nil {
		return sum, wire.Errorf(wire.CodeMalformed, "%v", err)
	}
	return sum, nil
}

func (b *BlobService) info(sum blobstore.Sum, holders int) *BlobInfo {
	st, _ := b.cluster.Rep.Store.Stat(sum)
	needed := b.cluster.Quorum()
	return &BlobInfo{SHA256: sum.String(), Size: st.Size, Replicas: holders, Needed: needed, Durable: holders >= needed}
}

// StatBlob implements BlobBackend: whether the blob is stored here, and on
// how many members. The check restarts the blob's retention period: a
// client that finds it is about to submit a job naming it.
func (b *BlobService) StatBlob(ctx context.Context, s string) (*BlobInfo, error) {
	if err := b.ready(ctx); err != nil {
		return nil, err
	}
	sum, err := parseSum(s)
	if err != nil {
		return nil, err
	}
	if ok, err := b.cluster.HasLocal(sum); err != nil {
		return nil, err
	} else if !ok {
		return nil, wire.Errorf(wire.CodeNotFound, "blob %s not stored", sum)
	}
	_ = b.cluster.Rep.Store.Touch(sum)
	return b.info(sum, b.cluster.Holders(ctx, sum)), nil
}

// PutBlobChunk implements BlobBackend.
func (b *BlobService) PutBlobChunk(ctx context.Context, s string, offset int64, data []byte) (int64, error) {
	if err := b.ready(ctx); err != nil {
		return 0, err
	}
	sum, err := parseSum(s)
	if err != nil {
		return 0, err
	}
	have, err := b.cluster.Rep.Store.WriteChunk(sum, offset, data)
	var gap *blobstore.GapError
	if errors.As(err, &gap) {
		return gap.Have, nil
	}
	return have, storeError(err)
}

// storeError types the store's refusals for the API: a full disk or a
// quota is 507, an offset or size no blob can have a client error.
func storeError(err error) error {
	switch {
	case errors.Is(err, blobstore.ErrNoSpace):
		return wire.Errorf(wire.CodeInsufficientStorage, "%v", err)
	case errors.Is(err, blobstore.ErrOutOfRange):
		return wire.Errorf(wire.CodeMalformed, "%v", err)
	}
	return err
}

// CommitBlob implements BlobBackend: verify, store, replicate to a
// majority. When ctx ends first the answer says not yet durable and the
// replication goes on under the role's life; the client asks again.
func (b *BlobService) CommitBlob(ctx context.Context, s string, size int64) (*BlobInfo, error) {
	if err := b.ready(ctx); err != nil {
		return nil, err
	}
	sum, err := parseSum(s)
	if err != nil {
		return nil, err
	}
	if err := b.cluster.Rep.Store.Commit(sum, size); err != nil {
		var gap *blobstore.GapError
		switch {
		case errors.As(err, &gap):
			return nil, &BlobGapError{Sum: sum.String(), Have: gap.Have, Size: size}
		case errors.Is(err, blobstore.ErrMismatch):
			return nil, wire.Errorf(wire.CodeRejected, "%v; upload it again", err)
		}
		return nil, storeError(err)
	}
	rctx, cancel := context.WithTimeout(b.life, time.Hour)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	holders, err := b.cluster.EnsureDurable(rctx, sum)
	if err != nil && ctx.Err() == nil {
		b.log.Warn("blob not durable", "sum", sum.String(), "holders", holders, "err", err)
		return nil, wire.Errorf(wire.CodeNoQuorum, "blob %s is on %d of the %d nodes needed: %v", sum, holders, b.cluster.Quorum(), err)
	}
	if err != nil {
		holders = b.cluster.Holders(context.WithoutCancel(ctx), sum)
	}
	b.log.Info("blob committed", "sum", sum.String(), "bytes", size, "holders", holders)
	return b.info(sum, holders), nil
}

// ReadBlob implements BlobBackend: a small blob's whole content, fetched
// from a member when this node lacks it.
func (b *BlobService) ReadBlob(ctx context.Context, s string, limit int64) ([]byte, error) {
	sum, err := parseSum(s)
	if err != nil {
		return nil, err
	}
	if ok, err := b.cluster.HasLocal(sum); err != nil {
		return nil, err
	} else if !ok {
		if err := b.cluster.Fetch(ctx, sum); err != nil {
			return nil, wire.Errorf(wire.CodeNotFound, "blob %s was not uploaded (or has expired): %v", sum, err)
		}
	}
	f, err := b.cluster.Rep.Store.Open(sum)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read blob %s: %w", sum, err)
	}
	if int64(len(data)) > limit {
		return nil, wire.Errorf(wire.CodeRejected, "blob %s is more than the %d bytes allowed here", sum, limit)
	}
	return data, nil
}
