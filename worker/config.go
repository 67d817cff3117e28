package worker

import (
	"fmt"
	"path/filepath"
	"runtime"
	"time"

	"tempest/internal/nodeconfig"
	"tempest/rainstorm"
	"tempest/workflow"
)

// Config configures a Worker. The YAML tags are the keys of the worker's
// config file; secrets never appear here (the caller builds the Keyring from
// the environment).
type Config struct {
	// Node: the worker's id (unique per cluster), its data plane's
	// QUICListen ("127.0.0.1:0" picks a port; the worker tells managers its
	// real address when registering), SwimBind, SwimProfile, Join (usually
	// the managers' SWIM addresses) and Logger (nil means slog.Default()).
	nodeconfig.Node `yaml:",inline"`
	// Datacenter is the datacenter whose managers this worker serves.
	Datacenter string `yaml:"datacenter"`
	// Managers lists the managers' QUIC addresses. The worker registers with
	// them in order until one accepts, and follows it to the leader.
	Managers []string `yaml:"managers"`

	// Cores is how many cores this worker offers. Default runtime.NumCPU().
	Cores int `yaml:"cores"`
	// QueueSoftLimit marks the worker DEGRADED once this many workflows are
	// on it (running, or finished with their final progress not yet
	// acknowledged). 0 means no limit.
	QueueSoftLimit int `yaml:"queue_soft_limit"`
	// ProgressInterval is the least time between two progress messages of
	// one workflow (the final one is sent at once).
	ProgressInterval time.Duration `yaml:"progress_interval"`

	// DegradedCPU and DegradedMem are the host CPU and memory percentages at
	// or above which the worker reports DEGRADED: managers still use it,
	// ranked lower.
	DegradedCPU float64 `yaml:"degraded_cpu"`
	DegradedMem float64 `yaml:"degraded_mem"`
	// CriticalMem is the memory percentage at which the worker stops taking
	// work (DRAINING) until pressure falls: past it, the next workflow risks
	// the OOM killer taking down everything already running. 0 disables.
	CriticalMem float64 `yaml:"critical_mem"`
	// CriticalCPU does the same for CPU. Off (0) by default: a load
	// generator saturating the cores it was given is doing its job, and
	// refusing work then would only idle the rest of the worker.
	CriticalCPU float64 `yaml:"critical_cpu"`
	// DegradedLHM is the Lifeguard local health score at or above which the
	// worker reports DEGRADED: it is missing probes, so it is likely the
	// slow node. 0 disables.
	DegradedLHM int `yaml:"degraded_lhm"`
	// DegradedLag and CriticalLag are the scheduler lags (how late the
	// worker's own timers wake, worst over the last few seconds) at which it
	// reports DEGRADED, and DRAINING (no new work) until it recovers. Lag
	// shows what CPU percentages cannot: a host that starves this process
	// (a noisy neighbour, a cgroup throttle, a SIGSTOP). 0 disables either.
	DegradedLag time.Duration `yaml:"degraded_lag"`
	CriticalLag time.Duration `yaml:"critical_lag"`
	// HealthInterval is how often CPU and memory are sampled.
	HealthInterval time.Duration `yaml:"health_interval"`
	// HealthSamples is how many consecutive samples must agree before the
	// health state changes, so one busy second does not flap the state.
	HealthSamples int `yaml:"health_samples"`

	// DrainTimeout bounds how long a drain waits for running workflows
	// before stopping them, and again for their final progress to be
	// acknowledged.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// CallTimeout bounds one request to a manager.
	CallTimeout time.Duration `yaml:"call_timeout"`
	// FenceRetention is how long a finished workflow's fence token is kept,
	// so a delayed or repeated dispatch of it is still refused as stale.
	FenceRetention time.Duration `yaml:"fence_retention"`
	// FenceAfter is the lease period of self-fencing: a worker running
	// workflows that no manager leader has answered for this long stops
	// them (and says so in its log), since it may be cut off while a leader
	// elsewhere re-runs them. Managers wait at least this long after last
	// hearing from a lost worker before re-dispatching its workflows
	// (manager worker_fence_after, which must not be shorter).
	FenceAfter time.Duration `yaml:"fence_after"`

	// MetricsListen, when set, is the TCP host:port where the worker binary
	// serves Prometheus /metrics (RegisterMetrics). Empty (the default)
	// serves nothing: a worker has no API, and the port would be one more
	// thing to firewall on a load generator; set it to scrape workers.
	MetricsListen string `yaml:"metrics_listen"`
	// HeartbeatPush is how often the worker sends its heartbeat to the
	// manager leader over QUIC (and sooner when its free cores or state
	// change), so the leader's view of every worker stays within about
	// this of the truth however many workers there are. SWIM acks carry the
	// heartbeat too, to every manager, but reach a given manager only when
	// its probe picks this worker. 0 leaves SWIM acks the only channel.
	HeartbeatPush time.Duration `yaml:"heartbeat_push"`

	// Exec is what RainStorm exec stages may run here: off unless
	// enabled, and then only the listed programs, confined (rainstorm.ExecPolicy,
	// docs/security.md "Job confinement").
	Exec rainstorm.ExecPolicy `yaml:"exec"`
	// SourceDirs are the directories a RainStorm `path:` source may read
	// under; none by default, so a job reads no file of the worker's.
	SourceDirs []string `yaml:"source_dirs"`
}

