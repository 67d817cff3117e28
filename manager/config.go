package manager

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"tempest/api"
	"tempest/leadership"
	"tempest/swim"
)

// Peer is one configured manager of this datacenter, this one included.
// The configured list, not the live one, fixes the quorum (len/2+1).
type Peer = leadership.Member

// Config configures a Manager. The YAML tags are the config file's keys.
type Config struct {
	// ID is this manager's node id: its SWIM name, transport id and election
	// member id. It must appear in Peers.
	ID         string `yaml:"id"`
	Datacenter string `yaml:"datacenter"`

	// QUICListen is the UDP address of the data plane (workers, peers).
	QUICListen string `yaml:"quic_listen"`
	// SwimBind is the host:port of the datacenter's SWIM cluster.
	SwimBind string `yaml:"swim_bind"`
	// SwimProfile is that cluster's SWIM timing profile: lan (the
	// default), fastlan, local or test (docs/failure-detection.md).
	SwimProfile     string   `yaml:"swim_profile"`
	ElectionProfile string   `yaml:"election_profile"`
	Join            []string `yaml:"join"`
	// GateSwimBind, if set, makes this manager a member of the gates'
	// cross-datacenter SWIM cluster too (docs/gate.md): its ManagerHeartbeat
	// rides in that cluster's acks, which is how gates learn each
	// datacenter's health and leader. GateJoin seeds that cluster.
	GateSwimBind string   `yaml:"gate_swim_bind"`
	GateJoin     []string `yaml:"gate_join"`
	// GateSwimProfile is the SWIM timing profile of this manager's
	// membership of the gates' cluster: the gates' own swim_profile (lan),
	// whatever SwimProfile the datacenter runs.
	GateSwimProfile string `yaml:"gate_swim_profile"`
	// GateReportInterval is how often the leader reports each gate-driven
	// job's progress to its gate; the reports renew the datacenter's lease.
	GateReportInterval time.Duration `yaml:"gate_report_interval"`
	// Peers lists every configured manager, this one included. Empty means
	// a cluster of one at QUICListen.
	Peers []Peer `yaml:"peers"`

	// APIListen is the TCP address the API server binds (the api package
	// serves it); APIAdvertise is the URL peers hand to clients to reach
	// it, published in SWIM meta Tags["api"]. Empty APIAdvertise is derived
	// from APIListen when that names a concrete host and port.
	APIListen    string `yaml:"api_listen"`
	APIAdvertise string `yaml:"api_advertise"`

	DataDir string `yaml:"data_dir"`

	// QuorumTimeout bounds the wait for provision confirmations and commits.
	QuorumTimeout time.Duration `yaml:"quorum_timeout"`
	// DispatchTimeout bounds one WorkflowDispatch call to a worker.
	DispatchTimeout time.Duration `yaml:"dispatch_timeout"`
	// MaxWorkflowRetries is how many times a failed workflow is retried on
	// another worker before it is FAILED.
	MaxWorkflowRetries int `yaml:"max_workflow_retries"`
	// Retention keeps finished jobs queryable this long.
	Retention time.Duration `yaml:"retention"`
	// QueueSoftLimit: a worker reporting this queue depth gets no new work.
	QueueSoftLimit int `yaml:"queue_soft_limit"`
	// StateSyncRetries and StateSyncBackoff shape the state sync a new
	// leader runs: attempt n waits StateSyncBackoff*2^n (with jitter).
	StateSyncRetries int           `yaml:"state_sync_retries"`
	StateSyncBackoff time.Duration `yaml:"state_sync_backoff"`
	// StateSyncTimeout bounds the whole state sync: a peer or worker that
	// has not answered by then (the crashed old leader, typically) is
	// skipped so the new leader can start serving.
	StateSyncTimeout time.Duration `yaml:"state_sync_timeout"`
	// StateSyncGrace is how long a new leader waits for a worker it could
	// not reach during state sync (a restarted leader may not know it yet)
	// to show up before retrying that worker's workflows elsewhere.
	StateSyncGrace time.Duration `yaml:"state_sync_grace"`
	// WorkerFenceAfter is how long after last hearing from a lost worker
	// (SWIM declared it dead, or a new leader cannot reach it) the leader
	// waits before re-dispatching its workflows: a worker cut off from its
	// leader stops them after its fence_after, so this must not be shorter
	// than the workers' fence_after. It bounds the double load of a
	// partition; see docs/datacenter.md.
	WorkerFenceAfter time.Duration `yaml:"worker_fence_after"`
	// HeartbeatInterval is how often the SWIM-embedded heartbeat is rebuilt
	// and the scheduler re-checks queued work.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// MaxParallelPlacements bounds placements of one job running at once.
	MaxParallelPlacements int `yaml:"max_parallel_placements"`

	Logger *slog.Logger `yaml:"-"`
}

