package swim

// Lock order. memberlist calls the delegate below while holding its own
// node lock, so memberlist's lock comes first and nothing here may call into
// memberlist while holding membersMu or gateMu:
//
//	lifeMu → metaMu → (memberlist) → membersMu
//	(memberlist) → gateMu (read) → role code (StateEmbedder)
//
// lifeMu serializes the calls that change what this node publishes or
// accepts (UpdateMeta, SetKeys, Leave) against each other and Shutdown.
//
// Shutdown takes gateMu and waits for the event goroutine only after
// releasing lifeMu, so role code blocked on lifeMu cannot deadlock it.
//
// metaMu is held across memberlist.UpdateNode on purpose: it orders meta
// broadcasts so a stale UpdateMeta cannot overwrite a newer one.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

var (
	// ErrShutdown is returned by calls made after Shutdown.
	ErrShutdown = errors.New("swim node shut down")
	// ErrNoEncryption is returned by SetKeys on a node started without
	// keys: memberlist cannot turn encryption on in a running cluster.
	ErrNoEncryption = errors.New("gossip encryption not enabled")
)

// Node is this process's membership in one SWIM cluster. A manager, which
// belongs to its datacenter's cluster and to the cross-datacenter one, runs
// two Nodes on two ports.
type Node struct {
	name string
	addr string
	// log queues its records (logq) so that no caller, memberlist's
	// goroutines above all, ever waits on the log sink; direct writes
	// synchronously and is used once the queue has stopped.
	log    *slog.Logger
	direct *slog.Logger
	logq   *logQueue

	embedder         StateEmbedder
	broadcastTimeout time.Duration

	ml *memberlist.Memberlist
	// rejoinEvery is how often KeepJoined contacts the seeds that are not
	// live members: the profile's push/pull interval, memberlist's own
	// cadence for repairing a member's view.
	rejoinEvery time.Duration
	// keyring is shared with memberlist, which reads it for every packet;
	// nil when gossip is unencrypted.
	keyring *memberlist.Keyring

	lifeMu sync.Mutex
	down   atomic.Bool // Shutdown has begun

	metaMu    sync.Mutex
	localMeta NodeMeta
	leaving   bool
	// metaBytes is what memberlist publishes; NodeMeta reads it on
	// memberlist's goroutines without taking metaMu.
	metaBytes atomic.Pointer[[]byte]

	// members mirrors memberlist's live members, maintained from the event
	// delegate where memberlist's node lock makes reading its Node safe.
	// memberlist.Members hands out pointers into its table that it keeps
	// writing after returning them, which is a data race for readers.
	membersMu sync.RWMutex
	members   map[string]NodeInfo

	// gateMu and closed keep role code from being called after Shutdown
	// returns: memberlist's probe loop and suspicion timers can still fire
	// briefly after memberlist.Shutdown.
	gateMu sync.RWMutex
	closed bool

	events  *eventQueue
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	stopped chan struct{} // closed when Shutdown has finished

	oversizeLogged atomic.Bool
}

