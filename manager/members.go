package manager

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"tempest/api"
	"tempest/internal/lifecycle"
	"tempest/leadership"
	"tempest/swim"
	"tempest/transport"
	"tempest/wire"
)

// Membership changes at runtime (docs/leadership.md, docs/datacenter.md).
//
// The election layer keeps the group's configuration; this file is the
// manager's side of it:
//
//   - every change swaps the peer set quorum decisions read (peerset.go):
//     a decision reads it once, so a change lands between decisions;
//   - a manager added to the group is a learner, SYNCING: it copies the
//     leader's job table (syncAsLearner), then says so in its election
//     acknowledgements, and the leader promotes it. Until then it confirms
//     nothing and counts toward no majority, because a voter that holds
//     nothing would let a majority form that does not overlap the one that
//     stored an acknowledged job;
//   - a manager removed from the group stops, saying why, and so does a
//     removed manager restarted with its old configuration once the group
//     refuses it (OnRemoved).

// membership is the manager's runtime membership state.
type membership struct {
	mu      sync.Mutex
	syncing bool  // a learner sync loop runs
	exitErr error // why the manager stops by itself (removed)
}

// onMembersChange is the elector's OnMembersChange: the configuration in
// effect on this manager changed.
func (m *Manager) onMembersChange(c *leadership.Configuration) {
	p := leadership.NewPeerSet(m.cfg.ID, c)
	if !m.group.Set(p) {
		return
	}
	m.log.Info("manager group changed", "epoch", c.Epoch, "members", c.String(), "quorum", p.Quorum,
		"voter", p.SelfVoter, "syncing", p.SelfLearner)
	// Only a learner's finished copy reports synced: a node that starts
	// from its config file as a voter and then learns it is a learner must
	// not have said "synced" in between.
	switch {
	case p.SelfLearner:
		m.startLearnerSync()
	case p.SelfVoter:
	default:
		m.removed(fmt.Errorf("removed from the manager group of %s at configuration epoch %d (%s)", m.cfg.Datacenter, c.Epoch, c), true)
	}
}

// onRemoved is the elector's OnRemoved: this manager came back with a
// configuration the group has moved past, and the group does not list it.
func (m *Manager) onRemoved(reason string) { m.refusedAsRemoved(reason, true) }

// refusedAsRemoved stops a manager the group no longer names (removed
// while it was away, or found so in its own stored configuration).
func (m *Manager) refusedAsRemoved(reason string, settle bool) {
	m.removed(fmt.Errorf("this manager is no longer a member of its group and will not rejoin with its old configuration: %s; "+
		"to bring it back, `tempest members add` it and start it with an empty data dir", reason), settle)
}

// removed stops the manager: Run returns err, and the binary exits with it.
// A leader that removed itself has already handed over (the election does
// so as the change commits), so it only waits for its successor to show,
// at most an election timeout, to let the change's answer reach the client.
//
// settle is false when the manager finds itself removed as it starts: it
// never took part, so there is nothing to wait for.
func (m *Manager) removed(err error, settle bool) {
	m.ms.mu.Lock()
	first := m.ms.exitErr == nil
	if first {
		m.ms.exitErr = err
	}
	m.ms.mu.Unlock()
	if !first {
		return
	}
	m.log.Error("manager stopping: removed from its group", "err", err)
	if !settle {
		m.life.Cancel()
		return
	}
	if !m.spawn(func(ctx context.Context) {
		wctx, cancel := context.WithTimeout(ctx, m.seat.ElectionTimeout())
		defer cancel()
		for wctx.Err() == nil {
			if lead, _ := m.elector.Leader(); lead != "" && lead != m.cfg.ID {
				break
			}
			lifecycle.Sleep(wctx, m.cfg.HeartbeatInterval)
		}
		m.life.Cancel()
	}) {
		m.life.Cancel()
	}
}

// exitError is why the manager stopped by itself, nil if it did not.
func (m *Manager) exitError() error {
	m.ms.mu.Lock()
	defer m.ms.mu.Unlock()
	return m.ms.exitErr
}

