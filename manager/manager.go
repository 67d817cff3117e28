package manager

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"tempest/internal/overload"
	"time"

	"tempest/api"
	"tempest/internal/blobstore"
	"tempest/internal/lifecycle"
	"tempest/internal/obs"
	"tempest/internal/store"
	"tempest/leadership"
	"tempest/rsstore"
	"tempest/security"
	"tempest/swim"
	"tempest/transport"
	"tempest/wire"
	"tempest/workflow"
)

// Lock order (never take an earlier lock while holding a later one):
//
//	the lifecycle.Owner's lock (alone: nothing else is taken under it)
//	Manager.mu → workerTable.mu
//	Manager.mu → Elector's status lock (m.leading reads it)
//	managerTable.mu (alone)
//
// Manager.mu guards the job table (jobs, workflows, watchers, revisions).
// The worker and manager tables are leaves that never call out. No lock is
// held across network calls, store writes or Elector calls that wait; the
// Elector never calls back into the manager while holding its own lock.

// Peer is one configured manager of this datacenter, this one included.
// The configured list, not the live one, fixes the quorum (len/2+1).
type Peer = leadership.Member

// Deps are the manager's collaborators. Keyring is required unless both
// Transport and Membership are injected; Registry is required.
type Deps struct {
	Keyring  *security.Keyring
	Registry *workflow.Registry

	// Transport, if set, is used instead of a QUIC transport on
	// Config.QUICListen. The caller owns it and closes it after Shutdown.
	Transport transport.Transport
	// Membership, if set, is used instead of a swim.Node on Config.SwimBind;
	// the caller owns it and delivers SwimEvents and PeerState itself.
	Membership Membership
	// ElectionStorage, if set, replaces the bbolt file in DataDir.
	ElectionStorage leadership.Storage
	// ElectionProfile, if set, replaces Config.ElectionProfile's timings.
	ElectionProfile *leadership.Profile

	// Rand drives worker selection; nil means crypto/rand. It is only read
	// under the worker table's lock, so it need not be safe for concurrent
	// use.
	Rand  io.Reader
	Clock Clock
}

// Manager is one manager of a datacenter: it keeps the worker table, and,
// while it leads, places workflows with quorum confirmation, tracks their
// progress, retries failures and answers the client API (api.Backend).
type Manager struct {
	cfg     Config
	log     *slog.Logger
	clock   Clock
	reg     *workflow.Registry
	keyring *security.Keyring

	seat       *leadership.Seat // the transport and the elector; life.Release closes it
	tr         transport.Transport
	members    Membership
	ownMembers *swim.Node
	elector    *leadership.Elector
	// leaseLimit: the quorum age beyond which this leader refuses workers'
	// progress (progress.go).
	leaseLimit time.Duration
	store      *store.Store
	blobs      *blobstore.Node // blobs.go; served to clients by the embedded BlobService
	*api.BlobService

	// group is the manager group as quorum decisions see it, swapped on
	// every membership change (peerset.go, members.go).
	group *leadership.PeerView
	ms    leadership.RoleMembership // members.go
	rs    *rsstore.Store            // rainstorm.go
	// rsScale is the leader's autoscaling of pipelines (rainstorm_scale.go).
	rsScale rsScaleState
	// rsStale counts checkpoints refused because their task runs under a
	// newer incarnation: a replaced task that went on (frozen, cut off)
	// and was fenced, as /metrics shows.
	rsStale atomic.Uint64
	ids     *wire.SnowflakeGenerator

	workers  *workerTable
	managers *managerTable
	// gates and gateMembers: the gates' SWIM cluster, when configured.
	gates       *gateTable
	gateMembers *swim.Node

	mu   sync.Mutex
	jobs map[string]*jobState
	wfs  map[string]*workflowState
	rev  uint64 // last revision handed to a record
	// wfCounts tallies the workflows of m.jobs by status (countLocked),
	// for scrapes: a walk over every workflow retained, under mu, grew
	// with history and held up placements meanwhile.
	wfCounts map[wire.WorkflowStatus]int
	// orphanCommits are commits for jobs whose submission has not reached
	// this peer yet; they are applied when it does, and reported in state
	// sync meanwhile. Bounded in age and number (orphanCommitTTL,
	// maxOrphanCommits): a submission that never arrives must not make
	// them grow for ever.
	orphanCommits map[string]orphanCommit
	// batch groups placements' quorum and commit rounds, the stores of
	// ended workflows on a majority, and peers' status updates
	// (provision_batch.go, status_batch.go).
	batch *batching

	terms *leadership.Terms // the term of leadership held, if any (leader.go)
	// leadSince is when this manager last became leader (Unix ns, on clock):
	// fenceWait never counts a lost worker's fence from before it.
	leadSince atomic.Int64
	kickCh    chan struct{}
	// gateKick asks the gate report loop to report now: a job's status
	// changed, and the gate should not learn it a report interval late.
	gateKick chan struct{}
	// hbMu serializes heartbeat rebuilds (refreshHeartbeat): the heartbeat
	// loop, the election's callbacks and gates' status requests rebuild it
	// from their own goroutines, and the payload left in hb must be the
	// newest, with the highest version handed out (hbVer).
	hbMu  sync.Mutex
	hb    atomic.Pointer[[]byte]
	hbVer atomic.Uint64
	apis  *api.Addresses // this manager's API URL and its peers'
	// refused counts requests refused for their sender (authz.go).
	refused obs.Refusals[wire.MsgType]
	// intakeCB refuses new submissions at once while intakes find no
	// majority (intakebreaker.go).
	intakeCB *intakeBreaker
	// lag measures scheduler lag; loadRd is the latest grading and yield
	// a HIGH leader's handoff (overload.go).
	lag    *overload.LagProbe
	loadMu sync.Mutex
	loadRd overload.Reading
	yield  *overload.Yielder

	// life owns background goroutines and handlers in flight; its context
	// ends at Shutdown and is the parent of all background work.
	life *lifecycle.Owner
}

