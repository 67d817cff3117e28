package leadership

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"

	"tempest/wire"
)

// State is a node's role in its election group.
type State uint8

const (
	Follower State = iota
	PreCandidate
	Candidate
	Leader
)

func (s State) String() string {
	switch s {
	case Follower:
		return "follower"
	case PreCandidate:
		return "pre-candidate"
	case Candidate:
		return "candidate"
	case Leader:
		return "leader"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Status is what a node believes about its election group.
type Status struct {
	ID    string
	State State
	Term  uint64
	// Leader is the leader this node currently follows (itself when it
	// leads); empty when it knows of no live leader.
	Leader string
	// FenceToken is the term at which this node became leader, and zero
	// whenever it is not leader, so a node that lost leadership cannot stamp
	// commands by accident. Tokens grow across leaders because terms do.
	FenceToken uint64
}

// Outbound is a message the machine wants delivered to peer To.
type Outbound struct {
	To  string
	Msg wire.Message
}

// Ready is what the machine has produced since the last call to
// Machine.Ready: messages to send and, if anything in Status changed, the new
// Status.
type Ready struct {
	Messages    []Outbound
	StateChange *Status
	// Confirmations are the answers, since the last Ready, in which peers
	// acknowledged this node as leader (or candidate) of its current term.
	// The driver turns them into a wall-clock lease (Elector.QuorumAge).
	Confirmations []Confirmation
	// Notice says why a peer refused this node in a way its operator must
	// act on: its configuration is stale (it was removed, or missed a
	// change). Empty when there is nothing new to say.
	Notice string
	// Removed, with a Notice: the refusing peer's newer configuration
	// leaves this node out altogether, and this node has taken part in the
	// group before (it has a term or a stored configuration), so it was
	// removed rather than not yet added.
	Removed bool
}

// Confirmation is a peer's acknowledgement of this node's current term,
// given at some moment after the message it answers was sent.
type Confirmation struct {
	From string
	// Seq is the LeaderHeartbeat answered; zero for a vote granted in this
	// term's election (answering this term's VoteRequest).
	Seq uint64
}

// Config configures a Machine. Times are in ticks; the driver decides how
// long a tick is (see Profile).
type Config struct {
	// ID is this node's id; it must be one of Peers.
	ID string
	// Cluster names the election group ("managers/dc-east", "gates"); every
	// message carries it, and messages for another group are ignored.
	Cluster string
	// Peers lists every configured member including ID. Quorum is a
	// majority of len(Peers), never of the members currently alive. It is
	// the initial configuration (epoch 0) only: a configuration stored by
	// an accepted membership change (HardState.Config) replaces it.
	Peers []string
	// Addrs holds the Peers' transport addresses, carried in
	// configurations the leader hands to new members; optional.
	Addrs map[string]string
	// ElectionTicks is the base election timeout: a follower that hears no
	// leader for a random time in [ElectionTicks, 2*ElectionTicks) starts a
	// pre-vote, and a leader that has not heard from a majority within
	// ElectionTicks steps down.
	ElectionTicks int
	// HeartbeatTicks is how often a leader asserts itself; it must be well
	// below ElectionTicks so a few lost heartbeats do not cost the lease.
	HeartbeatTicks int
	// Rand randomizes election timeouts. Seed it for reproducible runs; nil
	// means a generator seeded from ID, which is still deterministic.
	Rand *rand.Rand
	// MaxLeaderLHM is the highest Lifeguard local health score at which a
	// node may lead or stand for election.
	MaxLeaderLHM int
	// FlapMaxChanges leadership changes seen within FlapWindowTicks are
	// tolerated; one more starts a cooldown of FlapCooldownTicks during which
	// this node starts no elections. Zero disables flap detection.
	FlapMaxChanges    int
	FlapWindowTicks   int
	FlapCooldownTicks int
	// Priority ranks this node among healthy candidates: between two of
	// equal health score, the higher priority is preferred. Voters refuse a
	// pre-vote to a candidate they outrank (and stand themselves), and a
	// settled leader hands over to a follower of higher priority that is at
	// least as healthy. Equal priorities (the default) change nothing.
	Priority int
	// Syncs says this node's role holds state it must copy from the group
	// before it can vote: it reports itself unsynced in its heartbeat
	// acknowledgements until SetSynced(true), and a leader promotes a
	// learner only once it reports synced. False: always synced.
	Syncs bool
}

// Validate reports every problem with c at once.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if c.ID == "" {
		bad("ID", "must not be empty")
	}
	seen := make(map[string]bool, len(c.Peers))
	for _, p := range c.Peers {
		if p == "" {
			bad("Peers", "contains an empty id")
		}
		if seen[p] {
			bad("Peers", "lists %q twice", p)
		}
		seen[p] = true
	}
	if c.ID != "" && !seen[c.ID] {
		bad("Peers", "must include ID %q", c.ID)
	}
	if c.ElectionTicks < 2 {
		bad("ElectionTicks", "must be at least 2, got %d", c.ElectionTicks)
	}
	if c.HeartbeatTicks < 1 || c.HeartbeatTicks >= c.ElectionTicks {
		bad("HeartbeatTicks", "must be in [1, ElectionTicks), got %d", c.HeartbeatTicks)
	}
	if c.MaxLeaderLHM < 0 {
		bad("MaxLeaderLHM", "must not be negative, got %d", c.MaxLeaderLHM)
	}
	if c.FlapMaxChanges < 0 {
		bad("FlapMaxChanges", "must not be negative, got %d", c.FlapMaxChanges)
	}
	if c.FlapMaxChanges > 0 {
		if c.FlapWindowTicks < 1 {
			bad("FlapWindowTicks", "must be positive when flap detection is on, got %d", c.FlapWindowTicks)
		}
		if c.FlapCooldownTicks < 1 {
			bad("FlapCooldownTicks", "must be positive when flap detection is on, got %d", c.FlapCooldownTicks)
		}
	}
	return errors.Join(errs...)
}