// New validates cfg, starts memberlist listening on cfg's address and
// returns a Node that is a cluster of one until Join.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	metaBytes, err := EncodeNodeMeta(cfg.Meta)
	if err != nil {
		return nil, fmt.Errorf("swim new %s: %w", cfg.NodeName, err)
	}
	base := cfg.Logger
	if base == nil {
		base = slog.New(slog.DiscardHandler)
	}
	// Everything this node logs goes through logq (see logQueue): much of
	// it is logged under memberlist's member lock. direct is for the
	// drop notices and for what is logged after the queue has stopped.
	direct := base.With("component", "swim", "node", cfg.NodeName)
	logq := newLogQueue(logQueueSize)
	logq.report = direct.Handler()
	logger := slog.New(logq.wrap(base.Handler())).With("component", "swim", "node", cfg.NodeName)

	mc, err := profileConfig(cfg.Profile)
	if err != nil {
		return nil, fmt.Errorf("swim new %s: %w", cfg.NodeName, err)
	}
	mc.Name = cfg.NodeName
	mc.BindAddr = cfg.BindAddr
	mc.BindPort = cfg.BindPort
	mc.AdvertiseAddr = cfg.AdvertiseAddr
	mc.AdvertisePort = cfg.BindPort
	if cfg.AdvertisePort != 0 {
		mc.AdvertisePort = cfg.AdvertisePort
	}
	mc.Logger = newMemberlistLogger(logger)

	n := &Node{
		name:             cfg.NodeName,
		log:              logger,
		direct:           direct,
		logq:             logq,
		embedder:         cfg.Embedder,
		broadcastTimeout: cfg.BroadcastTimeout,
		localMeta:        cloneMeta(cfg.Meta),
		members:          make(map[string]NodeInfo),
		events:           newEventQueue(cfg.Events, logger),
		stopped:          make(chan struct{}),
	}
	n.metaBytes.Store(&metaBytes)

	if len(cfg.Keys) > 0 {
		keys := cloneKeys(cfg.Keys)
		kr, err := memberlist.NewKeyring(keys, keys[0])
		if err != nil {
			return nil, fmt.Errorf("swim new %s: keyring: %w", cfg.NodeName, err)
		}
		n.keyring = kr
		mc.Keyring = kr
	}
	d := &delegate{n: n}
	mc.Delegate = d
	mc.Events = d
	mc.Ping = d

	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.wg.Go(func() { n.logq.run(ctx) })
	n.wg.Go(func() { n.events.run(ctx) })

	ml, err := memberlist.Create(mc)
	if err != nil {
		cancel()
		n.wg.Wait()
		return nil, fmt.Errorf("swim new %s on %s: %w", cfg.NodeName,
			net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.BindPort)), err)
	}
	n.ml = ml
	n.rejoinEvery = mc.PushPullInterval
	// Read once, before any alive message about ourselves can rewrite it.
	n.addr = ml.LocalNode().Address()
	n.log.Debug("swim node started", "addr", n.addr, "profile", cfg.Profile, "encrypted", n.keyring != nil)
	return n, nil
}

// Name is this node's name in the cluster.
func (n *Node) Name() string { return n.name }

// Addr is this node's SWIM address (host:port) as peers see it; give it to
// other nodes' Join.
func (n *Node) Addr() string { return n.addr }

// Join contacts the given SWIM addresses (host:port) one at a time and
// merges their view of the cluster, returning how many answered. It fails
// only if none did. ctx is checked between addresses; a single attempt is
// bounded by the profile's TCP timeout.
func (n *Node) Join(ctx context.Context, addrs []string) (int, error) {
	return n.join(ctx, addrs, false)
}

// join is Join; quiet leaves a partial success unlogged (KeepJoined's
// rounds, which run for as long as a seed is away).
//
// This node's own address is never contacted: memberlist answers a join
// to itself with success, so a node restarted while its peers were out of
// reach "joined" itself and stopped trying, alone in a cluster of one for
// good (its peers had declared it dead and never probe the dead).
func (n *Node) join(ctx context.Context, addrs []string, quiet bool) (int, error) {
	if n.down.Load() {
		return 0, fmt.Errorf("swim join %v: %w", addrs, ErrShutdown)
	}
	if len(addrs) == 0 {
		return 0, fmt.Errorf("swim join: no addresses")
	}
	addrs = n.others(ctx, addrs)
	if len(addrs) == 0 {
		// Every seed is this node (the first node of a cluster is often
		// given the same list as the rest): a cluster of one joins nothing.
		return 0, nil
	}
	joined := 0
	var errs []error
	for _, a := range addrs {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		c, err := n.ml.Join([]string{a})
		joined += c
		if err != nil {
			errs = append(errs, flatten(err)) // memberlist names the address
		}
	}
	if joined == 0 {
		return 0, fmt.Errorf("swim join %v: %w", addrs, errors.Join(errs...))
	}
	if len(errs) > 0 && !quiet {
		n.log.Warn("swim join reached only some seeds", "joined", joined, "of", len(addrs), "err", errors.Join(errs...))
	}
	return joined, nil
}

