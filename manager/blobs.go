package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"tempest/api"
	"tempest/internal/blobstore"
	"tempest/internal/lifecycle"
	"tempest/jobs"
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

// A submission from a gate may name blobs only the gates hold yet: the
// manager fetches them from the gate that sent it (blobstore.WithSources).

// openBlobs opens the blob store in the data dir; New calls it once the
// transport exists. The group is the datacenter's configured managers, and
// the API's blob routes answer on the leader.
func (m *Manager) openBlobs() error {
	n, err := blobstore.OpenNode(blobstore.NodeConfig{DataDir: m.cfg.DataDir, Tr: m.tr, Log: m.log, Now: m.clock.Now,
		Peers: m.blobPeers, Spawn: m.spawn, Limits: m.cfg.BlobLimits(m.referencedBlobs)})
	if err != nil {
		return err
	}
	m.blobs = n
	m.BlobService = api.NewBlobService(n.Cluster, func(ctx context.Context) error {
		_, err := m.awaitLeader(ctx, m.notLeaderAPI)
		return err
	}, m.life.Context(), m.log)
	return nil
}

// registerBlobHandlers: only peer managers may write blobs here; a peer
// may read any blob, a worker only one named by work dispatched to it
// (guardBlobGet), fetched from a peer first when this manager lacks it (a
// new leader). Asking whether a blob is held (BlobStat) tells nothing of
// its content.
func (m *Manager) registerBlobHandlers() {
	b := m.blobs
	const members = "a manager of this datacenter"
	handle(m, wire.TypeBlobChunkPut, blobstore.MembersOnly(m.isPeer, members, b.Rep.HandlePut))
	handle(m, wire.TypeBlobCommit, blobstore.MembersOnly(m.isPeer, members, b.Rep.HandleCommit))
	handle(m, wire.TypeBlobStat, b.Rep.HandleStat)
	handle(m, wire.TypeBlobChunkGet, m.guardBlobGet(b.HandleGet(m.isPeer)))
}

// peerAddrs lists the other managers' addresses, learners included.
func (m *Manager) peerAddrs() []string { return m.group.Load().Addrs() }

// blobPeers is the group as a blob's durability sees it: the other voters
// and their majority, read together.
func (m *Manager) blobPeers() ([]string, int) {
	p := m.group.Load()
	return p.VoterAddrs(), p.Quorum
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
		return jobs.Refusal(err)
	}
	for _, sum := range sums {
		holders, err := m.blobs.Cluster.EnsureDurable(ctx, sum)
		if err == nil {
			continue
		}
		if errors.Is(err, blobstore.ErrNotFound) {
			return wire.Errorf(wire.CodeRejected, "job %q references blob %s, which no manager holds: upload it first (tempest submit does)", sub.Name, sum)
		}
		return wire.Errorf(wire.CodeNoQuorum, "job %q references blob %s, which is on %d of the %d managers needed: %v", sub.Name, sum, holders, m.group.Load().Quorum, err)
	}
	return nil
}

// liveBlobs is every blob a job this manager still keeps references, once
// (finished jobs count until their retention ends, so a re-run of a
// finished job's workflow still finds its data).
func (m *Manager) liveBlobs() []string {
	m.mu.Lock()
	specs := make([]wire.WorkflowSpec, 0, len(m.jobs))
	for _, j := range m.jobs {
		specs = append(specs, j.rec.Submission.Workflows...)
	}
	m.mu.Unlock()
	var live []string
	seen := make(map[string]bool)
	for _, spec := range specs {
		sums, _ := m.reg.SpecBlobs(spec)
		for _, s := range sums {
			if !seen[s] {
				seen[s] = true
				live = append(live, s)
			}
		}
	}
	return live
}

// referencedBlobs is the set of blobs kept jobs name, for the store's
// quota on blobs no job names.
func (m *Manager) referencedBlobs() map[blobstore.Sum]bool {
	live := m.liveBlobs()
	out := make(map[blobstore.Sum]bool, len(live))
	for _, s := range live {
		if sum, err := blobstore.ParseSum(s); err == nil {
			out[sum] = true
		}
	}
	return out
}

// blobGCLoop removes blobs no kept job references once their retention
// (the manager's job retention) has passed, and abandoned partial uploads.
func (m *Manager) blobGCLoop(ctx context.Context) {
	lifecycle.Every(ctx, blobstore.GCEvery, m.collectBlobs)
}

func (m *Manager) collectBlobs() {
	if _, err := m.blobs.Collect(m.liveBlobs(), m.cfg.Retention); err != nil {
		m.log.Warn("blob gc", "err", err)
	}
}

// repairBlobs runs when this manager starts leading: every blob a kept job
// references is made durable again (fetched here, pushed to peers that
// lost it), so a worker's read never waits on a missing copy.
func (m *Manager) repairBlobs(ctx context.Context) {
	for _, s := range m.liveBlobs() {
		sum, err := blobstore.ParseSum(s)
		if err != nil {
			continue
		}
		if _, err := m.blobs.Cluster.EnsureDurable(ctx, sum); err != nil && ctx.Err() == nil {
			m.log.Warn("blob repair", "sum", sum.String(), "err", err)
		}
	}
}

// fetchMissingBlobs runs on a peer that stored a replicated submission: a
// blob it names that this manager lacks (it was down when the leader
// pushed) is fetched from a peer that holds it, in the background, so the
// copy is here before this manager may have to lead.
func (m *Manager) fetchMissingBlobs(sub *wire.JobSubmission) {
	sums, err := m.submissionBlobs(sub)
	if err != nil {
		return
	}
	for _, sum := range sums {
		if ok, _ := m.blobs.Cluster.HasLocal(sum); ok {
			continue
		}
		m.spawn(func(ctx context.Context) {
			if err := m.blobs.Cluster.Fetch(ctx, sum); err != nil && ctx.Err() == nil {
				m.log.Warn("fetch blob of a replicated job", "job_id", sub.JobID, "sum", sum.String(), "err", err)
			}
		})
	}
}