// Machine is the election state machine. It is deliberately inert: no
// goroutines, no clock, no network. Time arrives as Tick, messages as Step,
// and everything it wants done leaves through Ready, so the same code runs
// under the real driver and under a deterministic simulation.
//
// The only side effect is Storage.Save, called from Ready: the term and vote
// are made durable there before any message is handed out, because a vote
// that is sent but forgotten in a crash lets a node vote twice in one term.
//
// A Machine is not safe for concurrent use.
type Machine struct {
	cfg           Config
	conf          *Configuration // the configuration in effect; replaced, never mutated
	pending       *Configuration // a leader's proposed change, until a majority of conf stored it
	member        bool           // this node is a voter in conf: only voters campaign and vote
	learner       bool           // this node is a learner in conf: it follows, and never votes
	synced        bool           // the role holds the group's state (Config.Syncs); acks say so
	notice        string         // why a peer refused this node (stale configuration), for Ready
	noticeRemoved bool           // that peer's configuration leaves this node out
	peers         []string       // conf's voters' ids, sorted (includes self if a member): iteration order must be deterministic
	learners      []string       // conf's learners' ids, sorted
	quorum        int
	storage       Storage
	rand          *rand.Rand

	state    State
	term     uint64
	votedFor string
	lead     string
	saved    HardState // last HardState known durable

	now              int // ticks since construction; the flap window's clock
	electionElapsed  int
	heartbeatElapsed int
	electionTimeout  int // randomized, in [ElectionTicks, 2*ElectionTicks)

	votes map[string]bool // responses in the current pre-vote or vote round
	acks  map[string]bool // followers heard from in the current check-quorum window
	lhm   int
	hbSeq uint64

	// Flap detection: ticks at which a new (leader, term) was observed.
	leaderChanges  []int
	lastLeader     string
	lastLeaderTerm uint64
	cooldownUntil  int

	// Who answered this term's heartbeats, and how they describe
	// themselves: a leader handing over picks from these.
	followers map[string]followerSeen
	ledSince  int  // tick this node became leader
	transfer  bool // the current candidacy was asked for by the old leader
	// yield: this node's own campaign failed since it last saw a leader, so
	// it stops refusing pre-votes to candidates it outranks (a better node
	// that cannot win must not keep the group leaderless).
	yield bool

	msgs     []Outbound
	confirms []Confirmation
	reported Status
}

// followerSeen is what a leader last heard from one follower.
type followerSeen struct {
	at       int // tick of the newest successful ack
	priority int
	lhm      int
	epoch    uint64 // configuration epoch it has stored
	synced   bool   // its role reports it holds the group's state
}