// Members returns the live members, this node included, sorted by name.
// Suspect members are still listed (see State). The list reflects each
// change as soon as memberlist makes it, possibly before the matching
// EventHandler callback has run.
func (n *Node) Members() []NodeInfo {
	n.membersMu.RLock()
	out := make([]NodeInfo, 0, len(n.members))
	for _, m := range n.members {
		// Tags are cloned so callers may keep or modify what they get.
		m.Meta = cloneMeta(m.Meta)
		out = append(out, m)
	}
	n.membersMu.RUnlock()
	slices.SortFunc(out, func(a, b NodeInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Member returns a live member by name.
func (n *Node) Member(name string) (NodeInfo, bool) {
	n.membersMu.RLock()
	defer n.membersMu.RUnlock()
	m, ok := n.members[name]
	m.Meta = cloneMeta(m.Meta)
	return m, ok
}

// LocalHealth is Lifeguard's local health multiplier as memberlist keeps
// it: 0 is healthy, higher means this node has recently missed acks or nacks
// it should have received, so it is likely the slow one. memberlist
// already stretches its probe interval by (score+1); leadership uses the
// score to avoid electing, or keeping, a degraded node.
func (n *Node) LocalHealth() int { return n.ml.GetHealthScore() }

// UpdateMeta publishes new metadata, waiting up to BroadcastTimeout for it
// to be handed to gossip. Peers see it through OnUpdate.
func (n *Node) UpdateMeta(m NodeMeta) error {
	if errs := m.problems(); len(errs) > 0 {
		return fmt.Errorf("swim update meta: %w", errors.Join(errs...))
	}
	n.lifeMu.Lock()
	defer n.lifeMu.Unlock()
	if n.down.Load() {
		return fmt.Errorf("swim update meta: %w", ErrShutdown)
	}
	n.metaMu.Lock()
	defer n.metaMu.Unlock()
	m = cloneMeta(m)
	b, err := encodeMeta(m, n.leaving)
	if err != nil {
		return fmt.Errorf("swim update meta: %w", err)
	}
	n.localMeta = m
	n.metaBytes.Store(&b)
	n.setMember(NodeInfo{Name: n.name, Addr: n.addr, Meta: m, State: StateAlive})
	if err := n.ml.UpdateNode(n.broadcastTimeout); err != nil {
		return fmt.Errorf("swim update meta: %w", err)
	}
	return nil
}

// SetKeys makes keys the node's gossip keyring: keys[0] encrypts, every key
// decrypts, and any other installed key is removed. Each call installs new
// keys before switching the primary and switches before removing, so the
// node never lacks a key it needs.
//
// Rotating a cluster without losing packets takes three passes, each
// applied to every node before the next pass starts:
//
//  1. SetKeys(old, new)  install: everyone can decrypt new, still sends old
//  2. SetKeys(new, old)  switch: everyone sends new, still accepts old
//  3. SetKeys(new)       retire old
//
// Skipping ahead (a node sending with new before every peer has installed
// it) makes the peers that lack it drop that node's probes and acks, and
// they will start suspecting it.
func (n *Node) SetKeys(keys [][]byte) error {
	if n.keyring == nil {
		return fmt.Errorf("swim set keys: %w", ErrNoEncryption)
	}
	if err := checkKeys(keys); err != nil {
		return fmt.Errorf("swim set keys: %w", err)
	}
	n.lifeMu.Lock()
	defer n.lifeMu.Unlock()
	if n.down.Load() {
		return fmt.Errorf("swim set keys: %w", ErrShutdown)
	}
	keys = cloneKeys(keys)
	for i, k := range keys {
		if err := n.keyring.AddKey(k); err != nil {
			return fmt.Errorf("swim set keys: install key %d: %w", i, err)
		}
	}
	if err := n.keyring.UseKey(keys[0]); err != nil {
		return fmt.Errorf("swim set keys: use primary: %w", err)
	}
	// memberlist's RemoveKey shifts later keys down in place, in the array
	// that concurrent decryptions may be reading; removing from the tail
	// makes the usual case (retiring the last, oldest key) shift nothing.
	installed := slices.Clone(n.keyring.GetKeys())
	removed := 0
	for i := len(installed) - 1; i >= 1; i-- {
		if slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Equal(k, installed[i]) }) {
			continue
		}
		if err := n.keyring.RemoveKey(installed[i]); err != nil {
			return fmt.Errorf("swim set keys: remove key: %w", err)
		}
		removed++
	}
	n.log.Info("swim gossip keys set", "keys", len(keys), "removed", removed)
	return nil
}

// LeaveBy is Leave for a role's shutdown: it waits at most d, and no longer
// than ctx's deadline (a deadline already passed is Leave's error, not a
// wait).
func (n *Node) LeaveBy(ctx context.Context, d time.Duration) error {
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return n.Leave(max(d, 0))
}

// Leave tells the cluster this node is going away on purpose, so peers
// report it as StateLeft rather than failed, and waits up to timeout (which
// bounds the whole call) for the news to be gossiped. Call Shutdown
// afterwards; a node that has left cannot rejoin. A peer that misses the
// leave intent (lost packets, a partition) reports the node StateDead
// instead, which roles must treat the same way anyway.
func (n *Node) Leave(timeout time.Duration) error {
	if timeout <= 0 {
		// memberlist reads 0 as "wait forever"; a shutdown path must not.
		return fmt.Errorf("swim leave: timeout must be positive, got %s", timeout)
	}
	n.lifeMu.Lock()
	defer n.lifeMu.Unlock()
	// memberlist panics on Leave after Shutdown; lifeMu makes this check
	// and the call below atomic with respect to Shutdown.
	if n.down.Load() {
		return fmt.Errorf("swim leave: %w", ErrShutdown)
	}
	deadline := time.Now().Add(timeout)

	n.metaMu.Lock()
	n.leaving = true
	b, err := encodeMeta(n.localMeta, true)
	if err == nil {
		n.metaBytes.Store(&b)
		err = n.ml.UpdateNode(timeout)
	}
	n.metaMu.Unlock()
	if err != nil {
		// Still leave: peers will see a failure instead of a leave, which
		// is the worse label but the same outcome.
		n.log.Warn("swim leave intent not broadcast; peers may report a failure", "err", err)
	}

	remaining := time.Until(deadline)
	if remaining <= 0 {
		remaining = time.Millisecond // still announce; just don't wait
	}
	if err := n.ml.Leave(remaining); err != nil {
		return fmt.Errorf("swim leave: %w", err)
	}
	return nil
}

// Shutdown stops memberlist and the event goroutine. It does not announce
// anything: peers will detect a failure unless Leave was called first. It
// waits for an UpdateMeta, SetKeys or Leave in progress to finish.
// Pending events are dropped, and no callback or StateEmbedder method runs
// after Shutdown returns. Queued log records are written first, so
// Shutdown waits for the log sink. Safe to call more than once.
//
// memberlist does not wait for all of its own goroutines: its probe loop
// may finish its current probe (up to one probe interval) and connection
// handlers their TCP timeout after Shutdown returns. They no longer reach
// this package's callers.
func (n *Node) Shutdown() error {
	n.lifeMu.Lock()
	if n.down.Swap(true) {
		n.lifeMu.Unlock()
		<-n.stopped
		return nil
	}
	err := n.ml.Shutdown()
	// Released before waiting on callbacks: a callback blocked on lifeMu
	// (UpdateMeta, say) must be able to see ErrShutdown and return.
	n.lifeMu.Unlock()

	n.gateMu.Lock()
	n.closed = true
	n.gateMu.Unlock()
	n.cancel()
	n.wg.Wait()
	close(n.stopped)
	if err != nil {
		return fmt.Errorf("swim shutdown %s: %w", n.name, err)
	}
	n.direct.Debug("swim node stopped")
	return nil
}

func (n *Node) setMember(info NodeInfo) {
	n.membersMu.Lock()
	n.members[info.Name] = info
	n.membersMu.Unlock()
}

func (n *Node) removeMember(name string) {
	n.membersMu.Lock()
	delete(n.members, name)
	n.membersMu.Unlock()
}

// nodeInfo converts a memberlist node. Meta is untrusted; a node whose
// metadata does not decode keeps a zero Meta, so roles that look for a
// Role ignore it, and the problem is logged.
func (n *Node) nodeInfo(m *memberlist.Node, state State) (NodeInfo, bool) {
	meta, leaving, err := decodeMeta(m.Meta)
	if err != nil {
		n.log.Warn("swim peer metadata rejected", "peer", m.Name, "addr", m.Address(), "err", err)
	}
	return NodeInfo{Name: m.Name, Addr: m.Address(), Meta: meta, State: state}, leaving
}

// flatten unwraps memberlist's go-multierror, whose text ("1 error
// occurred:\n\t* ...") reads badly inside our own wrapping.
func flatten(err error) error {
	if m, ok := err.(interface{ WrappedErrors() []error }); ok {
		if errs := m.WrappedErrors(); len(errs) > 0 {
			return errors.Join(errs...)
		}
	}
	return err
}

func cloneKeys(keys [][]byte) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = bytes.Clone(k)
	}
	return out
}

