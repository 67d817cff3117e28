// Package gate is Tempest's gate role (docs/gate.md): the entry point for jobs
// that span datacenters. Gates elect a leader; the leader picks each job's
// datacenters, holds one lease per (job, datacenter) fenced by a token made
// from its term, hands the job to each datacenter's manager leader, renews
// the lease on every progress report, fails the datacenter for the job
// when its lease runs out, and merges the datacenters' reports into one
// status with exactly merged latency histograms. The other gates keep
// replicated copies of every job record and take the leases over when the
// leader changes.
//
// # Files
//
//	gate.go       wiring, lifecycle, handler registration, SWIM embedder
//	config.go     Config, DefaultConfig, validation
//	leader.go     establishing and revoking a leadership.Term
//	txn.go        update/view: the one path a change to the job table takes
//	jobs.go       the job entry, loading from the store, commit, forget
//	persist.go    the job records on disk (store.RevFile, newest version wins)
//	submit.go     placing a new job: datacenters, leases, majority store
//	withdraw.go   a job that missed its majority, and repeated submissions
//	dispatch.go   handing a job or a lease to a datacenter; failing one
//	reports.go    datacenters' reports: lease renewal, merged status
//	abort.go      abort_on_fail thresholds on the merged results
//	cancel.go     cancel and stopEverywhere
//	status.go     the global job state machine
//	leases.go     takeover of leases on a new term, the leader's tick
//	sync.go       majority read at start and takeover, serving state sync
//	replicate.go  one-way and majority replication of records to gates
//	lookup.go     a report for a job the leader does not hold
//	retention.go  forgetting finished jobs on every gate
//	dcs.go        the datacenter table, choosing a job's datacenters
//	seed.go       asking managers directly for their heartbeats
//	blobs.go      jobs' data files on a majority of gates
//	rainstorm.go  pipelines: one datacenter only, output paged from its manager
//	size.go       fitting a job record into one message between gates
//	backend.go    api.Backend
//	metrics.go    RegisterMetrics: the gate's Prometheus series
package gate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"tempest/internal/overload"
	"time"

	"tempest/api"
	"tempest/internal/blobstore"
	"tempest/internal/lifecycle"
	"tempest/leadership"
	"tempest/security"
	"tempest/swim"
	"tempest/transport"
	"tempest/wire"
)

// Lock order: the lifecycle.Owner's lock alone; Gate.mu → dcTable.mu. No lock is held
// across network calls or store writes. Gate.mu is taken only by update (every
// change to the job table) and view (a consistent read), in txn.go.

// Peer is one configured gate. The configured list fixes the election
// quorum and who receives replicated job records.
type Peer = leadership.Member

// Deps are the gate's collaborators. Keyring is required unless Transport
// is injected.
type Deps struct {
	Keyring *security.Keyring
	// Transport, if set, replaces the QUIC transport on Config.QUICListen;
	// the caller closes it after Shutdown.
	Transport transport.Transport
	// ElectionStorage, if set, replaces the bbolt file in DataDir.
	ElectionStorage leadership.Storage
	// ElectionProfile, if set, replaces Config.ElectionProfile's timings.
	ElectionProfile *leadership.Profile
	// Now, if set, is the gate's clock.
	Now func() time.Time
}

// Gate is one gate.
type Gate struct {
	cfg     Config
	log     *slog.Logger
	now     func() time.Time
	keyring *security.Keyring
	// lag measures scheduler lag; loadRd is the latest grading, loads the
	// other gates' levels and yield a HIGH leader's handoff (overload.go).
	lag    *overload.LagProbe
	loadRd atomic.Pointer[overload.Reading]
	loads  gateLoads
	yield  *overload.Yielder

	seat     *leadership.Seat // the transport and the elector; life.Release closes it
	tr       transport.Transport
	members  *swim.Node
	elector  *leadership.Elector
	store    *jobStore
	notReady int // the LHM reported to the election until the first sync

	// group is the gate group as each quorum decision reads it, swapped
	// when the configuration in effect changes (leadership.PeerView).
	group *leadership.PeerView
	ms    leadership.RoleMembership // members.go
	ids   *wire.SnowflakeGenerator
	dcs   *dcTable

	mu      sync.Mutex
	jobs    map[string]*jobEntry
	version uint64 // highest record version seen

	lead  *leadership.Terms // the term of leadership held, if any (leader.go)
	ready atomic.Bool       // first state sync done: may lead
	apis  *api.Addresses    // this gate's API URL and other gates'

	// life owns background goroutines and handlers in flight.
	life *lifecycle.Owner

	// blobs: the gates' copy of jobs' data files (blobs.go), served to
	// clients by the embedded BlobService (api.BlobBackend).
	blobs *blobstore.Node
	*api.BlobService
}

