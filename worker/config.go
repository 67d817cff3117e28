package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"time"

	"tempest/swim"
	"tempest/workflow"
)

// Config configures a Worker. The YAML tags are the keys of the worker's
// config file; secrets never appear here (the caller builds the Keyring from
// the environment).
type Config struct {
	// ID names the node on the data plane and in SWIM; unique per cluster.
	ID string `yaml:"id"`
	// Datacenter is the datacenter whose managers this worker serves.
	Datacenter string `yaml:"datacenter"`
	// QUICListen is the UDP host:port of the data plane ("127.0.0.1:0" picks
	// a port; the worker tells managers its real address when registering).
	QUICListen string `yaml:"quic_listen"`
	// SwimBind is the IP:port memberlist binds (UDP and TCP). Port 0 picks
	// one; peers learn it when this node joins.
	SwimBind string `yaml:"swim_bind"`
	// SwimProfile is the SWIM timing profile: lan (the default), fastlan,
	// local or test (docs/failure-detection.md).
	SwimProfile string `yaml:"swim_profile"`
	// Join lists SWIM addresses (host:port) of nodes already in the
	// datacenter's cluster, usually the managers' SWIM addresses.
	Join []string `yaml:"join"`
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

	// Logger receives the worker's logs; nil means slog.Default().
	Logger *slog.Logger `yaml:"-"`
}

// DefaultHeartbeatPush is the default Config.HeartbeatPush: half a second,
// so the leader's view of a worker is under a second old at the 99th
// percentile even when a push is late or lost.
const DefaultHeartbeatPush = 500 * time.Millisecond

// DefaultConfig returns settings that run a worker on one machine. ID and
// Managers must still be set.
func DefaultConfig() Config {
	return Config{
		Datacenter:       "dc1",
		QUICListen:       "127.0.0.1:0",
		SwimBind:         "127.0.0.1:0",
		SwimProfile:      swim.ProfileLAN,
		Cores:            runtime.NumCPU(),
		QueueSoftLimit:   256,
		ProgressInterval: 100 * time.Millisecond,
		DegradedCPU:      80,
		DegradedMem:      85,
		CriticalMem:      95,
		DegradedLHM:      4,
		HealthInterval:   time.Second,
		HealthSamples:    3,
		DrainTimeout:     30 * time.Second,
		CallTimeout:      5 * time.Second,
		FenceRetention:   10 * time.Minute,
		FenceAfter:       DefaultFenceAfter,
		HeartbeatPush:    DefaultHeartbeatPush,
	}
}

// Validate reports every problem at once, each naming its field.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}

	if c.ID == "" {
		bad("ID", "required")
	} else if err := workflow.CheckName(c.ID); err != nil {
		bad("ID", "%v", err)
	}
	if c.Datacenter == "" {
		bad("Datacenter", "required")
	}
	if err := checkHostPort(c.QUICListen); err != nil {
		bad("QUICListen", "%v", err)
	}
	if c.MetricsListen != "" {
		if err := checkHostPort(c.MetricsListen); err != nil {
			bad("MetricsListen", "%v", err)
		}
	}
	if _, _, err := splitSwimBind(c.SwimBind); err != nil {
		bad("SwimBind", "%v", err)
	}
	if _, err := swim.ProfileTiming(c.SwimProfile); err != nil {
		bad("SwimProfile", "%v", err)
	}
	for i, a := range c.Join {
		if err := checkHostPort(a); err != nil {
			bad("Join", "entry %d: %v", i, err)
		}
	}
	if len(c.Managers) == 0 {
		bad("Managers", "at least one manager QUIC address is required")
	}
	for i, a := range c.Managers {
		if a == "" {
			bad("Managers", "entry %d is empty", i)
		}
	}
	if c.Cores < 1 || c.Cores > workflow.MaxCores {
		bad("Cores", "must be between 1 and %d, got %d", workflow.MaxCores, c.Cores)
	}
	if c.QueueSoftLimit < 0 {
		bad("QueueSoftLimit", "must not be negative, got %d", c.QueueSoftLimit)
	}
	for _, p := range []struct {
		field    string
		v        float64
		optional bool
	}{
		{"DegradedCPU", c.DegradedCPU, false},
		{"DegradedMem", c.DegradedMem, false},
		{"CriticalMem", c.CriticalMem, true},
		{"CriticalCPU", c.CriticalCPU, true},
	} {
		if (p.v == 0 && !p.optional) || p.v < 0 || p.v > 100 {
			bad(p.field, "must be a percentage in (0, 100], got %g", p.v)
		}
	}
	if c.CriticalMem > 0 && c.CriticalMem < c.DegradedMem {
		bad("CriticalMem", "%g is below DegradedMem %g", c.CriticalMem, c.DegradedMem)
	}
	if c.CriticalCPU > 0 && c.CriticalCPU < c.DegradedCPU {
		bad("CriticalCPU", "%g is below DegradedCPU %g", c.CriticalCPU, c.DegradedCPU)
	}
	if c.DegradedLHM < 0 {
		bad("DegradedLHM", "must not be negative, got %d", c.DegradedLHM)
	}
	if c.HeartbeatPush < 0 {
		bad("HeartbeatPush", "must not be negative (0 turns the push off), got %s", c.HeartbeatPush)
	}
	if c.HealthSamples < 1 {
		bad("HealthSamples", "must be at least 1, got %d", c.HealthSamples)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"ProgressInterval", c.ProgressInterval},
		{"HealthInterval", c.HealthInterval},
		{"DrainTimeout", c.DrainTimeout},
		{"CallTimeout", c.CallTimeout},
		{"FenceRetention", c.FenceRetention},
		{"FenceAfter", c.FenceAfter},
	} {
		if d.v <= 0 {
			bad(d.field, "must be positive, got %s", d.v)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("worker config: %w", errors.Join(errs...))
}

func checkHostPort(addr string) error {
	if addr == "" {
		return errors.New("required (host:port)")
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %q: not a number in 0-65535", port)
	}
	return nil
}

// splitSwimBind splits SwimBind into the IP and port memberlist wants; it
// binds an address, so a host name is refused.
func splitSwimBind(addr string) (string, int, error) {
	if err := checkHostPort(addr); err != nil {
		return "", 0, err
	}
	host, port, _ := net.SplitHostPort(addr)
	if net.ParseIP(host) == nil {
		return "", 0, fmt.Errorf("%q is not an IP address (memberlist binds an IP)", host)
	}
	p, _ := strconv.Atoi(port)
	return host, p, nil
}
