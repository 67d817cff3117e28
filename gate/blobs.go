package gate

import (
	"context"

	"tempest/api"
	"tempest/internal/blobstore"
	"tempest/internal/lifecycle"
	"tempest/rainstorm"
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

// openBlobs opens the gates' blob store: the group is every configured
// gate, and the API's blob routes answer on the leader.
func (g *Gate) openBlobs() error {
	n, err := blobstore.OpenNode(blobstore.NodeConfig{DataDir: g.cfg.DataDir, Tr: g.tr, Log: g.log, Now: g.now,
		Peers: g.blobPeers, Spawn: g.spawn, Limits: g.cfg.BlobLimits(g.referencedBlobs)})
	if err != nil {
		return err
	}
	g.blobs = n
	g.BlobService = api.NewBlobService(n.Cluster, func(ctx context.Context) error {
		_, err := g.awaitLeader(ctx)
		return err
	}, g.life.Context(), g.log)
	return nil
}

// blobPeers is the gate group as the blob store sees it.
func (g *Gate) blobPeers() ([]string, int) {
	p := g.group.Load()
	return p.VoterAddrs(), p.Quorum
}

// peerAddrs lists the other gates' addresses.
func (g *Gate) peerAddrs() []string { return g.group.Load().Addrs() }

// registerBlobHandlers: only other gates may write blobs here; managers
// read them (a submission's data files, fetched from the gates first when
// this gate lacks one) and ask who holds them.
func (g *Gate) registerBlobHandlers() {
	b := g.blobs
	handle(g, wire.TypeBlobChunkPut, blobstore.MembersOnly(g.isPeer, "a gate", b.Rep.HandlePut))
	handle(g, wire.TypeBlobCommit, blobstore.MembersOnly(g.isPeer, "a gate", b.Rep.HandleCommit))
	handle(g, wire.TypeBlobStat, b.Rep.HandleStat)
	handle(g, wire.TypeBlobChunkGet, b.HandleGet(g.isPeer))
}

// blobGCLoop removes blobs no kept job record references once the job
// retention has passed since their upload, and abandoned uploads.
func (g *Gate) blobGCLoop(ctx context.Context) {
	lifecycle.Every(ctx, blobstore.GCEvery, func() {
		if _, err := g.blobs.Collect(g.liveBlobs(), g.cfg.Retention); err != nil {
			g.log.Warn("blob gc", "err", err)
		}
	})
}

// liveBlobs lists the blobs kept job records name (in hex, perhaps twice).
func (g *Gate) liveBlobs() []string {
	// The registry with every type a job may name: a pipeline's file:
	// source is a blob too.
	reg := rainstorm.Registry(rainstorm.ParseOptions{})
	var live []string
	g.view(func() {
		for _, j := range g.jobs {
			for _, spec := range j.rec.Submission.Workflows {
				sums, _ := reg.SpecBlobs(spec)
				live = append(live, sums...)
			}
		}
	})
	return live
}

// referencedBlobs is the set of blobs kept job records name, for the
// store's quota on blobs no job names.
func (g *Gate) referencedBlobs() map[blobstore.Sum]bool {
	live := g.liveBlobs()
	out := make(map[blobstore.Sum]bool, len(live))
	for _, s := range live {
		if sum, err := blobstore.ParseSum(s); err == nil {
			out[sum] = true
		}
	}
	return out
}