// Sentinel errors of a leadership transfer; callers branch on them.
var (
	ErrNotLeader        = errors.New("not the leader")
	ErrNoTransferTarget = errors.New("no follower has answered recently enough to take over")
)

// NewMachine loads the durable term and vote from st and returns a follower.
func NewMachine(cfg Config, st Storage) (*Machine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("leadership config: %w", err)
	}
	if st == nil {
		return nil, errors.New("leadership: nil Storage")
	}
	hs, err := st.Load()
	if err != nil {
		return nil, fmt.Errorf("load hard state for %s: %w", cfg.ID, err)
	}
	r := cfg.Rand
	if r == nil {
		h := fnv.New64a()
		h.Write([]byte(cfg.ID))
		r = rand.New(rand.NewPCG(h.Sum64(), 0x5851f42d4c957f2d))
	}
	conf := hs.Config
	if conf == nil {
		conf = &Configuration{}
		for _, p := range cfg.Peers {
			conf.Members = append(conf.Members, Member{ID: p, QUIC: cfg.Addrs[p]})
		}
		slices.SortFunc(conf.Members, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	}
	m := &Machine{
		cfg:      cfg,
		storage:  st,
		rand:     r,
		term:     hs.Term,
		votedFor: hs.VotedFor,
		saved:    hs,
	}
	m.synced = !cfg.Syncs
	m.setConf(conf)
	m.becomeFollower(hs.Term, "")
	m.reported = m.Status()
	return m, nil
}

// Status reports the machine's current view. Unlike the StateChange in
// Ready it may include a term or vote that is not yet durable.
func (m *Machine) Status() Status {
	s := Status{ID: m.cfg.ID, State: m.state, Term: m.term, Leader: m.lead}
	if m.state == Leader {
		s.FenceToken = m.term
	}
	return s
}

// Quorum is the number of votes that wins an election: a majority of the
// configured members.
func (m *Machine) Quorum() int { return m.quorum }

// CoolingDown reports whether flap detection currently forbids this node to
// start elections.
func (m *Machine) CoolingDown() bool { return m.now < m.cooldownUntil }

// Ready persists the term and vote if they changed, then hands out pending
// messages and any Status change. Call it after every Tick, Step and SetLHM;
// states passed through between two calls are not reported.
//
// If Save fails, Ready returns the error and discards the pending messages:
// they may depend on the unsaved vote, and elections tolerate loss. The next
// Ready retries the save. A step-down is still reported with the error: a
// leader that has seen a newer term must stop acting as leader whether or
// not its disk can record that term, or it keeps placing work under a token
// the cluster has moved past. And a node whose term is not durable never
// leads: its fencing token is that term.
func (m *Machine) Ready() (Ready, error) {
	hs := HardState{Term: m.term, VotedFor: m.votedFor, Config: m.saved.Config}
	if latest := m.latestConf(); latest.Epoch > 0 {
		hs.Config = latest
	}
	if hs != m.saved {
		if err := m.storage.Save(hs); err != nil {
			m.msgs = nil
			m.confirms = nil
			if m.state == Leader {
				m.becomeFollower(m.term, "")
			}
			var rd Ready
			if m.reported.State == Leader { // and, just above, no longer is
				st := m.Status()
				m.reported = st
				rd.StateChange = &st
			}
			return rd, fmt.Errorf("persist term %d vote %q: %w", hs.Term, hs.VotedFor, err)
		}
		m.saved = hs
	}
	var rd Ready
	rd.Messages, m.msgs = m.msgs, nil
	rd.Confirmations, m.confirms = m.confirms, nil
	rd.Notice, m.notice = m.notice, ""
	rd.Removed = m.noticeRemoved && (m.term > 0 || m.conf.Epoch > 0)
	m.noticeRemoved = false
	if st := m.Status(); st != m.reported {
		m.reported = st
		rd.StateChange = &st
	}
	return rd, nil
}

// SetLHM records this node's Lifeguard local health score. A node above
// MaxLeaderLHM is too degraded to lead: it stops campaigning, and a leader
// steps down so a healthier member can take over.
func (m *Machine) SetLHM(lhm int) {
	m.lhm = lhm
	if !m.healthy() && m.state != Follower {
		m.becomeFollower(m.term, "")
	}
}

