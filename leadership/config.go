package leadership

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"tempest/wire"
)

// Configuration is an election group's member set at an epoch. Epoch 0 is
// the static one a node starts from (its config file's peers); every change
// adds or removes exactly one member and raises the epoch by one.
//
// A change is Raft's single-server membership change, not joint consensus:
// when two configurations differ by one member, every majority of one
// overlaps every majority of the other, so a node counting votes in either
// cannot help elect a second leader in a term; one change at a time keeps
// no more than two configurations in play. Joint consensus allows
// arbitrary changes in one step at the cost of a third, combined
// configuration and two-majority counting everywhere; adding or removing
// one manager or gate is what operators do, so the simpler rule is enough.
//
// The leader proposes a change, sends it with its heartbeats, and puts it
// into effect only once a majority of the *old* configuration has stored it
// (acknowledged its epoch). Every node stores a configuration (fsync, with
// its term and vote) before acknowledging it, and voters refuse candidates
// of an older epoch, so once a change is in effect no node that missed it
// can be elected: any majority that could elect it overlaps the majority
// that stored the change.
//
// Learners are members on probation: a node added to a group joins as a
// learner, receives the leader's heartbeats (and, in the roles, every
// replicated write), but neither votes, campaigns nor counts toward any
// majority. The leader promotes it to a voter — a change of its own — once
// it reports, in its heartbeat acknowledgements, that its role has synced.
// Until then it cannot weaken a quorum: a voter that holds nothing would
// let a majority exist that does not overlap the one that stored a write.
type Configuration struct {
	Epoch    uint64   `cbor:"1,keyasint"`
	Members  []Member `cbor:"2,keyasint"` // the voters
	Learners []Member `cbor:"3,keyasint,omitempty"`
}

// Errors of a configuration change; callers branch on them.
var (
	ErrChangePending  = errors.New("a membership change is still being committed")
	ErrNotSettled     = errors.New("the current configuration is not yet stored on a majority")
	ErrOneAtATime     = errors.New("a membership change adds or removes exactly one member")
	ErrNotAMember     = errors.New("not a member of the group's configuration")
	ErrChangeUnstable = errors.New("leadership changed before the membership change was committed")
	ErrNoSuchMember   = errors.New("no such member")
	ErrAlreadyMember  = errors.New("already a member")
)