// New builds a manager: it opens the store and loads every job, binds the
// transport (unless injected), registers the message handlers, starts the
// SWIM node (unless injected) and prepares the election. Run starts it.
func New(cfg Config, deps Deps) (*Manager, error) {
	adoptErr := cfg.AdoptTransport(deps.Transport)
	err := errors.Join(cfg.validate(deps.Transport != nil, deps.Membership != nil), adoptErr)
	if deps.Registry == nil {
		err = errors.Join(err, errors.New("Deps.Registry: must not be nil"))
	}
	if deps.Keyring == nil && (deps.Transport == nil || deps.Membership == nil) {
		err = errors.Join(err, errors.New("Deps.Keyring: required unless Transport and Membership are both injected"))
	}
	if err != nil {
		return nil, fmt.Errorf("manager config: %w", err)
	}
	profile, err := cfg.ElectionProfileOr(deps.ElectionProfile)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		lag:           overload.NewLagProbe(0, 0),
		cfg:           cfg,
		log:           cfg.Logger,
		clock:         deps.Clock,
		reg:           deps.Registry,
		keyring:       deps.Keyring,
		jobs:          make(map[string]*jobState),
		wfs:           make(map[string]*workflowState),
		wfCounts:      make(map[wire.WorkflowStatus]int),
		orphanCommits: make(map[string]orphanCommit),
		kickCh:        make(chan struct{}, 1),
		gateKick:      make(chan struct{}, 1),
	}
	m.batch = m.newBatching()
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	// Layers below (transport, election, SWIM) add their own component and
	// node attributes to the base logger.
	baseLog := m.log
	m.log = m.log.With("component", "manager", "node", cfg.ID, "dc", cfg.Datacenter)
	m.intakeCB = newIntakeBreaker(cfg.QuorumTimeout, m.log)
	if m.clock == nil {
		m.clock = realClock{}
	}
	rnd := deps.Rand
	if rnd == nil {
		rnd = rand.Reader
	}
	m.life = lifecycle.New()
	m.terms = leadership.NewTerms(m.life.Context(), m.life.Go, func() uint64 { return m.elector.FenceToken() })
	m.ids = wire.NewSnowflakeGenerator(cfg.ID, m.clock.Now)
	m.workers = newWorkerTable(rnd, cfg.QueueSoftLimit, m.clock.Now)
	m.managers = newManagerTable(m.clock.Now)
	m.apis = api.NewAddresses(cfg.ID, api.AdvertisedURL(cfg.APIAdvertise, cfg.APIListen))

	ok := false
	defer func() {
		if !ok {
			m.life.Close() // handlers already registered refuse from now on
			m.life.Release()
		}
	}()

	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("manager data dir: %w", err)
	}
	so := store.DefaultOptions()
	so.OnLazyError = func(err error) { m.log.Error("persist job state lazily", "err", err) }
	if m.store, err = store.OpenWithOptions(filepath.Join(cfg.DataDir, "manager.db"), so); err != nil {
		return nil, err
	}
	m.life.Opened(m.store.Close)
	if err := m.load(); err != nil {
		return nil, err
	}

	m.seat, err = leadership.OpenSeat(leadership.SeatConfig{
		ID: cfg.ID, Members: m.cfg.Peers, Transport: deps.Transport, QUIC: cfg.TransportConfig(deps.Keyring, baseLog),
		Storage: deps.ElectionStorage, DataDir: cfg.DataDir,
		Elector: leadership.ElectorConfig{
			Cluster:          "managers/" + cfg.Datacenter,
			Profile:          profile,
			Priority:         cfg.ElectionPriority,
			Logger:           baseLog,
			OnBecomeLeader:   m.onBecomeLeader,
			OnLoseLeadership: m.onLoseLeadership,
			OnLeaderChange:   m.onLeaderChange,
			OnMembersChange:  m.onMembersChange,
			OnRemoved:        m.onRemoved,
			// A learner (a manager added at runtime) is promoted only
			// once it has copied the leader's jobs (members.go).
			Syncs: true,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	m.life.Opened(m.seat.Close)
	m.tr, m.cfg.Peers, m.elector = m.seat.Tr, m.seat.Members, m.seat.Elector
	m.group = leadership.NewPeerView(leadership.NewPeerSet(cfg.ID, m.elector.Members()))
	m.yield = &overload.Yielder{Elector: m.elector, Spawn: m.spawn, Log: m.log, Peer: "manager"}
	m.ms = leadership.RoleMembership{ID: cfg.ID, Group: "manager group of " + cfg.Datacenter, Elector: m.elector,
		View: m.group, Life: m.life, Log: m.log, Poll: cfg.HeartbeatInterval, Backoff: cfg.StateSyncBackoff, Copy: m.copyFromLeader}
	// Within two election timeouts check-quorum, counted in ticks, is the
	// judge (a leader whose ticks keep time steps down by then); the lease
	// limit is for a leader whose ticks lag far behind that.
	m.leaseLimit = max(cfg.WorkerFenceAfter, 2*profile.ElectionTimeout())
	m.refreshHeartbeat()

	m.members = deps.Membership
	if m.members == nil {
		scfg, err := cfg.SwimConfig(cfg.SwimBind, deps.Keyring, baseLog)
		if err != nil {
			return nil, fmt.Errorf("manager SwimBind: %w", err)
		}
		scfg.Meta = m.nodeMeta()
		scfg.Embedder = m
		scfg.Events = m.SwimEvents()
		if m.ownMembers, err = swim.New(scfg); err != nil {
			return nil, fmt.Errorf("manager swim: %w", err)
		}
		m.life.Opened(m.ownMembers.Shutdown)
		m.members = m.ownMembers
	}
	if err := m.openBlobs(); err != nil {
		return nil, err
	}
	if err := m.openRainstorm(); err != nil {
		return nil, err
	}
	m.gates = &gateTable{g: make(map[string]string), failed: make(map[string]time.Time), now: m.clock.Now}
	if deps.Keyring != nil {
		if err := m.startGateSwim(deps.Keyring, baseLog); err != nil {
			return nil, err
		}
	}
	// Last, so no message reaches a half-built manager.
	m.registerHandlers()
	ok = true
	m.log.Info("manager ready", "quic", m.tr.Addr(), "members", m.elector.Members().String(), "quorum", m.group.Load().Quorum,
		"jobs_loaded", len(m.jobs), "api", m.apis.Self())
	return m, nil
}

// Run joins the SWIM cluster, takes part in elections and serves until ctx
// ends or Shutdown is called. It can run once.
func (m *Manager) Run(ctx context.Context) error {
	if err := m.life.Serve(ctx, func() {
		if !m.ms.Start() {
			return
		}
		m.spawn(m.seat.Run)
		m.spawn(m.lag.Run)
		m.spawn(m.heartbeatLoop)
		m.spawn(m.housekeepingLoop)
		m.spawn(m.blobGCLoop)
		if m.ownMembers != nil && len(m.cfg.Join) > 0 {
			m.spawn(m.joinLoop)
		}
		if m.gateMembers != nil {
			m.spawn(m.gateReportLoop)
			if len(m.cfg.GateJoin) > 0 {
				m.spawn(m.gateJoinLoop)
			}
		}
	}); err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	if err := m.ms.ExitError(); err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	return nil
}

// Shutdown stops the manager: a leader first hands its leadership to an
// up-to-date peer (a planned stop costs the datacenter a round trip without
// a leader, not an election timeout), then it leaves the election, waits
// for in-flight handlers and background work, leaves SWIM and closes what
// it opened. ctx bounds the handover and the graceful SWIM leave.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.HandOff(ctx)
	first, finish := m.life.Stop(func() {
		m.log.Info("manager shutting down")
		m.elector.Stop()
	})
	if !first {
		return nil
	}
	defer finish()
	m.stopTimers()
	if m.ownMembers != nil {
		if err := m.ownMembers.LeaveBy(ctx, m.cfg.HeartbeatInterval*4); err != nil {
			m.log.Debug("swim leave", "err", err)
		}
	}
	if m.gateMembers != nil {
		if err := m.gateMembers.Leave(m.cfg.HeartbeatInterval * 2); err != nil {
			m.log.Debug("gate swim leave", "err", err)
		}
	}
	return m.life.Release()
}

// HandOff is a planned stop's first step: a leading manager hands its
// leadership to an up-to-date peer and waits for it to lead (at most an
// election timeout). Shutdown does it too; the binary calls it before it
// ends Run, which stops the election.
func (m *Manager) HandOff(ctx context.Context) { m.seat.HandOff(ctx) }

// ID is this manager's node id.
func (m *Manager) ID() string { return m.cfg.ID }

// Addr is this manager's data-plane address.
func (m *Manager) Addr() string { return m.tr.Addr() }

// IsLeader reports whether this manager leads its datacenter now.
func (m *Manager) IsLeader() bool { return m.leading() != nil }

// Term is the election term this manager is in.
func (m *Manager) Term() uint64 { return m.elector.Status().Term }

// spawn runs f on a goroutine the manager owns, with a context that ends at
// Shutdown. It reports false (and runs nothing) once Shutdown has begun.
func (m *Manager) spawn(f func(ctx context.Context)) bool { return m.life.Go(f) }

// handle registers a typed handler that Shutdown waits for and that
// refuses messages once Shutdown began: the store must not close under it.
func handle[T wire.Message](m *Manager, t wire.MsgType, f func(ctx context.Context, from transport.Peer, msg T) (wire.Message, error)) {
	lifecycle.Handle(m.life, m.tr, "manager", t, f)
}

func (m *Manager) registerHandlers() {
	handle(m, wire.TypeJobSubmission, m.handleJobSubmission)
	handle(m, wire.TypeCancelJob, m.handleCancel)
	handle(m, wire.TypeWorkflowProgress, m.handleProgress)
	handle(m, wire.TypeWorkflowProgressBatch, m.handleProgressBatch)
	handle(m, wire.TypeProvisionRequest, m.handleProvisionRequest)
	handle(m, wire.TypeProvisionCommit, m.handleProvisionCommit)
	handle(m, wire.TypeProvisionBatch, m.handleProvisionBatch)
	handle(m, wire.TypeProvisionCommitBatch, m.handleProvisionCommitBatch)
	handle(m, wire.TypeStateSyncRequest, m.handleStateSync)
	handle(m, wire.TypeWorkerRegistration, m.handleRegistration)
	handle(m, wire.TypeWorkerHeartbeat, m.handleWorkerHeartbeat)
	handle(m, wire.TypeLeaseTransfer, m.handleLeaseTransfer)
	// Operations only peer managers send (wire/replicate.go).
	handle(m, wire.TypeReplicateJob, m.handleReplicateJob)
	handle(m, wire.TypeReplicateJobStatus, m.handleReplicateJobStatus)
	handle(m, wire.TypeReplicateJobStatusBatch, m.handleReplicateJobStatusBatch)
	handle(m, wire.TypeRelayWorkerRegistration, m.handleRelayedRegistration)
	m.registerBlobHandlers()
	handle(m, wire.TypeManagerStatusRequest, m.handleStatusRequest)
	handle(m, wire.TypeLeaderAPI, m.handleLeaderAPI)
	handle(m, wire.TypeDatacenterNodesRequest, m.handleDatacenterNodes)
	m.registerRainstorm()
	m.registerRainstormOutput()
}

// isPeer reports whether id is another manager of the group (a voter or a
// learner). Transport ids are proven by the sealed envelope, so this is an
// authorisation check.
func (m *Manager) isPeer(id string) bool { return m.group.Load().IsPeer(id) }

// kick asks the scheduler to look at queued work now.
func (m *Manager) kick() {
	select {
	case m.kickCh <- struct{}{}:
	default:
	}
}