// SetSynced records whether this node's role holds the group's state (see
// Config.Syncs); the leader reads it from the heartbeat acknowledgements.
func (m *Machine) SetSynced(synced bool) { m.synced = synced }

// Learner reports whether this node is a learner in the configuration in
// effect.
func (m *Machine) Learner() bool { return m.learner }

// Tick advances logical time by one tick.
func (m *Machine) Tick() {
	m.now++
	if m.state == Leader {
		m.tickLeader()
	} else {
		m.tickElection()
	}
}

func (m *Machine) tickElection() {
	m.electionElapsed++
	if m.lead != "" && m.electionElapsed >= m.cfg.ElectionTicks {
		// The leader's lease has lapsed: stop naming it, and (see inLease)
		// start granting pre-votes to others.
		m.lead = ""
	}
	if m.electionElapsed < m.electionTimeout {
		return
	}
	m.electionElapsed = 0
	m.resetElectionTimeout()
	if m.state != Follower {
		m.yield = true // a round that did not finish in time failed
	}
	if m.healthy() && !m.CoolingDown() && m.member {
		m.startPreVote()
	}
}

func (m *Machine) tickLeader() {
	m.electionElapsed++
	m.heartbeatElapsed++
	if m.electionElapsed >= m.cfg.ElectionTicks {
		m.electionElapsed = 0
		// Check-quorum: a leader that a majority has not answered within an
		// election timeout may already have been replaced on the other side
		// of a partition, so it must stop acting as leader.
		if len(m.acks)+1 < m.quorum {
			m.becomeFollower(m.term, "")
			return
		}
		clear(m.acks)
	}
	if m.heartbeatElapsed >= m.cfg.HeartbeatTicks {
		m.heartbeatElapsed = 0
		m.broadcastHeartbeat()
	}
	m.maybePromote()
	m.maybeRebalance()
}

// Step feeds one message received from peer from. Messages from non-members,
// for another election group, or whose sender field disagrees with the
// authenticated sender are ignored.
func (m *Machine) Step(from string, msg wire.Message) {
	if from == m.cfg.ID {
		return
	}
	if m.isLearner(from) {
		// A learner only ever answers heartbeats: it neither votes nor
		// campaigns, so nothing else it might send counts.
		if ack, ok := msg.(*wire.LeaderHeartbeatAck); ok && ack.Cluster == m.cfg.Cluster && ack.Follower == from {
			m.onHeartbeatAck(from, ack)
		}
		return
	}
	if !slices.Contains(m.peers, from) && !(m.pending != nil && m.pending.Has(from)) {
		m.stepStranger(from, msg)
		return
	}
	if m.learner {
		// Not a voter: votes are none of this node's business, and a
		// learner's vote must never help elect anyone.
		switch msg.(type) {
		case *wire.PreVoteRequest, *wire.VoteRequest, *wire.TimeoutNow:
			return
		}
	}
	switch msg := msg.(type) {
	case *wire.PreVoteRequest:
		if msg.Cluster == m.cfg.Cluster && msg.Candidate == from {
			m.onPreVoteRequest(from, msg)
		}
	case *wire.PreVoteResponse:
		if msg.Cluster == m.cfg.Cluster && msg.Voter == from {
			m.onPreVoteResponse(from, msg)
		}
	case *wire.VoteRequest:
		if msg.Cluster == m.cfg.Cluster && msg.Candidate == from {
			m.onVoteRequest(from, msg)
		}
	case *wire.VoteResponse:
		if msg.Cluster == m.cfg.Cluster && msg.Voter == from {
			m.onVoteResponse(from, msg)
		}
	case *wire.LeaderHeartbeat:
		if msg.Cluster == m.cfg.Cluster && msg.Leader == from {
			m.onHeartbeat(from, msg)
		}
	case *wire.LeaderHeartbeatAck:
		if msg.Cluster == m.cfg.Cluster && msg.Follower == from {
			m.onHeartbeatAck(from, msg)
		}
	case *wire.TimeoutNow:
		if msg.Cluster == m.cfg.Cluster && msg.Leader == from {
			m.onTimeoutNow(from, msg)
		}
	}
}

