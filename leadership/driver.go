package leadership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"tempest/transport"
	"tempest/wire"
)

// Goroutines of a running Elector, all started by Run and all finished
// before Run returns:
//
//   - the election loop (Run's own goroutine) owns the Machine: ticks,
//     inbound messages and LHM updates reach it through channels, so the
//     Machine needs no lock;
//   - one sender per peer, so a slow or unreachable peer delays only its own
//     messages, never the loop or other peers;
//   - one callback goroutine, so user callbacks never stall elections.
//
// Locks: Elector.mu guards the lifecycle fields and the published status;
// eventQueue.mu guards the callback queue. Neither is ever held while taking
// the other or while calling out (transport, storage, callbacks).

// Clock makes ticks. The default uses time.Ticker; tests may inject a manual
// one to drive the Elector tick by tick.
type Clock interface {
	// NewTicker returns a channel that delivers a tick every d, and a
	// function that stops it.
	NewTicker(d time.Duration) (<-chan time.Time, func())
}

type realClock struct{}

func (realClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// ElectorConfig configures an Elector.
type ElectorConfig struct {
	// Cluster names the election group, e.g. "managers/dc-east" or "gates".
	Cluster string
	// Transport carries election messages; this node's id is its LocalID.
	// The Elector registers handlers for the six election message types.
	Transport transport.Transport
	// Peers maps every configured member's id (including this node's) to its
	// transport address. Its size fixes the quorum.
	Peers map[string]string
	// Profile sets the timings; the zero Profile means LANProfile().
	Profile Profile
	// Storage keeps term and vote durably; use a BoltStorage in production.
	Storage Storage
	// Logger receives election events; nil means slog.Default().
	Logger *slog.Logger
	// Clock makes ticks; nil means real time.
	Clock Clock
	// Now reads the wall clock for the leader lease (QuorumAge); nil means
	// time.Now. Only differences between its readings are used.
	Now func() time.Time
	// Rand randomizes election timeouts; nil means a randomly seeded one.
	Rand *rand.Rand
	// Priority ranks this node among equally healthy candidates (higher is
	// preferred); see Config.Priority.
	Priority int
	// Syncs: this node's role must sync before it may vote (Config.Syncs);
	// it calls SetSynced(true) once it has.
	Syncs bool

	// Callbacks, all optional. See Elector for the ordering guarantees.
	OnBecomeLeader   func(term uint64)
	OnLoseLeadership func(term uint64)
	// OnLeaderChange reports a new leader (possibly this node), or "" when
	// the node no longer knows of a live leader.
	OnLeaderChange func(leader string, term uint64)
	// OnMembersChange reports a new configuration in effect on this node
	// (a membership change it stored, or, on the leader, committed).
	OnMembersChange func(c *Configuration)
	// OnRemoved reports that the group refused this node as no longer a
	// member (Ready.Removed): it was removed while it was away and came
	// back with its old configuration. reason is the refusal's.
	OnRemoved func(reason string)
}

// Validate reports every problem with c at once.
func (c ElectorConfig) Validate() error {
	var errs []error
	if c.Cluster == "" {
		errs = append(errs, errors.New("Cluster: must not be empty"))
	}
	if c.Transport == nil {
		errs = append(errs, errors.New("Transport: must not be nil"))
	} else if _, ok := c.Peers[c.Transport.LocalID()]; !ok {
		errs = append(errs, fmt.Errorf("Peers: must include this node %q", c.Transport.LocalID()))
	}
	for id, addr := range c.Peers {
		if id == "" || addr == "" {
			errs = append(errs, fmt.Errorf("Peers: empty id or address in %q=%q", id, addr))
		}
	}
	if c.Storage == nil {
		errs = append(errs, errors.New("Storage: must not be nil"))
	}
	if c.Profile != (Profile{}) && c.Profile.TickInterval <= 0 {
		errs = append(errs, fmt.Errorf("Profile.TickInterval: must be positive, got %s", c.Profile.TickInterval))
	}
	return errors.Join(errs...)
}

// Sentinel errors of the Elector's lifecycle.
var (
	ErrAlreadyRunning = errors.New("elector already running")
	ErrStopped        = errors.New("elector stopped")
)

// inboxSize bounds messages waiting for the loop. A full inbox drops: the
// sender repeats heartbeats and campaigns on its own schedule, and blocking
// would hold transport goroutines hostage to a busy loop.
const (
	inboxSize  = 256
	outboxSize = 64
)

type inbound struct {
	from, addr string
	msg        wire.Message
}

type eventKind uint8

const (
	evLoseLeadership eventKind = iota
	evLeaderChange
	evBecomeLeader
	evMembersChange
	evRemoved
)

type event struct {
	kind   eventKind
	term   uint64
	leader string
	conf   *Configuration
	reason string
}

// Elector runs a Machine on a clock over a Transport.
//
// Callback guarantees: callbacks run one at a time on a goroutine of the
// Elector's own, never on the election loop, in the order the transitions
// happened. For one transition the order is OnLoseLeadership, then
// OnLeaderChange, then OnBecomeLeader. Every OnBecomeLeader(t) is followed by
// exactly one OnLoseLeadership(t), at the latest while Run shuts down, and no
// callback runs after Run returns. Callbacks lag the election: by the time
// one runs, Status may already be newer, so act on the term passed in and
// check FenceToken before issuing commands. A callback may call any Elector
// method except Stop (which waits for callbacks to finish).
type Elector struct {
	cfg     ElectorConfig
	id      string
	profile Profile
	log     *slog.Logger
	clock   Clock
	m       *Machine // owned by the loop once Run starts
	quorum  int

	inbox    chan inbound
	lhm      chan int  // capacity 1, newest value wins
	synced   chan bool // capacity 1, newest value wins
	handoffs chan chan handoffResult
	changes  chan changeReq

	mu      sync.Mutex
	status  Status
	conf    *Configuration // the configuration in effect, as the loop last saw it
	changed chan struct{}  // closed and replaced on every published change
	running bool
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{}

	// lease: when each peer last confirmed this node's current term (see
	// QuorumAge); guarded by mu, written by the loop.
	lease lease

	// Owned by the loop.
	runCtx      context.Context
	runWG       *sync.WaitGroup
	addrs       map[string]string // every address learnt: configured, in configurations, of strangers that wrote
	notice      string            // the last Ready.Notice logged
	senders     map[string]chan wire.Message
	saveFailing bool
	events      *eventQueue
	// hbSent: when each recent heartbeat (by Seq) was handed to the
	// senders; voteSent: when this term's vote requests were.
	hbSent   map[uint64]time.Time
	voteSent struct {
		term uint64
		at   time.Time
	}
}

// lease is the wall-clock side of leadership. Check-quorum in the Machine
// counts ticks, and a loaded machine's ticks lag or are dropped, so a
// leader cut off from its peers can go on believing it leads for far longer
// in real time than ElectionTicks suggests. The lease instead remembers,
// per peer, the send time of the newest message in which that peer
// confirmed the current term: the peer answered after that moment, so a
// majority stood behind this node at least until the quorum-th newest of
// those times, and no successor can have been elected before it.
type lease struct {
	term uint64
	at   map[string]time.Time
}

// hbSentKeep bounds hbSent: an answer to an older heartbeat would prove
// less than a newer one already has, so it is not worth remembering.
const hbSentKeep = 64

// New builds an Elector, loads its durable state and registers its message
// handlers on the transport. Messages arriving before Run are buffered up to
// a bound and then dropped.
func New(cfg ElectorConfig) (*Elector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("leadership elector config: %w", err)
	}
	p := cfg.Profile
	if p == (Profile{}) {
		p = LANProfile()
	}
	id := cfg.Transport.LocalID()
	r := cfg.Rand
	if r == nil {
		r = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	m, err := NewMachine(Config{
		ID:                id,
		Cluster:           cfg.Cluster,
		Peers:             slices.Sorted(maps.Keys(cfg.Peers)),
		Addrs:             cfg.Peers,
		ElectionTicks:     p.ElectionTicks,
		HeartbeatTicks:    p.HeartbeatTicks,
		Rand:              r,
		MaxLeaderLHM:      p.MaxLeaderLHM,
		FlapMaxChanges:    p.FlapMaxChanges,
		FlapWindowTicks:   p.FlapWindowTicks,
		FlapCooldownTicks: p.FlapCooldownTicks,
		Priority:          cfg.Priority,
		Syncs:             cfg.Syncs,
	}, cfg.Storage)
	if err != nil {
		return nil, fmt.Errorf("leadership elector %s/%s: %w", cfg.Cluster, id, err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	clock := cfg.Clock
	if clock == nil {
		clock = realClock{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	e := &Elector{
		cfg:      cfg,
		id:       id,
		profile:  p,
		log:      logger.With("component", "leadership", "cluster", cfg.Cluster, "node", id),
		clock:    clock,
		m:        m,
		quorum:   m.Quorum(),
		inbox:    make(chan inbound, inboxSize),
		lhm:      make(chan int, 1),
		synced:   make(chan bool, 1),
		handoffs: make(chan chan handoffResult),
		changes:  make(chan changeReq),
		changed:  make(chan struct{}),
		conf:     m.Members(),
		addrs:    maps.Clone(cfg.Peers),
		status:   m.Status(),
		done:     make(chan struct{}),
		hbSent:   make(map[uint64]time.Time),
	}
	for _, t := range []wire.MsgType{
		wire.TypePreVoteRequest, wire.TypePreVoteResponse,
		wire.TypeVoteRequest, wire.TypeVoteResponse,
		wire.TypeLeaderHeartbeat, wire.TypeLeaderHeartbeatAck, wire.TypeTimeoutNow,
	} {
		cfg.Transport.Handle(t, e.handle)
	}
	return e, nil
}

// handle runs on transport goroutines; it only hands the message to the
// loop. Election messages are one-way: answers travel as their own Sends.
func (e *Elector) handle(_ context.Context, from transport.Peer, msg wire.Message) (wire.Message, error) {
	select {
	case e.inbox <- inbound{from: from.NodeID, addr: from.Addr, msg: msg}:
	default:
		e.log.Debug("election inbox full, dropping message", "from", from.NodeID, "type", msg.Type())
	}
	return nil, nil
}

// Run elects until ctx ends or Stop is called, then returns nil. It can run
// once per Elector.
func (e *Elector) Run(ctx context.Context) error {
	e.mu.Lock()
	switch {
	case e.stopped:
		e.mu.Unlock()
		return ErrStopped
	case e.running:
		e.mu.Unlock()
		return ErrAlreadyRunning
	}
	e.running = true
	ctx, cancel := context.WithCancel(ctx)
	e.cancel = cancel
	e.mu.Unlock()
	defer close(e.done)
	defer cancel()

	var wg sync.WaitGroup
	e.events = newEventQueue()
	wg.Go(func() { e.deliverCallbacks() })
	e.senders = make(map[string]chan wire.Message, len(e.cfg.Peers))
	e.runCtx, e.runWG = ctx, &wg
	for _, mem := range slices.Concat(e.m.Members().Members, e.m.Members().Learners) {
		e.addrs[mem.ID] = mem.QUIC
	}

	st := e.Status()
	e.log.Info("election started", "term", st.Term, "profile", e.profile.Name,
		"members", e.m.Members().String(), "quorum", e.m.Quorum())
	e.loop(ctx)

	// Shutting down is losing leadership as far as callers are concerned:
	// they must stop acting as leader before Run returns.
	e.mu.Lock()
	last := e.status
	e.status = Status{ID: e.id, State: Follower, Term: last.Term}
	e.mu.Unlock()
	if last.State == Leader {
		e.log.Info("leadership given up on shutdown", "term", last.Term)
		e.events.push(event{kind: evLoseLeadership, term: last.Term})
	}
	e.events.close()
	wg.Wait()
	e.log.Info("election stopped", "term", last.Term)
	return nil
}

// Stop ends Run and waits for it to return. It is safe to call more than
// once, and before or without Run.
func (e *Elector) Stop() {
	e.mu.Lock()
	e.stopped = true
	cancel, running := e.cancel, e.running
	e.mu.Unlock()
	if running {
		cancel()
		<-e.done
	}
}

func (e *Elector) loop(ctx context.Context) {
	ticks, stop := e.clock.NewTicker(e.profile.TickInterval)
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
			e.m.Tick()
		case in := <-e.inbox:
			if _, ok := e.addrs[in.from]; !ok && in.addr != "" {
				e.addrs[in.from] = in.addr // a stranger: answered where it wrote from
			}
			e.m.Step(in.from, in.msg)
		case v := <-e.lhm:
			e.m.SetLHM(v)
		case v := <-e.synced:
			e.m.SetSynced(v)
		case reply := <-e.handoffs:
			to, err := e.m.TransferLeadership("")
			reply <- handoffResult{to: to, term: e.m.Status().Term, err: err}
		case req := <-e.changes:
			var next *Configuration
			voters, learners, err := req.build(e.m.Members())
			if err == nil {
				next, err = e.m.ProposeConfig(voters, learners)
			}
			req.reply <- changeResult{next: next, term: e.m.Status().Term, err: err}
		}
		e.process()
	}
}

// process takes the Machine's output: Ready has already made the term and
// vote durable, so every message it returns may be sent.
func (e *Elector) process() {
	rd, err := e.m.Ready()
	if err != nil {
		// Logged on the edge only: this repeats every tick while the disk is bad.
		if !e.saveFailing {
			e.log.Error("cannot persist election state; not voting or campaigning until it can",
				"term", e.m.Status().Term, "err", err)
		}
		e.saveFailing = true
		// A step-down is published even so: the roles must stop leading
		// now, not once the disk recovers.
		if rd.StateChange != nil {
			e.publish(*rd.StateChange)
		}
		return
	}
	if e.saveFailing {
		e.log.Info("election state persisted again", "term", e.m.Status().Term)
		e.saveFailing = false
	}
	now := e.cfg.Now()
	for _, o := range rd.Messages {
		// Stamped before the send: a peer's answer then proves it still
		// followed this node at some moment after the stamp.
		switch msg := o.Msg.(type) {
		case *wire.LeaderHeartbeat:
			if _, ok := e.hbSent[msg.Seq]; !ok {
				e.hbSent[msg.Seq] = now
				if len(e.hbSent) > hbSentKeep {
					for seq := range e.hbSent {
						if seq+hbSentKeep <= msg.Seq {
							delete(e.hbSent, seq)
						}
					}
				}
			}
		case *wire.VoteRequest:
			e.voteSent.term, e.voteSent.at = msg.Term, now
		}
		ch := e.sender(o.To)
		if ch == nil {
			e.log.Debug("no address for election peer, dropping message", "to", o.To, "type", o.Msg.Type())
			continue
		}
		select {
		case ch <- o.Msg:
		default:
			e.log.Debug("outbox full, dropping message", "to", o.To, "type", o.Msg.Type())
		}
	}
	if rd.Notice != "" && rd.Notice != e.notice {
		e.notice = rd.Notice
		e.log.Warn("refused by the election group; this node's membership is stale", "why", rd.Notice)
		if rd.Removed {
			e.events.push(event{kind: evRemoved, reason: rd.Notice})
		}
	}
	if conf := e.m.Members(); conf != e.published() {
		for _, mem := range slices.Concat(conf.Members, conf.Learners) {
			e.addrs[mem.ID] = mem.QUIC
		}
		e.mu.Lock()
		e.conf, e.quorum = conf, conf.Quorum()
		close(e.changed)
		e.changed = make(chan struct{})
		e.mu.Unlock()
		e.log.Info("group configuration in effect", "members", conf.String(), "quorum", conf.Quorum(),
			"member", conf.Has(e.id), "learner", conf.HasLearner(e.id))
		e.events.push(event{kind: evMembersChange, conf: conf})
	}
	e.confirm(rd.Confirmations)
	if rd.StateChange != nil {
		e.publish(*rd.StateChange)
	}
}

// confirm records, for the lease, when each confirming peer was last asked.
func (e *Elector) confirm(cs []Confirmation) {
	if len(cs) == 0 {
		return
	}
	term := e.m.Status().Term
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lease.term != term || e.lease.at == nil {
		e.lease = lease{term: term, at: make(map[string]time.Time, len(e.cfg.Peers))}
	}
	for _, c := range cs {
		var asked time.Time
		var ok bool
		if c.Seq == 0 {
			asked, ok = e.voteSent.at, e.voteSent.term == term
		} else {
			asked, ok = e.hbSent[c.Seq]
		}
		if ok && asked.After(e.lease.at[c.From]) {
			e.lease.at[c.From] = asked
		}
	}
}

// publish makes st visible to Status and queues the callbacks it implies.
func (e *Elector) publish(st Status) {
	e.mu.Lock()
	prev := e.status
	e.status = st
	close(e.changed)
	e.changed = make(chan struct{})
	e.mu.Unlock()

	if prev.State != st.State || prev.Term != st.Term {
		e.log.Info("election state changed", "state", st.State, "term", st.Term,
			"from_state", prev.State, "from_term", prev.Term)
	}
	wasLeader := prev.State == Leader
	isLeader := st.State == Leader
	if wasLeader && (!isLeader || prev.Term != st.Term) {
		e.log.Info("lost leadership", "term", prev.Term, "fence_token", prev.FenceToken)
		e.events.push(event{kind: evLoseLeadership, term: prev.Term})
	}
	if st.Leader != prev.Leader || (st.Leader != "" && st.Term != prev.Term) {
		e.log.Info("leader changed", "leader", st.Leader, "term", st.Term)
		e.events.push(event{kind: evLeaderChange, leader: st.Leader, term: st.Term})
	}
	if isLeader && (!wasLeader || prev.Term != st.Term) {
		e.log.Info("became leader", "term", st.Term, "fence_token", st.FenceToken)
		e.events.push(event{kind: evBecomeLeader, term: st.Term})
	}
}

func (e *Elector) published() *Configuration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.conf
}

// sender is the queue to peer id, its goroutine started on first use (a
// member added at runtime, a stranger answered); nil if no address is
// known.
func (e *Elector) sender(id string) chan wire.Message {
	if ch, ok := e.senders[id]; ok {
		return ch
	}
	addr := e.addrs[id]
	if addr == "" || e.runWG == nil {
		return nil
	}
	ch := make(chan wire.Message, outboxSize)
	e.senders[id] = ch
	ctx := e.runCtx
	e.runWG.Go(func() { e.sendLoop(ctx, id, addr, ch) })
	return ch
}

func (e *Elector) sendLoop(ctx context.Context, id, addr string, ch <-chan wire.Message) {
	// A message older than a heartbeat interval has been superseded; giving
	// up then keeps an unreachable peer from backing up its queue.
	timeout := e.profile.HeartbeatInterval()
	for {
		select {
		case <-ctx.Done():
			return
		case msg := <-ch:
			sctx, cancel := context.WithTimeout(ctx, timeout)
			err := e.cfg.Transport.Send(sctx, addr, msg)
			cancel()
			if err != nil && ctx.Err() == nil {
				e.log.Debug("election send failed", "to", id, "type", msg.Type(), "err", err)
			}
		}
	}
}

func (e *Elector) deliverCallbacks() {
	for {
		ev, ok := e.events.pop()
		if !ok {
			return
		}
		switch ev.kind {
		case evLoseLeadership:
			if f := e.cfg.OnLoseLeadership; f != nil {
				f(ev.term)
			}
		case evLeaderChange:
			if f := e.cfg.OnLeaderChange; f != nil {
				f(ev.leader, ev.term)
			}
		case evBecomeLeader:
			if f := e.cfg.OnBecomeLeader; f != nil {
				f(ev.term)
			}
		case evMembersChange:
			if f := e.cfg.OnMembersChange; f != nil {
				f(ev.conf)
			}
		case evRemoved:
			if f := e.cfg.OnRemoved; f != nil {
				f(ev.reason)
			}
		}
	}
}

// Status is the latest durable view of this node's election state.
func (e *Elector) Status() Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.status
}

// QuorumAge reports, while this node leads, how long ago a majority of the
// group (this node counting as one) last confirmed its leadership, on this
// node's wall clock; ok is false when it does not lead. A successor can only
// be elected after that moment, however late this node's ticks (and so its
// check-quorum step-down) run, so the age bounds in real time how stale this
// leader's authority may be. Until a majority has confirmed the current
// term the age is the largest Duration.
func (e *Elector) QuorumAge() (age time.Duration, ok bool) {
	now := e.cfg.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.status.State != Leader {
		return 0, false
	}
	times := []time.Time{now} // this node agrees with itself now
	if e.lease.term == e.status.Term {
		for id, at := range e.lease.at {
			if id != e.id {
				times = append(times, at)
			}
		}
	}
	q := e.quorum
	if len(times) < q {
		return math.MaxInt64, true
	}
	// The quorum-th newest confirmation is the latest moment a majority
	// stood behind this node.
	slices.SortFunc(times, func(a, b time.Time) int { return b.Compare(a) })
	return max(now.Sub(times[q-1]), 0), true
}

type handoffResult struct {
	to   string
	term uint64
	err  error
}

// Handoff is a planned leader stop: it hands this node's leadership to the
// best follower (Machine.TransferLeadership: a TimeoutNow, then this node
// steps down) and waits until this node follows a successor of a newer
// term, or ctx ends. It returns the successor. A role calls it before
// stopping its elector, so the group is leaderless for about a round trip
// rather than an election timeout; on an error the caller just stops, and
// the group elects a leader the ordinary way.
func (e *Elector) Handoff(ctx context.Context) (string, error) {
	reply := make(chan handoffResult, 1)
	e.mu.Lock()
	done := e.done
	running := e.running && !e.stopped
	e.mu.Unlock()
	if !running {
		return "", ErrStopped
	}
	select {
	case e.handoffs <- reply:
	case <-done:
		return "", ErrStopped
	case <-ctx.Done():
		return "", fmt.Errorf("hand over leadership: %w", ctx.Err())
	}
	r := <-reply // the loop answers at once
	if r.err != nil {
		return "", fmt.Errorf("hand over leadership of term %d: %w", r.term, r.err)
	}
	e.log.Info("handing over leadership", "term", r.term, "to", r.to)
	for {
		e.mu.Lock()
		st, changed := e.status, e.changed
		e.mu.Unlock()
		if st.Leader != "" && st.Leader != e.id && st.Term > r.term {
			return st.Leader, nil
		}
		select {
		case <-changed:
		case <-done:
			return "", ErrStopped
		case <-ctx.Done():
			return "", fmt.Errorf("hand over leadership of term %d to %s: no successor seen: %w", r.term, r.to, ctx.Err())
		}
	}
}

// IsLeader reports whether this node currently leads its group.
func (e *Elector) IsLeader() bool { return e.Status().State == Leader }

// Leader returns the id and address of the leader this node follows, or
// empty strings when it knows of none.
func (e *Elector) Leader() (id, addr string) {
	st := e.Status()
	if st.Leader == "" {
		return "", ""
	}
	return st.Leader, e.Members().Addr(st.Leader)
}

// Members is the group configuration in effect on this node.
func (e *Elector) Members() *Configuration { return e.published() }

// changeReq asks the loop for a change; build works out the voters and
// learners from the configuration in effect there, so a change is judged
// against what the Machine has, not what a caller last read.
type changeReq struct {
	build func(cur *Configuration) (voters, learners []Member, err error)
	reply chan changeResult
}

type changeResult struct {
	next *Configuration
	term uint64
	err  error
}

// ChangeMembers changes the group to members (one added or removed; see
// Machine.ProposeMembers) and waits until the change is in effect on this
// leader — stored on a majority of the old configuration — or ctx ends.
// If leadership changes first, it returns ErrChangeUnstable: the change may
// or may not survive (a member that stored it keeps it), so the caller
// looks at the new leader's Members before trying again.
func (e *Elector) ChangeMembers(ctx context.Context, members []Member) (*Configuration, error) {
	return e.change(ctx, func(cur *Configuration) ([]Member, []Member, error) {
		learners := slices.DeleteFunc(slices.Clone(cur.Learners), func(l Member) bool {
			return slices.ContainsFunc(members, func(v Member) bool { return v.ID == l.ID })
		})
		return members, learners, nil
	})
}

// AddLearner adds mem to the group as a learner (see Configuration): it
// follows the leader at once, and the leader promotes it to a voter once it
// reports synced. Like ChangeMembers it returns once the addition is in
// effect on this leader; the promotion comes later, as a change of its own.
func (e *Elector) AddLearner(ctx context.Context, mem Member) (*Configuration, error) {
	return e.change(ctx, func(cur *Configuration) ([]Member, []Member, error) {
		if cur.Has(mem.ID) || cur.HasLearner(mem.ID) {
			return nil, nil, fmt.Errorf("%w: %s is in %s", ErrAlreadyMember, mem.ID, cur)
		}
		return cur.Members, append(slices.Clone(cur.Learners), mem), nil
	})
}

// RemoveMember removes a voter or a learner from the group. Removing the
// leader itself hands leadership over as the change commits.
func (e *Elector) RemoveMember(ctx context.Context, id string) (*Configuration, error) {
	return e.change(ctx, func(cur *Configuration) ([]Member, []Member, error) {
		if !cur.Has(id) && !cur.HasLearner(id) {
			return nil, nil, fmt.Errorf("%w: %s is not in %s", ErrNoSuchMember, id, cur)
		}
		drop := func(ms []Member) []Member {
			return slices.DeleteFunc(slices.Clone(ms), func(m Member) bool { return m.ID == id })
		}
		return drop(cur.Members), drop(cur.Learners), nil
	})
}

func (e *Elector) change(ctx context.Context, build func(cur *Configuration) ([]Member, []Member, error)) (*Configuration, error) {
	e.mu.Lock()
	done, running := e.done, e.running && !e.stopped
	e.mu.Unlock()
	if !running {
		return nil, ErrStopped
	}
	req := changeReq{build: build, reply: make(chan changeResult, 1)}
	select {
	case e.changes <- req:
	case <-done:
		return nil, ErrStopped
	case <-ctx.Done():
		return nil, fmt.Errorf("change members: %w", ctx.Err())
	}
	r := <-req.reply
	if r.err != nil {
		return nil, fmt.Errorf("change members in term %d: %w", r.term, r.err)
	}
	e.log.Info("membership change proposed", "to", r.next.String(), "term", r.term)
	for {
		e.mu.Lock()
		st, conf, changed := e.status, e.conf, e.changed
		e.mu.Unlock()
		if conf.Epoch >= r.next.Epoch {
			return conf, nil
		}
		if st.State != Leader || st.Term != r.term {
			return nil, fmt.Errorf("change to %s: %w", r.next, ErrChangeUnstable)
		}
		select {
		case <-changed:
		case <-done:
			return nil, ErrStopped
		case <-ctx.Done():
			return nil, fmt.Errorf("change to %s not committed: %w", r.next, ctx.Err())
		}
	}
}

// FenceToken is the token to stamp on commands while this node leads, zero
// when it does not. Receivers reject tokens older than the newest they saw.
func (e *Elector) FenceToken() uint64 { return e.Status().FenceToken }

// NotLeaderError is the typed error a non-leader returns to redirect a
// caller: CodeNotLeader with the current leader's id and address, if known.
func (e *Elector) NotLeaderError() *wire.Error {
	id, addr := e.Leader()
	return &wire.Error{Code: wire.CodeNotLeader, Message: "not the " + e.cfg.Cluster + " leader", Leader: id, LeaderAddr: addr}
}

// SetSynced tells the election whether this node's role holds the group's
// state (ElectorConfig.Syncs). It never blocks; the newest value wins.
func (e *Elector) SetSynced(synced bool) {
	for {
		select {
		case e.synced <- synced:
			return
		default:
		}
		select {
		case <-e.synced:
		default:
		}
	}
}

// SetLHM passes this node's Lifeguard local health score to the election.
// It never blocks; if updates outpace the loop, only the newest is applied.
func (e *Elector) SetLHM(lhm int) {
	for {
		select {
		case e.lhm <- lhm:
			return
		default:
		}
		select {
		case <-e.lhm:
		default:
		}
	}
}

// eventQueue is an unbounded FIFO between the loop and the callback
// goroutine: the loop must never block on a slow callback, and dropping a
// leadership event would break the pairing promised to callers.
type eventQueue struct {
	mu     sync.Mutex
	q      []event
	closed bool
	wake   chan struct{}
}

func newEventQueue() *eventQueue { return &eventQueue{wake: make(chan struct{}, 1)} }

func (q *eventQueue) push(ev event) {
	q.mu.Lock()
	q.q = append(q.q, ev)
	q.mu.Unlock()
	q.signal()
}

// close lets pop drain what is queued and then report false.
func (q *eventQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

func (q *eventQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *eventQueue) pop() (event, bool) {
	for {
		q.mu.Lock()
		if len(q.q) > 0 {
			ev := q.q[0]
			q.q = q.q[1:]
			q.mu.Unlock()
			return ev, true
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return event{}, false
		}
		<-q.wake
	}
}