// startLearnerSync starts syncAsLearner unless it runs already.
func (m *Manager) startLearnerSync() {
	m.ms.mu.Lock()
	defer m.ms.mu.Unlock()
	if m.ms.syncing {
		return
	}
	m.ms.syncing = true
	m.elector.SetSynced(false)
	if !m.spawn(m.syncAsLearner) {
		m.ms.syncing = false
	}
}

// syncAsLearner copies the leader's job table into this manager, then
// tells the election it is synced; the leader promotes it from there. The
// leader answers only once every write it began before this manager was in
// its peer set has been sent (groupView.settled), and sends every later one
// here too, so nothing falls between the copy and the replication.
func (m *Manager) syncAsLearner(ctx context.Context) {
	defer func() {
		m.ms.mu.Lock()
		m.ms.syncing = false
		m.ms.mu.Unlock()
	}()
	for round := 0; ctx.Err() == nil; round++ {
		if !m.group.Load().SelfLearner {
			return // promoted, or removed, meanwhile
		}
		lead, addr := m.elector.Leader()
		err := errNoLeaderYet
		if lead != "" && lead != m.cfg.ID && addr != "" {
			var n int
			if n, err = m.copyFromLeader(ctx, lead, addr); err == nil {
				m.elector.SetSynced(true)
				m.log.Info("synced from the leader as a learner; waiting to be promoted", "leader", lead, "jobs", n)
				return
			}
		}
		if round > 0 || !errors.Is(err, errNoLeaderYet) {
			m.log.Warn("learner sync: not synced yet; trying again", "leader", lead, "round", round, "err", err)
		}
		d := m.cfg.StateSyncBackoff << min(round, 4)
		if !lifecycle.Sleep(ctx, d/2+rand.N(d/2+1)) {
			return
		}
	}
}

var errNoLeaderYet = errors.New("no leader known yet")

// copyFromLeader reads the leader's snapshot, page by page, and stores it
// here as a follower stores what a leader replicates. It returns how many
// jobs it holds afterwards.
func (m *Manager) copyFromLeader(ctx context.Context, lead, addr string) (int, error) {
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

// learnerSyncGate is the leader's side of a learner's sync: a learner of the
// peer set in use is answered once no write begun under an older set is
// still being sent; a manager this leader does not (yet) count as a peer
// is told to come back, since it learns of its addition before the leader
// puts it into effect.
func (m *Manager) learnerSyncGate(ctx context.Context, from transport.Peer) error {
	p := m.group.Load()
	if _, learner := p.Learners[from.NodeID]; !learner {
		if p.IsPeer(from.NodeID) {
			return nil
		}
		if m.leading() != nil {
			return wire.Errorf(wire.CodeUnavailable, "%s is not yet in this leader's configuration (epoch %d)", from.NodeID, p.Epoch)
		}
		return wire.Errorf(wire.CodeRejected, "state sync is only served to peer managers")
	}
	if m.leading() == nil {
		return m.elector.NotLeaderError()
	}
	if _, err := m.group.Settled(ctx); err != nil {
		return wire.Errorf(wire.CodeUnavailable, "writes begun before %s joined are still being sent: %v", from.NodeID, err)
	}
	return nil
}

// AddMember implements api.MembersBackend: the manager joins the group as
// a learner (SYNCING) and is promoted once it has synced.
func (m *Manager) AddMember(ctx context.Context, mc api.MemberChange) (*api.GroupView, error) {
	if _, err := m.elector.AddLearner(ctx, leadership.Member{ID: mc.ID, QUIC: mc.Addr}); err != nil {
		return nil, m.changeError(err)
	}
	return m.groupView(), nil
}

// RemoveMember implements api.MembersBackend.
func (m *Manager) RemoveMember(ctx context.Context, id string) (*api.GroupView, error) {
	if _, err := m.elector.RemoveMember(ctx, id); err != nil {
		return nil, m.changeError(err)
	}
	return m.groupView(), nil
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