// DefaultConfig returns settings that work for a single manager on one
// machine. ID must still be set (the command derives one from the host
// name).
func DefaultConfig() Config {
	return Config{
		Datacenter:            "dc1",
		QUICListen:            "127.0.0.1:7401",
		SwimBind:              "127.0.0.1:7402",
		SwimProfile:           swim.ProfileLAN,
		GateSwimProfile:       swim.ProfileLAN,
		ElectionProfile:       "lan",
		APIListen:             api.DefaultListen,
		DataDir:               "data/manager",
		QuorumTimeout:         2 * time.Second,
		DispatchTimeout:       5 * time.Second,
		MaxWorkflowRetries:    3,
		Retention:             7 * 24 * time.Hour,
		QueueSoftLimit:        256,
		StateSyncRetries:      3,
		StateSyncBackoff:      250 * time.Millisecond,
		StateSyncTimeout:      5 * time.Second,
		StateSyncGrace:        10 * time.Second,
		WorkerFenceAfter:      DefaultWorkerFenceAfter,
		HeartbeatInterval:     500 * time.Millisecond,
		MaxParallelPlacements: 16,
		GateReportInterval:    500 * time.Millisecond,
	}
}

// Validate reports every problem at once, each naming its field.
func (c Config) Validate() error { return c.validate(false, false) }

// validate is Validate knowing which collaborators are injected: an injected
// transport or membership makes the matching listen address irrelevant.
func (c Config) validate(haveTransport, haveMembership bool) error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.ID == "" {
		add("ID: must not be empty")
	} else if len(c.ID) > 64 || strings.ContainsAny(c.ID, " \t\n/=,") {
		add("ID: %q must be at most 64 characters without spaces, '/', '=' or ','", c.ID)
	}
	if c.Datacenter == "" {
		add("Datacenter: must not be empty")
	}
	if !haveTransport {
		if _, _, err := net.SplitHostPort(c.QUICListen); err != nil {
			add("QUICListen: %q is not host:port: %v", c.QUICListen, err)
		}
	}
	if !haveMembership {
		if _, _, err := net.SplitHostPort(c.SwimBind); err != nil {
			add("SwimBind: %q is not host:port: %v", c.SwimBind, err)
		}
		if _, err := swim.ProfileTiming(c.SwimProfile); err != nil {
			add("SwimProfile: %v", err)
		}
	}
	if _, err := leadership.ProfileByName(c.ElectionProfile); err != nil {
		add("ElectionProfile: %v", err)
	}
	if c.GateSwimBind != "" {
		if _, _, err := net.SplitHostPort(c.GateSwimBind); err != nil {
			add("GateSwimBind: %q is not host:port: %v", c.GateSwimBind, err)
		}
		if _, err := swim.ProfileTiming(c.GateSwimProfile); err != nil {
			add("GateSwimProfile: %v", err)
		}
		if c.GateReportInterval <= 0 {
			add("GateReportInterval: must be positive, got %s", c.GateReportInterval)
		}
	}
	if err := leadership.CheckMembers(c.ID, "manager", c.Peers); err != nil {
		errs = append(errs, err)
	}
	if c.APIListen != "" {
		if _, _, err := net.SplitHostPort(c.APIListen); err != nil {
			add("APIListen: %q is not host:port: %v", c.APIListen, err)
		}
	}
	if c.APIAdvertise != "" {
		if u, err := url.Parse(c.APIAdvertise); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("APIAdvertise: %q is not an http(s) URL", c.APIAdvertise)
		}
	}
	if c.DataDir == "" {
		add("DataDir: must not be empty")
	}
	positive := []struct {
		name string
		d    time.Duration
	}{
		{"QuorumTimeout", c.QuorumTimeout},
		{"DispatchTimeout", c.DispatchTimeout},
		{"Retention", c.Retention},
		{"StateSyncBackoff", c.StateSyncBackoff},
		{"StateSyncTimeout", c.StateSyncTimeout},
		{"StateSyncGrace", c.StateSyncGrace},
		{"WorkerFenceAfter", c.WorkerFenceAfter},
		{"HeartbeatInterval", c.HeartbeatInterval},
	}
	for _, p := range positive {
		if p.d <= 0 {
			add("%s: must be positive, got %s", p.name, p.d)
		}
	}
	if c.MaxWorkflowRetries < 0 {
		add("MaxWorkflowRetries: must not be negative, got %d", c.MaxWorkflowRetries)
	}
	if c.QueueSoftLimit < 1 {
		add("QueueSoftLimit: must be at least 1, got %d", c.QueueSoftLimit)
	}
	if c.StateSyncRetries < 0 {
		add("StateSyncRetries: must not be negative, got %d", c.StateSyncRetries)
	}
	if c.MaxParallelPlacements < 1 {
		add("MaxParallelPlacements: must be at least 1, got %d", c.MaxParallelPlacements)
	}
	return errors.Join(errs...)
}

// DefaultWorkerFenceAfter is the workers' default fence_after (10 s) plus a
// margin for a final acknowledgement in flight and the time a worker takes
// to stop its runs.
const DefaultWorkerFenceAfter = 12 * time.Second