// IDs lists the members' ids, sorted.
func (c *Configuration) IDs() []string {
	ids := make([]string, 0, len(c.Members))
	for _, m := range c.Members {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	return ids
}

// Has reports whether id is a member.
func (c *Configuration) Has(id string) bool {
	return slices.ContainsFunc(c.Members, func(m Member) bool { return m.ID == id })
}

// HasLearner reports whether id is a learner.
func (c *Configuration) HasLearner(id string) bool {
	return slices.ContainsFunc(c.Learners, func(m Member) bool { return m.ID == id })
}

// LearnerIDs lists the learners' ids, sorted.
func (c *Configuration) LearnerIDs() []string {
	ids := make([]string, 0, len(c.Learners))
	for _, m := range c.Learners {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	return ids
}

// Addr is a voter's or a learner's address, "" if it is neither.
func (c *Configuration) Addr(id string) string {
	for _, m := range c.Members {
		if m.ID == id {
			return m.QUIC
		}
	}
	for _, m := range c.Learners {
		if m.ID == id {
			return m.QUIC
		}
	}
	return ""
}

// Quorum is a majority of the members.
func (c *Configuration) Quorum() int { return len(c.Members)/2 + 1 }

func (c *Configuration) String() string {
	if len(c.Learners) > 0 {
		return fmt.Sprintf("epoch %d [%s] learners [%s]", c.Epoch, strings.Join(c.IDs(), " "), strings.Join(c.LearnerIDs(), " "))
	}
	return fmt.Sprintf("epoch %d [%s]", c.Epoch, strings.Join(c.IDs(), " "))
}

func (c *Configuration) toWire() *wire.GroupConfig {
	w := &wire.GroupConfig{Epoch: c.Epoch, Members: make([]wire.GroupMember, 0, len(c.Members))}
	for _, m := range c.Members {
		w.Members = append(w.Members, wire.GroupMember{ID: m.ID, Addr: m.QUIC})
	}
	for _, m := range c.Learners {
		w.Learners = append(w.Learners, wire.GroupMember{ID: m.ID, Addr: m.QUIC})
	}
	return w
}

func configFromWire(w *wire.GroupConfig) (*Configuration, error) {
	c := &Configuration{Epoch: w.Epoch}
	seen := map[string]bool{}
	add := func(to *[]Member, ms []wire.GroupMember) error {
		for _, m := range ms {
			if m.ID == "" || seen[m.ID] {
				return fmt.Errorf("configuration epoch %d: empty or duplicate member %q", w.Epoch, m.ID)
			}
			seen[m.ID] = true
			*to = append(*to, Member{ID: m.ID, QUIC: m.Addr})
		}
		return nil
	}
	if err := add(&c.Members, w.Members); err != nil {
		return nil, err
	}
	if err := add(&c.Learners, w.Learners); err != nil {
		return nil, err
	}
	if len(c.Members) == 0 {
		return nil, fmt.Errorf("configuration epoch %d has no members", w.Epoch)
	}
	sortMembers(c.Members)
	sortMembers(c.Learners)
	return c, nil
}

func sortMembers(ms []Member) {
	slices.SortFunc(ms, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
}

// oneStep reports whether next follows cur by one step: the voters change
// by at most one member (oneChange's rule), and at most one node joins,
// leaves or changes between voter and learner. Adding a learner, promoting
// one, demoting a voter and removing either are each one step.
func oneStep(cur, next *Configuration) error {
	if len(next.Members) == 0 {
		return fmt.Errorf("%w: a group keeps at least one voter", ErrOneAtATime)
	}
	all := func(c *Configuration) map[string]string {
		out := map[string]string{}
		for _, m := range slices.Concat(c.Members, c.Learners) {
			out[m.ID] = m.QUIC
		}
		return out
	}
	a, b := all(cur), all(next)
	if len(b) != len(next.Members)+len(next.Learners) {
		return fmt.Errorf("%w: a node is both voter and learner, or listed twice", ErrOneAtATime)
	}
	moved := 0
	for id, addr := range a {
		baddr, ok := b[id]
		switch {
		case !ok:
			moved++
		case baddr != addr:
			return fmt.Errorf("%w: %s's address changes from %s to %s", ErrOneAtATime, id, addr, baddr)
		case cur.Has(id) != next.Has(id):
			moved++
		}
	}
	for id := range b {
		if _, ok := a[id]; !ok {
			moved++
		}
	}
	if moved != 1 {
		return fmt.Errorf("%w (%d differ)", ErrOneAtATime, moved)
	}
	return nil
}

// oneChange reports whether next differs from cur by exactly one member
// added or removed (an address change of a kept member is not allowed in
// the same step).
func oneChange(cur, next []Member) error {
	byID := func(ms []Member) map[string]string {
		out := make(map[string]string, len(ms))
		for _, m := range ms {
			out[m.ID] = m.QUIC
		}
		return out
	}
	a, b := byID(cur), byID(next)
	diff := 0
	for id, addr := range a {
		if baddr, ok := b[id]; !ok {
			diff++
		} else if baddr != addr {
			return fmt.Errorf("%w: %s's address changes from %s to %s", ErrOneAtATime, id, addr, baddr)
		}
	}
	for id := range b {
		if _, ok := a[id]; !ok {
			diff++
		}
	}
	if diff != 1 || len(b) != len(next) || len(next) == 0 {
		return fmt.Errorf("%w (%d differ)", ErrOneAtATime, diff)
	}
	return nil
}

// Members is the configuration in effect (a leader's proposed change is
// not, until a majority of this one stored it).
func (m *Machine) Members() *Configuration { return m.conf }

// latestConf is the newest configuration this node has: a leader's
// pending change, else the one in effect.
func (m *Machine) latestConf() *Configuration {
	if m.pending != nil {
		return m.pending
	}
	return m.conf
}

func (m *Machine) setConf(c *Configuration) {
	m.conf = c
	m.peers = c.IDs()
	m.learners = c.LearnerIDs()
	m.quorum = c.Quorum()
	m.member = c.Has(m.cfg.ID)
	m.learner = c.HasLearner(m.cfg.ID)
}

// ProposeMembers changes the voters to members, one added or removed;
// learners stay learners unless members names them (a promotion).
func (m *Machine) ProposeMembers(members []Member) (*Configuration, error) {
	learners := slices.DeleteFunc(slices.Clone(m.conf.Learners), func(l Member) bool {
		return slices.ContainsFunc(members, func(v Member) bool { return v.ID == l.ID })
	})
	return m.ProposeConfig(members, learners)
}

// ProposeConfig starts a change of the group to these voters and learners:
// only the leader may, one step at a time (oneStep), once the configuration
// in effect is stored on a majority of itself (so no member holds a newer
// one this leader has not seen) and no other change is under way. The
// change takes effect once a majority of the current voters has stored it
// (see Configuration); a leader that removes itself then hands over.
func (m *Machine) ProposeConfig(voters, learners []Member) (*Configuration, error) {
	if m.state != Leader {
		return nil, ErrNotLeader
	}
	if m.pending != nil {
		return nil, fmt.Errorf("%w (%s)", ErrChangePending, m.pending)
	}
	if got := m.storedBy(m.conf.Epoch); got < m.quorum {
		return nil, fmt.Errorf("%w: %d of %d members acknowledged %s", ErrNotSettled, got, len(m.peers), m.conf)
	}
	next := &Configuration{Epoch: m.conf.Epoch + 1, Members: slices.Clone(voters), Learners: slices.Clone(learners)}
	sortMembers(next.Members)
	sortMembers(next.Learners)
	if err := oneStep(m.conf, next); err != nil {
		return nil, err
	}
	m.pending = next
	m.heartbeatElapsed = 0
	m.broadcastHeartbeat() // Ready stores it before this leaves
	return next, nil
}

// maybePromote proposes, on a settled leader with no change under way, the
// promotion of a learner whose acknowledgements say its role has synced and
// that has stored the configuration in effect. The leader decides, from
// what the learner reports; one learner per change.
func (m *Machine) maybePromote() {
	if m.pending != nil || len(m.learners) == 0 {
		return
	}
	for _, id := range m.learners {
		f, ok := m.followers[id]
		if !ok || !f.synced || f.epoch < m.conf.Epoch || m.now-f.at > m.cfg.ElectionTicks {
			continue
		}
		i := slices.IndexFunc(m.conf.Learners, func(l Member) bool { return l.ID == id })
		voters := append(slices.Clone(m.conf.Members), m.conf.Learners[i])
		learners := slices.Delete(slices.Clone(m.conf.Learners), i, i+1)
		if _, err := m.ProposeConfig(voters, learners); err == nil {
			return
		}
	}
}

// storedBy counts the members of the configuration in effect that have
// acknowledged epoch (or newer) in this term, this node included.
func (m *Machine) storedBy(epoch uint64) int {
	n := 0
	for _, p := range m.peers {
		if p == m.cfg.ID {
			n++
		} else if f, ok := m.followers[p]; ok && f.epoch >= epoch {
			n++
		}
	}
	return n
}

// maybeCommitConf puts a pending change into effect once a majority of the
// configuration it replaces has stored it.
func (m *Machine) maybeCommitConf() {
	if m.pending == nil || m.storedBy(m.pending.Epoch) < m.quorum {
		return
	}
	m.setConf(m.pending)
	m.pending = nil
	if !m.member {
		// Removed itself: hand over to the best remaining member, or just
		// step down; either way it no longer campaigns.
		if _, err := m.TransferLeadership(""); err != nil {
			m.becomeFollower(m.term, "")
		}
	}
}

// stepStranger handles a message from a node outside the configuration.
// A candidate is answered with a refusal that says why (a removed member
// restarted with its old config learns it was removed, and cannot disturb
// the group); a leader whose heartbeat hands this node a newer
// configuration naming both is followed (how a new member joins).
func (m *Machine) stepStranger(from string, msg wire.Message) {
	switch msg := msg.(type) {
	case *wire.PreVoteRequest:
		if msg.Cluster == m.cfg.Cluster && msg.Candidate == from {
			m.send(from, &wire.PreVoteResponse{Cluster: m.cfg.Cluster, Term: m.term, Voter: m.cfg.ID,
				Reason: m.strangerReason(from), ConfigEpoch: m.conf.Epoch, NotMember: true})
		}
	case *wire.VoteRequest:
		if msg.Cluster == m.cfg.Cluster && msg.Candidate == from {
			m.send(from, &wire.VoteResponse{Cluster: m.cfg.Cluster, Term: m.term, Voter: m.cfg.ID,
				Reason: m.strangerReason(from), ConfigEpoch: m.conf.Epoch, NotMember: true})
		}
	case *wire.LeaderHeartbeat:
		if msg.Cluster != m.cfg.Cluster || msg.Leader != from || msg.Config == nil || msg.Config.Epoch <= m.conf.Epoch {
			return
		}
		c, err := configFromWire(msg.Config)
		if err != nil || !c.Has(from) {
			return
		}
		m.setConf(c)
		m.onHeartbeat(from, msg)
	}
}

func (m *Machine) strangerReason(from string) string {
	return fmt.Sprintf("%s is not a member of %s at configuration epoch %d (%s)", from, m.cfg.Cluster, m.conf.Epoch, m.conf)
}

func (m *Machine) staleReason(epoch uint64) string {
	return fmt.Sprintf("stale configuration epoch %d: %s is at %s", epoch, m.cfg.Cluster, m.conf)
}

// noteRefusal keeps, for Ready, the reason a peer with a newer
// configuration refused this node, and whether that configuration leaves
// this node out altogether.
func (m *Machine) noteRefusal(from string, granted bool, epoch uint64, reason string, notMember bool) {
	if !granted && epoch > m.conf.Epoch && reason != "" {
		m.notice = fmt.Sprintf("%s refused this node: %s", from, reason)
		m.noticeRemoved = notMember
	}
}

// MemberViews lists c's voters, then its learners, as f makes each one.
func MemberViews[T any](c *Configuration, f func(m Member, voter bool) T) []T {
	out := make([]T, 0, len(c.Members)+len(c.Learners))
	for _, m := range c.Members {
		out = append(out, f(m, true))
	}
	for _, m := range c.Learners {
		out = append(out, f(m, false))
	}
	return out
}

// ChangeError types an error of AddLearner or RemoveMember for a role's
// client API: notLeader is the role's own not-leader answer (naming its
// leader's API), retryAfter how long a change under way or not yet settled
// should be waited for (about an election timeout).
func ChangeError(err error, notLeader func() error, retryAfter time.Duration) error {
	switch {
	case errors.Is(err, ErrNotLeader):
		return notLeader()
	case errors.Is(err, ErrAlreadyMember), errors.Is(err, ErrNoSuchMember), errors.Is(err, ErrOneAtATime):
		return wire.Errorf(wire.CodeRejected, "%v", err)
	case errors.Is(err, ErrChangePending), errors.Is(err, ErrNotSettled):
		return &wire.Error{Code: wire.CodeUnavailable, Message: err.Error() + "; retry once it is", RetryAfter: retryAfter}
	case errors.Is(err, ErrChangeUnstable), errors.Is(err, context.DeadlineExceeded):
		return wire.Errorf(wire.CodeOutcomeUnknown, "%v; `tempest cluster` shows whether it took effect", err)
	}
	return err
}
