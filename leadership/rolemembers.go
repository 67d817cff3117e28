package leadership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"tempest/internal/lifecycle"
	"tempest/wire"
)

// RoleMembership is a role's side of its group's runtime membership, the
// same for a gate and a manager (docs/leadership.md):
//
//   - a member added to the group is a learner, SYNCING: it copies the
//     leader's state (Copy), then says so in its election
//     acknowledgements, and the leader promotes it. Until then it confirms
//     nothing and counts toward no majority, because a voter that holds
//     nothing would let a majority form that does not overlap the one that
//     stored an acknowledged write;
//   - a member removed from the group stops, saying why, and so does a
//     removed member restarted with its old configuration once the group
//     refuses it (OnRemoved).
//
// The role gives it its elector, its peer view and its lifecycle; the
// role's Run returns ExitError.
type RoleMembership struct {
	ID string
	// Group names the group in messages: "gate group", "manager group of dc1".
	Group   string
	Elector *Elector
	View    *PeerView
	Life    *lifecycle.Owner
	Log     *slog.Logger
	// Poll is how often a removed member looks for its successor before it
	// stops; Backoff the first wait between learner copies (doubling, with
	// jitter, up to 16 times it).
	Poll, Backoff time.Duration
	// Copy copies the leader's state into this member and returns how many
	// records it holds afterwards. The leader answers a learner only once
	// every write it began before the learner was in its peer set has been
	// sent (PeerView.Settled), and sends every later one to it too, so
	// nothing falls between the copy and the replication.
	Copy func(ctx context.Context, lead, addr string) (int, error)

	mu      sync.Mutex
	syncing bool  // a learner copy loop runs
	exitErr error // why the role stops by itself (removed)
}

// Start is the role's first step in Run: a learner (restarted) copies
// again; a member whose stored configuration no longer names it takes no
// part in anything, elections included, and Start reports false.
func (r *RoleMembership) Start() bool {
	switch p := r.View.Load(); {
	case p.SelfLearner:
		r.startLearnerSync()
	case !p.SelfVoter:
		r.refused(fmt.Sprintf("the group's configuration stored here (epoch %d: %s) does not name it", p.Epoch, r.Elector.Members()), false)
		return false
	}
	return true
}

// OnMembersChange is the elector's OnMembersChange: the configuration in
// effect on this member changed. Only a learner's finished copy reports
// synced: a node that starts from its config file as a voter and then
// learns it is a learner must not have said "synced" in between.
func (r *RoleMembership) OnMembersChange(c *Configuration) {
	p := NewPeerSet(r.ID, c)
	if !r.View.Set(p) {
		return
	}
	r.Log.Info(r.Group+" changed", "epoch", c.Epoch, "members", c.String(), "quorum", p.Quorum,
		"voter", p.SelfVoter, "syncing", p.SelfLearner)
	switch {
	case p.SelfLearner:
		r.startLearnerSync()
	case p.SelfVoter:
	default:
		r.removed(fmt.Errorf("removed from the %s at configuration epoch %d (%s)", r.Group, c.Epoch, c), true)
	}
}

// OnRemoved is the elector's OnRemoved: this member came back with a
// configuration the group has moved past, and the group does not list it.
func (r *RoleMembership) OnRemoved(reason string) { r.refused(reason, true) }

func (r *RoleMembership) refused(reason string, settle bool) {
	r.removed(fmt.Errorf("this node is no longer a member of its group (the %s) and will not rejoin with its old configuration: %s; "+
		"to bring it back, `tempest members add` it and start it with an empty data dir", r.Group, reason), settle)
}

// removed stops the role: its Run returns err. A leader that removed
// itself has already handed over (the election does so as the change
// commits), so unless the member never took part (settle false) it only
// waits for its successor to show, at most an election timeout, to let the
// change's answer reach the client.
func (r *RoleMembership) removed(err error, settle bool) {
	r.mu.Lock()
	first := r.exitErr == nil
	if first {
		r.exitErr = err
	}
	r.mu.Unlock()
	if !first {
		return
	}
	r.Log.Error("stopping: removed from the "+r.Group, "err", err)
	if !settle || !r.Life.Go(func(ctx context.Context) {
		wctx, cancel := context.WithTimeout(ctx, r.Elector.profile.ElectionTimeout())
		defer cancel()
		for wctx.Err() == nil {
			if lead, _ := r.Elector.Leader(); lead != "" && lead != r.ID {
				break
			}
			lifecycle.Sleep(wctx, r.Poll)
		}
		r.Life.Cancel()
	}) {
		r.Life.Cancel()
	}
}

// ExitError is why the role stopped by itself, nil if it did not.
func (r *RoleMembership) ExitError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exitErr
}

func (r *RoleMembership) startLearnerSync() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.syncing {
		return
	}
	r.syncing = true
	r.Elector.SetSynced(false)
	if !r.Life.Go(r.syncAsLearner) {
		r.syncing = false
	}
}

var errNoLeaderYet = errors.New("no leader known yet")

// syncAsLearner copies the leader's state, then tells the election this
// member is synced; the leader promotes it from there.
func (r *RoleMembership) syncAsLearner(ctx context.Context) {
	defer func() {
		r.mu.Lock()
		r.syncing = false
		r.mu.Unlock()
	}()
	for round := 0; ctx.Err() == nil; round++ {
		if !r.View.Load().SelfLearner {
			return // promoted, or removed, meanwhile
		}
		lead, addr := r.Elector.Leader()
		err := errNoLeaderYet
		if lead != "" && lead != r.ID && addr != "" {
			var n int
			if n, err = r.Copy(ctx, lead, addr); err == nil {
				r.Elector.SetSynced(true)
				r.Log.Info("synced from the leader as a learner; waiting to be promoted", "leader", lead, "records", n)
				return
			}
		}
		if round > 0 || !errors.Is(err, errNoLeaderYet) {
			r.Log.Warn("learner sync: not synced yet; trying again", "leader", lead, "round", round, "err", err)
		}
		d := max(r.Backoff, time.Millisecond) << min(round, 4)
		if !lifecycle.Sleep(ctx, d/2+rand.N(d/2+1)) {
			return
		}
	}
}

// ServeLearner is the leader's side of a learner's copy: a learner of the
// peer set in use is answered once no write begun under an older set is
// still being sent; a voter is answered at once; a member this leader does
// not (yet) count as a peer is told to come back, since it learns of its
// addition before the leader puts it into effect. leading is whether this
// node leads; notLeader is the role's redirect when it does not.
func (r *RoleMembership) ServeLearner(ctx context.Context, from string, leading bool, notLeader func() error) error {
	p := r.View.Load()
	if _, learner := p.Learners[from]; !learner {
		if p.IsPeer(from) {
			return nil
		}
		if leading {
			return wire.Errorf(wire.CodeUnavailable, "%s is not yet in this leader's configuration (epoch %d)", from, p.Epoch)
		}
		return wire.Errorf(wire.CodeRejected, "state is only shared with the members of the %s", r.Group)
	}
	if !leading {
		return notLeader()
	}
	if _, err := r.View.Settled(ctx); err != nil {
		return wire.Errorf(wire.CodeUnavailable, "writes begun before %s joined are still being sent: %v", from, err)
	}
	return nil
}
