package gate

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"tempest/api"
	"tempest/leadership"
	"tempest/swim"
)

// Peer is one configured gate, this one included. The configured list fixes
// the election quorum and who receives replicated job records.
type Peer = leadership.Member

// Config configures a Gate. The YAML tags are the config file's keys.
type Config struct {
	// ID is this gate's node id: its SWIM name, transport id and election
	// member id. It must appear in Peers.
	ID string `yaml:"id"`

	// QUICListen is the UDP address gates and managers reach this gate on.
	QUICListen string `yaml:"quic_listen"`
	// SwimBind is the host:port of the gates' SWIM cluster, which every
	// datacenter's managers join too (their gate_swim_bind).
	SwimBind        string   `yaml:"swim_bind"`
	SwimProfile     string   `yaml:"swim_profile"`
	ElectionProfile string   `yaml:"election_profile"`
	Join            []string `yaml:"join"`
	// Peers lists every configured gate, this one included. Empty means a
	// cluster of one at QUICListen.
	Peers []Peer `yaml:"peers"`

	// APIListen and APIAdvertise: as for managers. Clients use gates as
	// their entry point when a deployment has them.
	APIListen    string `yaml:"api_listen"`
	APIAdvertise string `yaml:"api_advertise"`

	DataDir string `yaml:"data_dir"`

	// LeaseTTL is how long a datacenter's lease on a job lasts without a
	// progress report; when it runs out the datacenter is FAILED for the
	// job. It must outlast a manager failover (election plus state sync).
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// QuorumTimeout bounds replication of a new job to the other gates.
	QuorumTimeout time.Duration `yaml:"quorum_timeout"`
	// DispatchTimeout bounds one attempt to hand a job to a datacenter.
	DispatchTimeout time.Duration `yaml:"dispatch_timeout"`
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
	// Retention keeps finished jobs queryable this long.
	Retention time.Duration `yaml:"retention"`

	Logger *slog.Logger `yaml:"-"`
}

// DefaultConfig returns options that work for one gate on one machine.
func DefaultConfig() Config {
	return Config{
		QUICListen:      "127.0.0.1:7301",
		SwimBind:        "127.0.0.1:7302",
		SwimProfile:     swim.ProfileLAN,
		ElectionProfile: "lan",
		APIListen:       api.DefaultListen,
		DataDir:         "data/gate",
		LeaseTTL:        15 * time.Second,
		QuorumTimeout:   2 * time.Second,
		DispatchTimeout: 5 * time.Second,
		HealthTimeout:   10 * time.Second,
		SyncTimeout:     5 * time.Second,
		SyncPageBytes:   2 << 20,
		TickInterval:    250 * time.Millisecond,
		Retention:       7 * 24 * time.Hour,
	}
}

// Validate reports every problem at once, each naming its field.
func (c Config) Validate() error { return c.validate(false) }

func (c Config) validate(haveTransport bool) error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.ID == "" {
		add("ID: must not be empty")
	} else if len(c.ID) > 64 || strings.ContainsAny(c.ID, " \t\n/=,") {
		add("ID: %q must be at most 64 characters without spaces, '/', '=' or ','", c.ID)
	}
	if !haveTransport {
		if _, _, err := net.SplitHostPort(c.QUICListen); err != nil {
			add("QUICListen: %q is not host:port: %v", c.QUICListen, err)
		}
	}
	if c.SwimBind != "" {
		if _, _, err := net.SplitHostPort(c.SwimBind); err != nil {
			add("SwimBind: %q is not host:port: %v", c.SwimBind, err)
		}
		if _, err := swim.ProfileTiming(c.SwimProfile); err != nil {
			add("SwimProfile: %v", err)
		}
	} else if !haveTransport {
		add("SwimBind: must not be empty: gates learn datacenters from the SWIM cluster")
	}
	if _, err := leadership.ProfileByName(c.ElectionProfile); err != nil {
		add("ElectionProfile: %v", err)
	}
	if err := leadership.CheckMembers(c.ID, "gate", c.Peers); err != nil {
		errs = append(errs, err)
	}
	if c.DataDir == "" {
		add("DataDir: must not be empty")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"LeaseTTL", c.LeaseTTL}, {"QuorumTimeout", c.QuorumTimeout}, {"DispatchTimeout", c.DispatchTimeout},
		{"HealthTimeout", c.HealthTimeout}, {"SyncTimeout", c.SyncTimeout}, {"TickInterval", c.TickInterval},
		{"Retention", c.Retention},
	} {
		if d.v <= 0 {
			add("%s: must be positive, got %s", d.name, d.v)
		}
	}
	if c.SyncPageBytes <= 0 || c.SyncPageBytes > 8<<20 {
		add("SyncPageBytes: must be between 1 and %d, got %d", 8<<20, c.SyncPageBytes)
	}
	if c.LeaseTTL > 0 && c.TickInterval > 0 && c.LeaseTTL < 4*c.TickInterval {
		add("LeaseTTL: %s is shorter than four TickIntervals (%s)", c.LeaseTTL, 4*c.TickInterval)
	}
	return errors.Join(errs...)
}