// isLearner reports whether from is a learner of the configuration in
// effect or of a pending change, and no voter of either.
func (m *Machine) isLearner(from string) bool {
	if slices.Contains(m.peers, from) || (m.pending != nil && m.pending.Has(from)) {
		return false
	}
	return slices.Contains(m.learners, from) || (m.pending != nil && m.pending.HasLearner(from))
}

// inLease reports whether this node has heard from a live leader within an
// election timeout. Such a node refuses to help anyone unseat that leader,
// which is what stops a flaky or rejoining node from disrupting a healthy
// cluster.
func (m *Machine) inLease() bool {
	return m.state == Leader || (m.lead != "" && m.electionElapsed < m.cfg.ElectionTicks)
}

func (m *Machine) healthy() bool { return m.lhm <= m.cfg.MaxLeaderLHM }

// onPreVoteRequest answers without changing term or vote: a pre-vote is a
// question ("could I win?"), not an election. The request's Term is the
// term the candidate would use, so Term > m.term means the candidate's
// current term is at least ours.
func (m *Machine) onPreVoteRequest(from string, req *wire.PreVoteRequest) {
	resp := &wire.PreVoteResponse{Cluster: m.cfg.Cluster, Term: m.term, Voter: m.cfg.ID, ConfigEpoch: m.conf.Epoch}
	switch {
	case req.ConfigEpoch < m.conf.Epoch:
		resp.Reason = m.staleReason(req.ConfigEpoch)
	case req.Term <= m.term:
		// Our term tells a stale candidate to catch up.
		resp.Reason = "stale term"
	case m.inLease():
		resp.Reason = "leader alive"
	case req.LHM > m.cfg.MaxLeaderLHM:
		resp.Reason = "candidate unhealthy"
	case m.outranks(req.LHM, req.Priority):
		// Stand instead: this node would make the better leader. The
		// candidate may still win on the others' grants; the refusal only
		// decides close races, and a settled leader that is outranked
		// hands over (maybeRebalance).
		resp.Reason = "better candidate"
		m.send(from, resp)
		if m.state == Follower {
			m.startPreVote()
		}
		return
	default:
		// A grant echoes the proposed term (as etcd-raft does) so the
		// candidate can tell it from a grant for an earlier round.
		resp.Granted = true
		resp.Term = req.Term
	}
	m.send(from, resp)
}

func (m *Machine) onPreVoteResponse(from string, resp *wire.PreVoteResponse) {
	m.noteRefusal(from, resp.Granted, resp.ConfigEpoch, resp.Reason, resp.NotMember)
	if resp.NotMember {
		// The group does not count this node: its term is none of this
		// node's business, and a term of its own (kept at zero) is how it
		// tells, later, that it never took part (Ready.Removed).
		return
	}
	if !resp.Granted && resp.Term > m.term {
		m.becomeFollower(resp.Term, "")
		return
	}
	if m.state != PreCandidate {
		return
	}
	if resp.Granted && resp.Term != m.term+1 {
		return
	}
	m.votes[from] = resp.Granted
	switch m.tally() {
	case won:
		m.becomeCandidate(false)
	case lost:
		m.yield = true
		m.becomeFollower(m.term, "")
	}
}

func (m *Machine) onVoteRequest(from string, req *wire.VoteRequest) {
	if req.ConfigEpoch < m.conf.Epoch {
		// Refused before the term is looked at: a candidate that missed a
		// committed change must not even bump this node's term.
		m.send(from, &wire.VoteResponse{Cluster: m.cfg.Cluster, Term: m.term, Voter: m.cfg.ID,
			Reason: m.staleReason(req.ConfigEpoch), ConfigEpoch: m.conf.Epoch})
		return
	}
	if req.Term > m.term {
		if m.inLease() && !req.Transfer {
			// With pre-vote a candidate only gets here if a majority saw no
			// leader; this node still does, so it neither bumps its term nor
			// answers (as etcd-raft does with check-quorum).
			return
		}
		m.becomeFollower(req.Term, "")
	}
	resp := &wire.VoteResponse{Cluster: m.cfg.Cluster, Term: m.term, Voter: m.cfg.ID, ConfigEpoch: m.conf.Epoch}
	switch {
	case req.Term < m.term:
		resp.Reason = "stale term"
	case m.votedFor != "" && m.votedFor != req.Candidate:
		resp.Reason = "already voted"
	case m.votedFor == "" && m.lead != "":
		resp.Reason = "leader known"
	case req.LHM > m.cfg.MaxLeaderLHM:
		resp.Reason = "candidate unhealthy"
	default:
		// One vote per term. Ready saves it before this response leaves.
		m.votedFor = req.Candidate
		m.electionElapsed = 0
		resp.Granted = true
	}
	m.send(from, resp)
}