func cloneMeta(m NodeMeta) NodeMeta {
	m.Tags = maps.Clone(m.Tags)
	return m
}

// delegate adapts memberlist's delegate interfaces to the Node. Every method
// runs on a memberlist goroutine, the event methods under memberlist's node
// lock; none may block or call back into memberlist.
type delegate struct {
	n *Node
}

var (
	_ memberlist.Delegate      = (*delegate)(nil)
	_ memberlist.EventDelegate = (*delegate)(nil)
	_ memberlist.PingDelegate  = (*delegate)(nil)
)

// NodeMeta implements memberlist.Delegate.
func (d *delegate) NodeMeta(limit int) []byte {
	b := *d.n.metaBytes.Load()
	if len(b) > limit {
		// Unreachable while encodeMeta enforces MaxMetaSize; memberlist
		// would panic on an oversized value, so fail soft instead.
		d.n.log.Error("swim node meta exceeds memberlist limit; publishing none", "size", len(b), "limit", limit)
		return nil
	}
	return b
}

// Tempest's user messages travel on QUIC, not memberlist, and state rides
// in acks rather than push/pull, so the rest of memberlist.Delegate is empty.

func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

// NotifyJoin implements memberlist.EventDelegate.
func (d *delegate) NotifyJoin(m *memberlist.Node) {
	info, _ := d.n.nodeInfo(m, StateAlive)
	d.n.setMember(info)
	if m.Name == d.n.name {
		return
	}
	d.n.events.push(event{kind: eventJoin, node: info})
}

