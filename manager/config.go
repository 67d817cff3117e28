package manager

import (
	"tempest/internal/overload"
	"time"

	"tempest/api"
	"tempest/internal/nodeconfig"
	"tempest/swim"
)

// Config configures a Manager. The YAML tags are the config file's keys; the
// node's common ones (id, addresses, SWIM, election, peers, API, data_dir)
// are nodeconfig.Server's. QUICListen is the data plane (workers, peers) and
// SwimBind the datacenter's SWIM cluster.
type Config struct {
	nodeconfig.Server `yaml:",inline"`

	Datacenter string `yaml:"datacenter"`

	// Overload grades this manager's load (scheduler lag, Lifeguard's
	// health score) into levels: at HIGH a leader hands over to a less
	// degraded peer, at CRITICAL it refuses new jobs (overload.go).
	Overload overload.Thresholds `yaml:"overload"`

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

	// MaxWorkflowRetries is how many times a failed workflow is retried on
	// another worker before it is FAILED.
	MaxWorkflowRetries int `yaml:"max_workflow_retries"`
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
	// MaxQueuedJobs bounds the jobs waiting for capacity (SUBMITTED or
	// QUEUED: none of their workflows placed yet); a submission beyond it
	// is refused, "capacity exceeded", with a retry-after, before anything
	// is stored. 0 leaves the queue unbounded.
	MaxQueuedJobs int `yaml:"max_queued_jobs"`
}

// DefaultConfig returns settings that work for a single manager on one
// machine. ID must still be set (the command derives one from the host
// name).
func DefaultConfig() Config {
	return Config{
		Server:                nodeconfig.DefaultServer("127.0.0.1:7401", "127.0.0.1:7402", api.DefaultListen, "data/manager"),
		Datacenter:            "dc1",
		GateSwimProfile:       swim.ProfileLAN,
		MaxWorkflowRetries:    3,
		QueueSoftLimit:        256,
		StateSyncRetries:      3,
		StateSyncBackoff:      250 * time.Millisecond,
		StateSyncTimeout:      5 * time.Second,
		StateSyncGrace:        10 * time.Second,
		WorkerFenceAfter:      DefaultWorkerFenceAfter,
		HeartbeatInterval:     500 * time.Millisecond,
		MaxParallelPlacements: 16,
		GateReportInterval:    500 * time.Millisecond,
		MaxQueuedJobs:         1000,
		Overload:              overload.DefaultThresholds(),
	}
}

// Validate reports every problem at once, each naming its field.
func (c Config) Validate() error { return c.validate(false, false) }

// validate is Validate knowing which collaborators are injected: an injected
// transport or membership makes the matching listen address irrelevant.
func (c Config) validate(haveTransport, haveMembership bool) error {
	var p nodeconfig.Problems
	c.Server.Check(&p, "manager", nodeconfig.Injected{Transport: haveTransport, Membership: haveMembership})
	if c.Datacenter == "" {
		p.Add("Datacenter", "must not be empty")
	}
	if c.GateSwimBind != "" {
		if _, _, err := nodeconfig.BindAddr(c.GateSwimBind); err != nil {
			p.Add("GateSwimBind", "%v", err)
		}
		if _, err := swim.ProfileTiming(c.GateSwimProfile); err != nil {
			p.Add("GateSwimProfile", "%v", err)
		}
		p.Positive("GateReportInterval", c.GateReportInterval)
	}
	p.Positive("StateSyncBackoff", c.StateSyncBackoff)
	p.Positive("StateSyncTimeout", c.StateSyncTimeout)
	p.Positive("StateSyncGrace", c.StateSyncGrace)
	p.Positive("WorkerFenceAfter", c.WorkerFenceAfter)
	p.Positive("HeartbeatInterval", c.HeartbeatInterval)
	p.AtLeast("MaxWorkflowRetries", c.MaxWorkflowRetries, 0)
	p.AtLeast("QueueSoftLimit", c.QueueSoftLimit, 1)
	p.AtLeast("StateSyncRetries", c.StateSyncRetries, 0)
	p.AtLeast("MaxParallelPlacements", c.MaxParallelPlacements, 1)
	p.AtLeast("MaxQueuedJobs", c.MaxQueuedJobs, 0)
	return p.Err()
}

// DefaultWorkerFenceAfter is the workers' default fence_after (10 s) plus a
// margin for a final acknowledgement in flight and the time a worker takes
// to stop its runs.
const DefaultWorkerFenceAfter = 12 * time.Second