func (m *Machine) onVoteResponse(from string, resp *wire.VoteResponse) {
	m.noteRefusal(from, resp.Granted, resp.ConfigEpoch, resp.Reason, resp.NotMember)
	if resp.NotMember {
		return // as in onPreVoteResponse
	}
	if resp.Term > m.term {
		m.becomeFollower(resp.Term, "")
		return
	}
	if resp.Term < m.term || m.state != Candidate {
		return
	}
	m.votes[from] = resp.Granted
	if resp.Granted {
		m.confirms = append(m.confirms, Confirmation{From: from})
	}
	switch m.tally() {
	case won:
		m.becomeLeader()
	case lost:
		m.yield = true
		m.becomeFollower(m.term, "")
	}
}

func (m *Machine) onHeartbeat(from string, hb *wire.LeaderHeartbeat) {
	if hb.Term < m.term {
		// A deposed leader cut off by a partition learns it is stale from
		// the first follower it reaches.
		m.send(from, &wire.LeaderHeartbeatAck{Cluster: m.cfg.Cluster, Term: m.term, Follower: m.cfg.ID, Seq: hb.Seq})
		return
	}
	if hb.Term == m.term && m.state == Leader {
		// Two leaders in one term would need two majorities; refuse to
		// acknowledge rather than guess which one is real.
		return
	}
	if hb.Term > m.term || m.state != Follower || m.lead != from {
		m.becomeFollower(hb.Term, from)
	}
	m.electionElapsed = 0
	if hb.Config != nil && hb.Config.Epoch > m.conf.Epoch {
		// Adopted on receipt, as Raft does with a configuration entry; Ready
		// stores it (with term and vote) before the ack below leaves.
		// The leader may be removing itself: it is in this node's
		// configuration (Step checked), which is what makes it trusted.
		if c, err := configFromWire(hb.Config); err == nil {
			m.setConf(c)
		}
	}
	m.send(from, &wire.LeaderHeartbeatAck{Cluster: m.cfg.Cluster, Term: m.term, Follower: m.cfg.ID, Success: true, Seq: hb.Seq,
		Priority: m.cfg.Priority, LHM: m.lhm, ConfigEpoch: m.conf.Epoch, Synced: m.synced})
}

func (m *Machine) onHeartbeatAck(from string, ack *wire.LeaderHeartbeatAck) {
	if ack.Term > m.term {
		m.becomeFollower(ack.Term, "")
		return
	}
	if m.state == Leader && ack.Term == m.term && ack.Success && ack.ConfigEpoch > m.latestConf().Epoch {
		// A follower stored a configuration this leader has never seen (its
		// predecessor's uncommitted change): a member that knows it must
		// lead, or this node could propose a second, conflicting change.
		m.becomeFollower(m.term, "")
		return
	}
	if m.state == Leader && ack.Term == m.term && ack.Success {
		m.followers[from] = followerSeen{at: m.now, priority: ack.Priority, lhm: ack.LHM, epoch: ack.ConfigEpoch, synced: ack.Synced}
		if m.isLearner(from) {
			return // neither check-quorum nor the lease counts a learner
		}
		m.acks[from] = true
		m.confirms = append(m.confirms, Confirmation{From: from, Seq: ack.Seq})
		m.maybeCommitConf()
	}
}

// onTimeoutNow starts, at once, the election the current leader asked this
// node to win. Only the leader this node follows in its own term may ask:
// anyone else could use it to unseat a healthy leader.
func (m *Machine) onTimeoutNow(from string, msg *wire.TimeoutNow) {
	if msg.Term != m.term || m.state != Follower || m.lead != from || !m.healthy() {
		return
	}
	m.becomeCandidate(true)
}