// DefaultHeartbeatPush is the default Config.HeartbeatPush: half a second,
// so the leader's view of a worker is under a second old at the 99th
// percentile even when a push is late or lost.
const DefaultHeartbeatPush = 500 * time.Millisecond

// DefaultConfig returns settings that run a worker on one machine. ID and
// Managers must still be set.
func DefaultConfig() Config {
	return Config{
		Node:             nodeconfig.DefaultNode("127.0.0.1:0", "127.0.0.1:0"),
		Datacenter:       "dc1",
		Cores:            runtime.NumCPU(),
		QueueSoftLimit:   256,
		ProgressInterval: 100 * time.Millisecond,
		DegradedCPU:      80,
		DegradedMem:      85,
		CriticalMem:      95,
		DegradedLHM:      4,
		DegradedLag:      time.Second,
		CriticalLag:      5 * time.Second,
		HealthInterval:   time.Second,
		HealthSamples:    3,
		DrainTimeout:     30 * time.Second,
		CallTimeout:      5 * time.Second,
		FenceRetention:   10 * time.Minute,
		FenceAfter:       DefaultFenceAfter,
		HeartbeatPush:    DefaultHeartbeatPush,
		Exec:             rainstorm.DefaultExecPolicy(),
	}
}

// Validate reports every problem at once, each naming its field.
func (c Config) Validate() error {
	var p nodeconfig.Problems
	c.Node.Check(&p, nodeconfig.Injected{})
	if c.Datacenter == "" {
		p.Add("Datacenter", "must not be empty")
	}
	if c.MetricsListen != "" {
		p.HostPort("MetricsListen", c.MetricsListen)
	}
	if len(c.Managers) == 0 {
		p.Add("Managers", "at least one manager QUIC address is required")
	}
	for i, a := range c.Managers {
		if a == "" {
			p.Add("Managers", "entry %d is empty", i)
		}
	}
	if c.Cores < 1 || c.Cores > workflow.MaxCores {
		p.Add("Cores", "must be between 1 and %d, got %d", workflow.MaxCores, c.Cores)
	}
	p.AtLeast("QueueSoftLimit", c.QueueSoftLimit, 0)
	for _, pc := range []struct {
		field    string
		v        float64
		optional bool
	}{
		{"DegradedCPU", c.DegradedCPU, false},
		{"DegradedMem", c.DegradedMem, false},
		{"CriticalMem", c.CriticalMem, true},
		{"CriticalCPU", c.CriticalCPU, true},
	} {
		if (pc.v == 0 && !pc.optional) || pc.v < 0 || pc.v > 100 {
			p.Add(pc.field, "must be a percentage in (0, 100], got %g", pc.v)
		}
	}
	if c.CriticalMem > 0 && c.CriticalMem < c.DegradedMem {
		p.Add("CriticalMem", "%g is below DegradedMem %g", c.CriticalMem, c.DegradedMem)
	}
	if c.CriticalCPU > 0 && c.CriticalCPU < c.DegradedCPU {
		p.Add("CriticalCPU", "%g is below DegradedCPU %g", c.CriticalCPU, c.DegradedCPU)
	}
	p.AtLeast("DegradedLHM", c.DegradedLHM, 0)
	if c.HeartbeatPush < 0 {
		p.Add("HeartbeatPush", "must not be negative (0 turns the push off), got %s", c.HeartbeatPush)
	}
	p.AtLeast("HealthSamples", c.HealthSamples, 1)
	p.Positive("ProgressInterval", c.ProgressInterval)
	p.Positive("HealthInterval", c.HealthInterval)
	p.Positive("DrainTimeout", c.DrainTimeout)
	p.Positive("CallTimeout", c.CallTimeout)
	p.Positive("FenceRetention", c.FenceRetention)
	p.Positive("FenceAfter", c.FenceAfter)
	for _, msg := range c.Exec.Check() {
		p.Add("Exec", "%s", msg)
	}
	for _, d := range c.SourceDirs {
		if !filepath.IsAbs(d) {
			p.Add("SourceDirs", "%q must be an absolute path", d)
		}
	}
	if err := p.Err(); err != nil {
		return fmt.Errorf("worker config: %w", err)
	}
	return nil
}