// New builds a gate: it opens the store and loads every job, binds the
// transport, registers handlers and starts SWIM. Run starts it.
func New(cfg Config, deps Deps) (*Gate, error) {
	adoptErr := cfg.AdoptTransport(deps.Transport)
	err := errors.Join(cfg.validate(deps.Transport != nil), adoptErr)
	if deps.Keyring == nil && deps.Transport == nil {
		err = errors.Join(err, errors.New("Deps.Keyring: required unless Transport is injected"))
	}
	if err != nil {
		return nil, fmt.Errorf("gate config: %w", err)
	}
	profile, err := cfg.ElectionProfileOr(deps.ElectionProfile)
	if err != nil {
		return nil, err
	}
	g := &Gate{
		lag:      overload.NewLagProbe(0, 0),
		cfg:      cfg,
		log:      cfg.Logger,
		now:      deps.Now,
		keyring:  deps.Keyring,
		jobs:     make(map[string]*jobEntry),
		notReady: profile.MaxLeaderLHM + 1,
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	baseLog := g.log
	g.log = g.log.With("component", "gate", "node", cfg.ID)
	if g.now == nil {
		g.now = time.Now
	}
	g.life = lifecycle.New()
	g.lead = leadership.NewTerms(g.life.Context(), g.life.Go, func() uint64 { return g.elector.FenceToken() })
	g.ids = wire.NewSnowflakeGenerator(cfg.ID, g.now)
	g.dcs = newDCTable(g.now)
	g.apis = api.NewAddresses(cfg.ID, api.AdvertisedURL(cfg.APIAdvertise, cfg.APIListen))

	ok := false
	defer func() {
		if !ok {
			g.life.Close()
			g.life.Release()
		}
	}()
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("gate data dir: %w", err)
	}
	if g.store, err = openJobStore(filepath.Join(cfg.DataDir, "gate.db")); err != nil {
		return nil, err
	}
	g.life.Opened(g.store.close)
	if err := g.load(); err != nil {
		return nil, err
	}

	g.seat, err = leadership.OpenSeat(leadership.SeatConfig{
		ID: cfg.ID, Members: g.cfg.Peers, Transport: deps.Transport, QUIC: cfg.TransportConfig(deps.Keyring, baseLog),
		Storage: deps.ElectionStorage, DataDir: cfg.DataDir,
		Elector: leadership.ElectorConfig{
			Cluster:          "gates",
			Profile:          profile,
			Priority:         cfg.ElectionPriority,
			Logger:           baseLog,
			OnBecomeLeader:   g.onBecomeLeader,
			OnLoseLeadership: g.onLoseLeadership,
			OnMembersChange:  g.onMembersChange,
			OnRemoved:        g.onRemoved,
			// A learner (a gate added at runtime) is promoted only once
			// it has copied the leader's records (members.go).
			Syncs: true,
			OnLeaderChange: func(leader string, term uint64) {
				g.log.Info("gate leader changed", "leader", leader, "term", term)
				// Before the start sync ends, initialSync decides (it knows
				// which gates it read).
				if g.ready.Load() {
					g.catchUpFrom(leader)
				}
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	g.life.Opened(g.seat.Close)
	g.tr, g.cfg.Peers, g.elector = g.seat.Tr, g.seat.Members, g.seat.Elector
	g.group = leadership.NewPeerView(leadership.NewPeerSet(cfg.ID, g.elector.Members()))
	g.loads = gateLoads{self: cfg.ID, peers: map[string]peerLoad{}}
	g.yield = &overload.Yielder{Elector: g.elector, Spawn: g.spawn, Log: g.log, Peer: "gate"}
	g.ms = leadership.RoleMembership{ID: cfg.ID, Group: "gate group", Elector: g.elector,
		View: g.group, Life: g.life, Log: g.log, Poll: cfg.TickInterval, Backoff: cfg.TickInterval, Copy: g.copyFromLeader}
	// Until the first state sync, this gate must not lead: it may hold no
	// jobs at all while the others hold many. A health score above the
	// election's limit keeps it from campaigning and from being voted for.
	g.elector.SetLHM(g.notReady)

	if cfg.SwimBind != "" {
		scfg, err := cfg.SwimConfig(cfg.SwimBind, deps.Keyring, baseLog)
		if err != nil {
			return nil, fmt.Errorf("gate SwimBind: %w", err)
		}
		scfg.Meta = g.nodeMeta()
		scfg.Embedder = g
		scfg.Events = swim.EventHandler{
			OnJoin:   func(n swim.NodeInfo) { g.dcs.member(n, true); g.loads.member(n, true) },
			OnUpdate: func(n swim.NodeInfo) { g.dcs.member(n, true); g.loads.member(n, true) },
			OnDead:   func(n swim.NodeInfo) { g.dcs.member(n, false); g.loads.member(n, false) },
		}
		if g.members, err = swim.New(scfg); err != nil {
			return nil, fmt.Errorf("gate swim: %w", err)
		}
		g.life.Opened(g.members.Shutdown)
	}
	if err := g.openBlobs(); err != nil {
		return nil, err
	}
	g.registerHandlers()
	ok = true
	g.log.Info("gate ready", "quic", g.tr.Addr(), "members", g.elector.Members().String(), "jobs_loaded", len(g.jobs))
	return g, nil
}

// Run joins SWIM, syncs state from the other gates, takes part in elections
// and serves until ctx ends or Shutdown is called.
func (g *Gate) Run(ctx context.Context) error {
	if err := g.life.Serve(ctx, func() {
		if !g.ms.Start() {
			return
		}
		g.spawn(g.seat.Run)
		g.spawn(g.initialSync)
		g.spawn(g.lag.Run)
		g.spawn(g.healthLoop)
		g.spawn(g.blobGCLoop)
		g.spawn(g.retentionLoop)
		if g.members != nil && len(g.cfg.Join) > 0 {
			g.spawn(g.joinLoop)
		}
	}); err != nil {
		return fmt.Errorf("gate: %w", err)
	}
	if err := g.ms.ExitError(); err != nil {
		return fmt.Errorf("gate: %w", err)
	}
	return nil
}

// Shutdown stops the gate: it leaves the election, waits for handlers and
// background work, leaves SWIM and closes what it opened.
func (g *Gate) Shutdown(ctx context.Context) error {
	// A leading gate hands over first: its successor takes every lease over
	// (takeOver) as it starts its term, a round trip from now instead of an
	// election timeout.
	g.HandOff(ctx)
	first, finish := g.life.Stop(func() {
		g.log.Info("gate shutting down")
		g.elector.Stop()
	})
	if !first {
		return nil
	}
	defer finish()
	if g.members != nil {
		if err := g.members.LeaveBy(ctx, 2*time.Second); err != nil {
			g.log.Debug("swim leave", "err", err)
		}
	}
	return g.life.Release()
}

// HandOff is a planned stop's first step: a leading gate hands its
// leadership, and with it every lease (its successor's takeOver), to a peer
// and waits for it to lead (at most an election timeout). Shutdown does it
// too; the binary calls it before it ends Run, which stops the election.
func (g *Gate) HandOff(ctx context.Context) { g.seat.HandOff(ctx) }

// ID is this gate's node id.
func (g *Gate) ID() string { return g.cfg.ID }

// Addr is this gate's QUIC address.
func (g *Gate) Addr() string { return g.tr.Addr() }

// SwimAddr is this gate's SWIM address ("" without SWIM).
func (g *Gate) SwimAddr() string {
	if g.members == nil {
		return ""
	}
	return g.members.Addr()
}

// IsLeader reports whether this gate leads and has finished taking over.
func (g *Gate) IsLeader() bool {
	lt := g.lead.Leading()
	return lt != nil && lt.Synced()
}

// Ready reports whether the first state sync is done (the gate may lead).
func (g *Gate) Ready() bool { return g.ready.Load() }

// SetAPIAddr publishes this gate's API URL once the server has bound.
func (g *Gate) SetAPIAddr(url string) error {
	g.apis.SetSelf(url)
	if g.members == nil {
		return nil
	}
	if err := g.members.UpdateMeta(g.nodeMeta()); err != nil {
		return fmt.Errorf("publish api address %s: %w", url, err)
	}
	return nil
}

// ReloadSecrets replaces the cluster secrets (SIGHUP during a rotation).
func (g *Gate) ReloadSecrets(current, previous string) error {
	if g.keyring == nil {
		return errors.New("gate has no keyring")
	}
	if err := g.keyring.Reload(current, previous); err != nil {
		return err
	}
	if g.members != nil {
		if err := g.members.SetKeys(g.keyring.MemberlistKeys()); err != nil && !errors.Is(err, swim.ErrNoEncryption) {
			return fmt.Errorf("swim keys: %w", err)
		}
	}
	if g.members != nil {
		if err := g.members.UpdateMeta(g.nodeMeta()); err != nil {
			g.log.Warn("could not publish the new key ids", "err", err)
		}
	}
	g.log.Info("secrets reloaded", "send_key", fmt.Sprintf("%08x", g.keyring.SendKeyID()))
	return nil
}

// nodeMeta is what the gate publishes in SWIM: its role, QUIC address, API
// URL and the key ids it sends with and accepts, so every gate's cluster
// view shows how far a rotation pass has got on the others (managers put
// theirs in heartbeats; gates send none).
func (g *Gate) nodeMeta() swim.NodeMeta {
	meta := swim.NodeMeta{Role: wire.RoleGate, QUICAddr: g.tr.Addr(), Tags: map[string]string{
		loadTag: strconv.Itoa(int(g.loadReading().Level)),
	}}
	if u := g.apis.Self(); u != "" {
		meta.Tags["api"] = u
	}
	if g.keyring != nil {
		send, accept := api.KeyIDs(g.keyring.SendKeyID(), g.keyring.AcceptedKeyIDs())
		meta.Tags["send_key"], meta.Tags["accept_keys"] = send, strings.Join(accept, ",")
	}
	return meta
}

// LocalState implements swim.StateEmbedder: gates send no payload.
func (g *Gate) LocalState() []byte { return nil }

// PeerState implements swim.StateEmbedder: managers' heartbeats arrive here.
func (g *Gate) PeerState(node swim.NodeInfo, state []byte, _ time.Duration) {
	t, err := swim.StateType(state)
	if err != nil || t != wire.TypeManagerHeartbeat {
		return
	}
	hb, err := swim.DecodeManagerHeartbeat(state)
	if err != nil || hb.NodeID != node.Name {
		return // a node may only speak for itself
	}
	g.dcs.heartbeat(hb)
}

// observeManager records a manager heartbeat that arrived some other way
// (tests without SWIM).
func (g *Gate) observeManager(hb *wire.ManagerHeartbeat) { g.dcs.heartbeat(hb) }

func (g *Gate) joinLoop(ctx context.Context) {
	g.members.KeepJoined(ctx, g.cfg.Join, 250*time.Millisecond, 15*time.Second, "swim cluster", g.log)
}

// healthLoop grades the gate's load and, once it is ready, hands SWIM's
// local health score to the election (so a degraded gate does not lead) or
// yields its leadership to a less degraded gate (overload.go).
func (g *Gate) healthLoop(ctx context.Context) {
	lifecycle.Every(ctx, time.Second, func() {
		lhm := 0
		if g.members != nil {
			lhm = g.members.LocalHealth()
		}
		r, healthier := g.gradeLoad(lhm)
		// Until its first sync the gate reports notReady (sync.go).
		if g.ready.Load() {
			g.yield.Apply(r, healthier, lhm, g.lead.Leading() != nil)
		}
	})
}

// spawn runs f on a goroutine the gate owns; false once Shutdown began.
func (g *Gate) spawn(f func(ctx context.Context)) bool { return g.life.Go(f) }

// handle registers a typed handler that Shutdown waits for and that refuses
// messages once Shutdown began.
func handle[T wire.Message](g *Gate, t wire.MsgType, f func(ctx context.Context, from transport.Peer, msg T) (wire.Message, error)) {
	lifecycle.Handle(g.life, g.tr, "gate", t, f)
}

func (g *Gate) registerHandlers() {
	g.registerBlobHandlers()
	handle(g, wire.TypeJobProgress, g.handleJobProgress)
	handle(g, wire.TypeLeaderAPI, g.handleLeaderAPI)
	// Operations only other gates send (wire/replicate.go).
	handle(g, wire.TypeReplicateGateRecord, g.handleReplicateGateRecord)
	handle(g, wire.TypeForwardJobProgress, g.handleForwardedJobProgress)
	handle(g, wire.TypeStateSyncRequest, g.handleStateSync)
	handle(g, wire.TypeGateRecordRequest, g.handleRecordRequest)
}

func (g *Gate) isPeer(id string) bool { return g.group.Load().IsPeer(id) }

var _ api.Backend = (*Gate)(nil)
