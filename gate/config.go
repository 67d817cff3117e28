package gate

import (
	"tempest/internal/overload"
	"time"

	"tempest/api"
	"tempest/internal/nodeconfig"
	"tempest/swim"
)

// Config configures a Gate. The YAML tags are the config file's keys; the
// node's common ones (id, addresses, SWIM, election, peers, API, data_dir)
// are nodeconfig.Server's. SwimBind is the gates' SWIM cluster, which every
// datacenter's managers join too (their gate_swim_bind); clients use gates'
// APIs as their entry point when a deployment has them.
type Config struct {
	nodeconfig.Server `yaml:",inline"`

	// Overload grades this gate's load (scheduler lag, Lifeguard's score);
	// at CRITICAL it refuses new jobs with a retry-after (overload.go).
	Overload overload.Thresholds `yaml:"overload"`

	// LeaseTTL is how long a datacenter's lease on a job lasts without a
	// progress report; when it runs out the datacenter is FAILED for the
	// job. It must outlast a manager failover (election plus state sync).
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// HealthTimeout: a datacenter whose leader has not been heard of for
	// this long is not healthy, and new jobs do not go there.
	HealthTimeout time.Duration `yaml:"health_timeout"`
	// SyncTimeout bounds the state sync a new leader runs before it serves.
	SyncTimeout time.Duration `yaml:"sync_timeout"`
	// SyncPageBytes bounds one state-sync answer: records go in pages of
	// about this size (at least one record each), far below the 10 MiB
	// message cap, since a week of jobs with their histograms and series
	// would not fit in one.
	SyncPageBytes int `yaml:"sync_page_bytes"`
	// TickInterval paces lease expiry checks and dispatch retries.
	TickInterval time.Duration `yaml:"tick_interval"`
}

// DefaultConfig returns options that work for one gate on one machine.
func DefaultConfig() Config {
	c := Config{
		Server:        nodeconfig.DefaultServer("127.0.0.1:7301", "127.0.0.1:7302", api.DefaultListen, "data/gate"),
		LeaseTTL:      15 * time.Second,
		HealthTimeout: 10 * time.Second,
		SyncTimeout:   5 * time.Second,
		SyncPageBytes: 2 << 20,
		TickInterval:  250 * time.Millisecond,
		Overload:      overload.DefaultThresholds(),
	}
	// The gates' cluster spans datacenters: it keeps lan, which rides out
	// seconds of silence, where a datacenter's nodes default to fastlan.
	c.SwimProfile = swim.ProfileLAN
	return c
}

// Validate reports every problem at once, each naming its field.
func (c Config) Validate() error { return c.validate(false) }

// validate is Validate knowing whether the transport is injected. A gate
// learns datacenters from its SWIM cluster, so it runs without one only in
// tests that inject the transport and leave SwimBind empty.
func (c Config) validate(haveTransport bool) error {
	var p nodeconfig.Problems
	c.Server.Check(&p, "gate", nodeconfig.Injected{Transport: haveTransport, Membership: haveTransport && c.SwimBind == ""})
	p.Positive("LeaseTTL", c.LeaseTTL)
	p.Positive("HealthTimeout", c.HealthTimeout)
	p.Positive("SyncTimeout", c.SyncTimeout)
	p.Positive("TickInterval", c.TickInterval)
	if c.SyncPageBytes <= 0 || c.SyncPageBytes > 8<<20 {
		p.Add("SyncPageBytes", "must be between 1 and %d, got %d", 8<<20, c.SyncPageBytes)
	}
	if c.LeaseTTL > 0 && c.TickInterval > 0 && c.LeaseTTL < 4*c.TickInterval {
		p.Add("LeaseTTL", "%s is shorter than four TickIntervals (%s)", c.LeaseTTL, 4*c.TickInterval)
	}
	return p.Err()
}