// TransferLeadership hands this node's leadership to peer to, or, when to
// is empty, to the follower it would pick (TransferTarget): it sends that
// peer a TimeoutNow and steps down at once, so the two never lead side by
// side and the roles stop leader work before the successor starts. The
// successor campaigns without pre-vote and voters grant it despite the
// lease, so the group is leaderless for about one round trip instead of an
// election timeout. If the target never campaigns (it crashed), the group
// elects someone the ordinary way. It returns the target.
func (m *Machine) TransferLeadership(to string) (string, error) {
	if m.state != Leader {
		return "", ErrNotLeader
	}
	if to == "" {
		var ok bool
		if to, ok = m.TransferTarget(); !ok {
			return "", ErrNoTransferTarget
		}
	} else if to == m.cfg.ID || !slices.Contains(m.peers, to) {
		return "", fmt.Errorf("transfer leadership to %q: not another member of %s", to, m.cfg.Cluster)
	}
	m.send(to, &wire.TimeoutNow{Cluster: m.cfg.Cluster, Term: m.term, Leader: m.cfg.ID})
	m.becomeFollower(m.term, "")
	return to, nil
}

// TransferTarget is the follower a handover would pick: among those that
// answered within the last election timeout and are healthy enough to
// lead, the highest priority, then the freshest answer, then the lowest id.
func (m *Machine) TransferTarget() (string, bool) {
	best, found := "", false
	var bf followerSeen
	for _, id := range m.peers { // sorted: ties go to the lowest id
		f, ok := m.followers[id]
		if !ok || m.now-f.at > m.cfg.ElectionTicks || f.lhm > m.cfg.MaxLeaderLHM {
			continue
		}
		if !found || f.priority > bf.priority || (f.priority == bf.priority && f.at > bf.at) {
			best, bf, found = id, f, true
		}
	}
	return best, found
}

// outranks reports whether this node would make a better leader than a
// candidate of health score lhm and priority prio: healthier, or as
// healthy and of higher priority. A node that cannot stand itself (unwell,
// cooling down, or whose own campaign just failed) outranks nobody.
func (m *Machine) outranks(lhm, prio int) bool {
	if !m.healthy() || m.CoolingDown() || m.yield {
		return false
	}
	return m.lhm < lhm || (m.lhm == lhm && m.cfg.Priority > prio)
}

// maybeRebalance hands a settled leader's term to a follower that
// outranks it on priority and is at least as healthy, so the group ends up
// led by the member operators prefer even when a lesser one won the race.
// Health alone never triggers it: scores move with load, and handing over
// on every blip would be churn.
func (m *Machine) maybeRebalance() {
	if m.now-m.ledSince < 2*m.cfg.ElectionTicks {
		return
	}
	to, ok := m.TransferTarget()
	if !ok {
		return
	}
	if f := m.followers[to]; f.priority > m.cfg.Priority && f.lhm <= m.lhm {
		m.TransferLeadership(to) //nolint:errcheck // we lead and to is a member
	}
}

type outcome uint8

const (
	pending outcome = iota
	won
	lost
)

// tally counts the current round against the configured membership: absent
// members count as neither grant nor rejection.
func (m *Machine) tally() outcome {
	var granted, rejected int
	for _, g := range m.votes {
		if g {
			granted++
		} else {
			rejected++
		}
	}
	switch {
	case granted >= m.quorum:
		return won
	case rejected > len(m.peers)-m.quorum:
		return lost
	}
	return pending
}

func (m *Machine) becomeFollower(term uint64, lead string) {
	if term > m.term {
		m.term = term
		m.votedFor = ""
	}
	if m.pending != nil {
		// Stored, maybe by some followers too: keep it, as every node that
		// received it does (its epoch outranks the old one in elections).
		m.setConf(m.pending)
		m.pending = nil
	}
	m.state = Follower
	m.lead = lead
	m.votes = nil
	m.acks = nil
	m.confirms = nil
	m.electionElapsed = 0
	m.heartbeatElapsed = 0
	m.resetElectionTimeout()
	m.transfer = false
	if lead != "" {
		m.yield = false
		m.observeLeader(lead, m.term)
	}
}

