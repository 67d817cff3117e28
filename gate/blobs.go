package gate

import (
	"context"
	"path/filepath"
	"time"

	"tempest/api"
	"tempest/internal/blobstore"
	"tempest/rainstorm"
	"tempest/transport"
	"tempest/wire"
)

// Blobs through gates (docs/blobs.md): a client uploads a job's data files
// to the gates like to a datacenter: chunks to the gate leader, which
// commits them once a majority of the gates hold them. The job then names
// the blobs, and a datacenter's manager leader that lacks one fetches it
// from the gate that sent the submission (by range reads) and makes it
// durable among its managers before it accepts the job. So every chosen
// datacenter gets the blobs with the job, and a new gate leader taking a
// lease over has them too.

const (
	blobPartialTTL = time.Hour
	blobGCEvery    = 10 * time.Minute
)

type gateBlobs struct {
	store   *blobstore.Store
	rep     *blobstore.Replicator
	cluster *blobstore.Cluster
	api     *api.BlobService
}

func (g *Gate) openBlobs() error {
	st, err := blobstore.Open(filepath.Join(g.cfg.DataDir, "blobs"), g.log, g.now)
	if err != nil {
		return err
	}
	rep := &blobstore.Replicator{Store: st, Tr: g.tr, Log: g.log}
	cl := &blobstore.Cluster{Rep: rep, Peers: g.peerAddrs, Quorum: g.quorumSize, Spawn: g.spawn, Log: g.log}
	g.blobs = &gateBlobs{store: st, rep: rep, cluster: cl, api: &api.BlobService{
		Cluster: cl,
		Ready: func(ctx context.Context) error {
			_, err := g.awaitLeader(ctx)
			return err
		},
		Life: g.life.Context(),
		Log:  g.log,
	}}
	return nil
}

func (g *Gate) peerAddrs() []string {
	out := make([]string, 0, len(g.peerIDs))
	for _, id := range g.peerIDs {
		out = append(out, g.peers[id])
	}
	return out
}

// registerBlobHandlers: only other gates may write blobs here; managers
// read them (a submission's data files) and ask who holds them.
func (g *Gate) registerBlobHandlers() {
	b := g.blobs
	handle(g, wire.TypeBlobChunkPut, blobstore.MembersOnly(g.isPeer, "a gate", b.rep.HandlePut))
	handle(g, wire.TypeBlobCommit, blobstore.MembersOnly(g.isPeer, "a gate", b.rep.HandleCommit))
	handle(g, wire.TypeBlobStat, b.rep.HandleStat)
	handle(g, wire.TypeBlobChunkGet, func(ctx context.Context, from transport.Peer, msg *wire.BlobChunkGet) (wire.Message, error) {
		sum, err := blobstore.SumFromBytes(msg.Sum)
		if err != nil {
			return nil, wire.Errorf(wire.CodeMalformed, "%v", err)
		}
		// A manager reading through a gate that lacks the blob (a new
		// leader outside the majority that stored it): fetch it from the
		// gates first. Gates asking are looking for a holder: never recurse.
		if ok, _ := b.cluster.HasLocal(sum); !ok && !g.isPeer(from.NodeID) {
			if err := b.cluster.Fetch(ctx, sum); err != nil {
				return nil, wire.Errorf(wire.CodeNotFound, "blob %s: %v", sum, err)
			}
		}
		return b.rep.HandleGet(ctx, from, msg)
	})
}

// StatBlob implements api.BlobBackend (leader only).
func (g *Gate) StatBlob(ctx context.Context, sum string) (*api.BlobInfo, error) {
	return g.blobs.api.StatBlob(ctx, sum)
}

// PutBlobChunk implements api.BlobBackend (leader only).
func (g *Gate) PutBlobChunk(ctx context.Context, sum string, offset int64, data []byte) (int64, error) {
	return g.blobs.api.PutBlobChunk(ctx, sum, offset, data)
}

// CommitBlob implements api.BlobBackend (leader only): durable once a
// majority of the gates hold the blob.
func (g *Gate) CommitBlob(ctx context.Context, sum string, size int64) (*api.BlobInfo, error) {
	return g.blobs.api.CommitBlob(ctx, sum, size)
}

// ReadBlob implements api.BlobBackend.
func (g *Gate) ReadBlob(ctx context.Context, sum string, limit int64) ([]byte, error) {
	return g.blobs.api.ReadBlob(ctx, sum, limit)
}

// blobGCLoop removes blobs no kept job record references once the job
// retention has passed since their upload, and abandoned uploads.
func (g *Gate) blobGCLoop(ctx context.Context) {
	t := time.NewTicker(blobGCEvery)
	defer t.Stop()
	// The registry with every type a job may name: a pipeline's file:
	// source is a blob too.
	reg := rainstorm.Registry(rainstorm.ParseOptions{})
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var specs []wire.WorkflowSpec
		g.view(func() {
			for _, j := range g.jobs {
				specs = append(specs, j.rec.Submission.Workflows...)
			}
		})
		live := map[blobstore.Sum]bool{}
		for _, spec := range specs {
			sums, _ := reg.SpecBlobs(spec)
			for _, s := range sums {
				if sum, err := blobstore.ParseSum(s); err == nil {
					live[sum] = true
				}
			}
		}
		if _, err := g.blobs.store.GC(blobstore.GCPolicy{
			Live:       func(s blobstore.Sum) bool { return live[s] },
			Retention:  g.cfg.Retention,
			PartialTTL: blobPartialTTL,
		}); err != nil {
			g.log.Warn("blob gc", "err", err)
		}
	}
}
