package manager

import (
	"context"
	"fmt"

	"tempest/api"
	"tempest/leadership"
	"tempest/swim"
	"tempest/transport"
	"tempest/wire"
)

// Membership changes at runtime (docs/leadership.md, docs/datacenter.md):
// every change swaps the peer set quorum decisions read (a decision reads
// it once, so a change lands between decisions); learners and removal are
// leadership.RoleMembership's, with copyFromLeader as its Copy.

// onMembersChange is the elector's OnMembersChange.
func (m *Manager) onMembersChange(c *leadership.Configuration) { m.ms.OnMembersChange(c) }

// onRemoved is the elector's OnRemoved.
func (m *Manager) onRemoved(reason string) { m.ms.OnRemoved(reason) }

// copyFromLeader copies the leader's job table and then its RainStorm
// checkpoint store; it returns how many jobs it holds afterwards. Both
// are answered only once the leader's writes begun before this manager
// was a learner are in them, and every later write is sent here too, so
// once both are copied this manager holds what the voters hold.
func (m *Manager) copyFromLeader(ctx context.Context, lead, addr string) (int, error) {
	n, err := m.copyJobsFromLeader(ctx, lead, addr)
	if err != nil {
		return 0, err
	}
	if _, err := m.rs.CopyFrom(ctx, lead); err != nil {
		return 0, err
	}
	return n, nil
}

// copyJobsFromLeader reads the leader's snapshot, page by page, and stores
// it here as a follower stores what a leader replicates. It returns how
// many jobs it holds afterwards.
func (m *Manager) copyJobsFromLeader(ctx context.Context, lead, addr string) (int, error) {
	page := wire.StateSyncRequest{RequesterID: m.cfg.ID, RequesterRole: wire.RoleManager}
	var ms *wire.ManagerStateSnapshot
	for pages := 0; ; pages++ {
		resp, err := m.fetchState(ctx, addr, &page, func() bool { return false })
		if err != nil {
			return 0, fmt.Errorf("page %d from %s: %w", pages, lead, err)
		}
		p := resp.ManagerState
		if p == nil {
			return 0, fmt.Errorf("%s sent no manager snapshot", lead)
		}
		if !p.IsLeader {
			return 0, fmt.Errorf("%s no longer leads", lead)
		}
		if ms == nil {
			ms = p
		} else {
			mergeSnapshotPage(ms, p)
		}
		if p.NextAfter == "" || p.NextAfter <= page.JobsAfter {
			break
		}
		page.JobsAfter = p.NextAfter
	}
	for i := range ms.Workers {
		m.workers.learn(&ms.Workers[i])
	}
	n := 0
	err := m.update(func(tx *txn) {
		confirmed := make(map[string]bool, len(ms.Confirmed))
		for _, id := range ms.Confirmed {
			confirmed[id] = true
		}
		for i := range ms.Submissions {
			sub := &ms.Submissions[i]
			if sub.JobID == "" || m.validateSubmission(sub) != nil {
				continue
			}
			j := m.adoptSubmissionLocked(tx, sub)
			if confirmed[sub.JobID] && !j.rec.Confirmed {
				j.rec.Confirmed = true
				tx.touchJob(j, true)
			}
		}
		m.adoptEndedLocked(tx, ms)
		m.mergeSnapshotLocked(tx, ms)
		n = len(m.jobs)
	})
	if err != nil {
		return 0, fmt.Errorf("store the leader's snapshot: %w", err)
	}
	// The blobs its jobs name, as a follower fetches them for a replicated
	// job: in the background, from a voter that holds them.
	for i := range ms.Submissions {
		m.fetchMissingBlobs(&ms.Submissions[i])
	}
	return n, nil
}

// learnerSyncGate is the leader's side of a learner's sync
// (RoleMembership.ServeLearner).
func (m *Manager) learnerSyncGate(ctx context.Context, from transport.Peer) error {
	return m.ms.ServeLearner(ctx, from.NodeID, m.leading() != nil, func() error { return m.elector.NotLeaderError() })
}

// AddMember implements api.MembersBackend: the manager joins the group as
// a learner (SYNCING) and is promoted once it has synced.
func (m *Manager) AddMember(ctx context.Context, mc api.MemberChange) (*api.GroupView, error) {
	if _, err := m.elector.AddLearner(ctx, leadership.Member{ID: mc.ID, QUIC: mc.Addr}); err != nil {
		return nil, m.changeError(err)
	}
	return m.groupView(), nil
}

// RemoveMember implements api.MembersBackend. On the leader, a removal
// first waits until the voters it leaves hold every RainStorm checkpoint
// committed while one of them was a learner (removalFed).
func (m *Manager) RemoveMember(ctx context.Context, id string) (*api.GroupView, error) {
	if err := m.removalFed(ctx, id); err != nil {
		return nil, err
	}
	if _, err := m.elector.RemoveMember(ctx, id); err != nil {
		return nil, m.changeError(err)
	}
	return m.groupView(), nil
}

// removalFed waits until every voter but id has been sent the checkpoints
// committed while it was a learner. A learner is promoted once it has
// copied the leader's store, while the leader's last groups may still be
// on their way to it; that alone loses nothing, but a removal counts it
// as a full copy, and a checkpoint held by the removed member and by
// fewer than half the others would sit on a minority of the voters left.
// On a follower there is nothing to wait for: the elector refuses the
// change, and a later leader's sync reads a majority that includes such a
// voter's older holders.
func (m *Manager) removalFed(ctx context.Context, id string) error {
	if m.leading() == nil {
		return nil
	}
	if err := m.rs.RemovalFed(ctx, m.settledVoters, id); err != nil {
		return &wire.Error{Code: wire.CodeUnavailable, RetryAfter: m.seat.ElectionTimeout(),
			Message: fmt.Sprintf("remove %s: the voters that would remain do not yet hold every checkpoint: %v; retry", id, err)}
	}
	return nil
}

// settledVoters is the group's voters once no decision holds an older
// peer set.
func (m *Manager) settledVoters(ctx context.Context) ([]string, error) {
	p, err := m.group.Settled(ctx)
	if err != nil {
		return nil, err
	}
	return p.VoterIDs, nil
}

// changeError types a refused or failed change for the API.
func (m *Manager) changeError(err error) error {
	return leadership.ChangeError(err, func() error { return m.notLeaderAPI() }, m.seat.ElectionTimeout())
}

// groupView is the manager group as this manager has it, each member with
// its state: LEADER, FOLLOWER, SYNCING (a learner) or UNREACHABLE (SWIM
// does not see it alive).
func (m *Manager) groupView() *api.GroupView {
	c := m.elector.Members()
	lead, _ := m.elector.Leader()
	members := leadership.MemberViews(c, func(mem leadership.Member, voter bool) api.MemberView {
		return api.MemberView{ID: mem.ID, Addr: mem.QUIC, Voter: voter}
	})
	reachable := func(id string) bool {
		if id == m.cfg.ID {
			return true
		}
		_, alive, known := m.managers.get(id)
		if known {
			return alive
		}
		if m.members != nil {
			if info, ok := m.members.Member(id); ok {
				return info.State == swim.StateAlive
			}
		}
		return false
	}
	return api.NewGroupView("managers/"+m.cfg.Datacenter, c.Epoch, c.Quorum(), lead, members, reachable)
}