// startPreVote asks whether we could win term+1 without touching our term,
// so a node that cannot reach a majority (isolated, or in a minority) never
// inflates terms and disrupts the cluster when it comes back.
func (m *Machine) startPreVote() {
	m.state = PreCandidate
	m.lead = ""
	m.votes = map[string]bool{m.cfg.ID: true}
	if m.tally() == won {
		m.becomeCandidate(false)
		return
	}
	m.broadcast(func() wire.Message {
		return &wire.PreVoteRequest{Cluster: m.cfg.Cluster, Term: m.term + 1, Candidate: m.cfg.ID, LHM: m.lhm, Priority: m.cfg.Priority,
			ConfigEpoch: m.conf.Epoch}
	})
}

// becomeCandidate starts an election for term+1; transfer marks one the
// old leader asked for, which voters grant despite its lease.
func (m *Machine) becomeCandidate(transfer bool) {
	m.term++
	m.votedFor = m.cfg.ID
	m.state = Candidate
	m.lead = ""
	m.transfer = transfer
	m.electionElapsed = 0
	m.confirms = nil
	m.votes = map[string]bool{m.cfg.ID: true}
	if m.tally() == won {
		m.becomeLeader()
		return
	}
	m.broadcast(func() wire.Message {
		return &wire.VoteRequest{Cluster: m.cfg.Cluster, Term: m.term, Candidate: m.cfg.ID, LHM: m.lhm, Transfer: m.transfer,
			ConfigEpoch: m.conf.Epoch}
	})
}

func (m *Machine) becomeLeader() {
	m.state = Leader
	m.lead = m.cfg.ID
	m.votes = nil
	m.acks = make(map[string]bool, len(m.peers))
	m.followers = make(map[string]followerSeen, len(m.peers))
	m.ledSince = m.now
	m.transfer = false
	m.yield = false
	m.electionElapsed = 0
	m.heartbeatElapsed = 0
	m.observeLeader(m.cfg.ID, m.term)
	// Announce at once rather than after HeartbeatTicks, so followers and
	// other pre-candidates settle quickly.
	m.broadcastHeartbeat()
}

func (m *Machine) broadcastHeartbeat() {
	m.hbSeq++
	latest := m.latestConf()
	to := slices.Concat(m.peers, m.learners)
	if m.pending != nil {
		// A member being added hears the change too, and one being
		// removed, so it stores it.
		for _, p := range slices.Concat(m.pending.IDs(), m.pending.LearnerIDs()) {
			if !slices.Contains(to, p) {
				to = append(to, p)
			}
		}
	}
	for _, p := range to {
		if p == m.cfg.ID {
			continue
		}
		hb := &wire.LeaderHeartbeat{Cluster: m.cfg.Cluster, Term: m.term, Leader: m.cfg.ID, Seq: m.hbSeq, ConfigEpoch: latest.Epoch}
		if f, ok := m.followers[p]; latest.Epoch > 0 && (!ok || f.epoch < latest.Epoch) {
			hb.Config = latest.toWire()
		}
		m.send(p, hb)
	}
}

// observeLeader feeds flap detection with each new (leader, term) this node
// accepts. Too many in one window means the group is oscillating (a flaky
// link, a leader whose health keeps dipping); holding back our own elections
// for a while lets it settle instead of feeding the oscillation.
func (m *Machine) observeLeader(lead string, term uint64) {
	if lead == m.lastLeader && term == m.lastLeaderTerm {
		return
	}
	m.lastLeader, m.lastLeaderTerm = lead, term
	if m.cfg.FlapMaxChanges == 0 {
		return
	}
	cutoff := m.now - m.cfg.FlapWindowTicks
	m.leaderChanges = slices.DeleteFunc(m.leaderChanges, func(t int) bool { return t <= cutoff })
	m.leaderChanges = append(m.leaderChanges, m.now)
	if len(m.leaderChanges) > m.cfg.FlapMaxChanges {
		m.cooldownUntil = m.now + m.cfg.FlapCooldownTicks
		m.leaderChanges = m.leaderChanges[:0]
	}
}

func (m *Machine) resetElectionTimeout() {
	m.electionTimeout = m.cfg.ElectionTicks + m.rand.IntN(m.cfg.ElectionTicks)
}

func (m *Machine) broadcast(mk func() wire.Message) {
	for _, p := range m.peers {
		if p != m.cfg.ID {
			m.send(p, mk())
		}
	}
}

func (m *Machine) send(to string, msg wire.Message) {
	m.msgs = append(m.msgs, Outbound{To: to, Msg: msg})
}