// NotifyUpdate implements memberlist.EventDelegate.
func (d *delegate) NotifyUpdate(m *memberlist.Node) {
	if m.Name == d.n.name {
		return // UpdateMeta already recorded it
	}
	info, leaving := d.n.nodeInfo(m, StateAlive)
	d.n.setMember(info)
	if leaving {
		return // the leave itself follows; the role needs no update for it
	}
	d.n.events.push(event{kind: eventUpdate, node: info})
}

// NotifyLeave implements memberlist.EventDelegate. memberlist calls it for
// failures and graceful leaves alike; the leave flag in the node's last
// metadata tells them apart.
func (d *delegate) NotifyLeave(m *memberlist.Node) {
	d.n.removeMember(m.Name)
	if m.Name == d.n.name {
		return
	}
	info, leaving := d.n.nodeInfo(m, StateDead)
	if leaving {
		info.State = StateLeft
	}
	d.n.events.push(event{kind: eventDead, node: info})
}

// AckPayload implements memberlist.PingDelegate.
func (d *delegate) AckPayload() []byte {
	n := d.n
	if n.embedder == nil {
		return nil
	}
	n.gateMu.RLock()
	defer n.gateMu.RUnlock()
	if n.closed {
		return nil
	}
	b := n.embedder.LocalState()
	if len(b) > MaxStateSize {
		// Logged once per episode: this runs on every ack.
		if !n.oversizeLogged.Swap(true) {
			n.log.Error("swim embedded state too large; acks carry none until it shrinks",
				"size", len(b), "limit", MaxStateSize)
		}
		return nil
	}
	n.oversizeLogged.Store(false)
	return b
}

// NotifyPingComplete implements memberlist.PingDelegate. memberlist calls it
// only for acks to this node's own direct probes.
func (d *delegate) NotifyPingComplete(m *memberlist.Node, rtt time.Duration, payload []byte) {
	n := d.n
	if n.embedder == nil || len(payload) == 0 {
		return
	}
	info, ok := n.Member(m.Name)
	if !ok {
		// Probed just as it left or before its join was recorded; m is
		// memberlist's private copy, so decoding it here is safe.
		info, _ = n.nodeInfo(m, StateAlive)
	}
	n.gateMu.RLock()
	defer n.gateMu.RUnlock()
	if n.closed {
		return
	}
	n.embedder.PeerState(info, payload, rtt)
}
