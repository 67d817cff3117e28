// Package nodeconfig is the configuration every Tempest node shares, as
// Nomad and Consul keep one agent config that their servers and clients
// extend: Node (identity, data-plane address, SWIM membership), which the
// worker's config embeds, and Server (Node plus an election group, the
// client API, a data directory and the job timings both keep: quorum,
// dispatch, retention), which the gate's and the manager's embed. The roles embed them with `yaml:",inline"`, so a config file's
// keys are the same as if each role declared the fields itself, and each
// role's validation starts from Check and adds its own fields to the same
// Problems.
package nodeconfig

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"tempest/internal/blobstore"
	"tempest/leadership"
	"tempest/security"
	"tempest/swim"
	"tempest/transport"
)

// Node is what every node is configured with.
type Node struct {
	// ID is the node's id: its SWIM name, transport id and, in a group,
	// election member id. Unique in its cluster.
	ID string `yaml:"id"`
	// QUICListen is the UDP host:port of the data plane.
	QUICListen string `yaml:"quic_listen"`
	// SwimBind is the IP:port memberlist binds (UDP and TCP). Port 0 picks
	// one; peers learn it when this node joins.
	SwimBind string `yaml:"swim_bind"`
	// SwimProfile is the SWIM timing profile: lan, fastlan, local or test
	// (docs/failure-detection.md).
	SwimProfile string `yaml:"swim_profile"`
	// Join lists SWIM addresses (host:port) of nodes already in the
	// cluster.
	Join []string `yaml:"join"`

	// MemoryLimit is the Go runtime's soft memory limit (GOMEMLIMIT) for
	// the process; 0 derives it from the host: 80 % of the cgroup's
	// memory.max, or of the machine's memory when no cgroup limits it. A
	// GOMEMLIMIT environment variable wins over both.
	MemoryLimit Bytes `yaml:"memory_limit"`
	// MetricsJobSeries serves the series labelled with job ids and
	// workflow names on /metrics without a metrics token
	// (TEMPEST_METRICS_TOKEN). Off, a node without a token leaves them
	// out; with a token they are served to whoever holds it.
	MetricsJobSeries bool `yaml:"metrics_job_series"`

	// TransportReplayWindow is how far a message's timestamp may be from
	// this node's clock, and how long its id is remembered so a copy is
	// refused; 0 means 60s. Shorter refuses peers whose clocks drift more;
	// longer remembers more ids (bounded in number either way).
	TransportReplayWindow time.Duration `yaml:"transport_replay_window"`
	// TransportRateLimit and TransportRateBurst bound what each peer may
	// send this node, per message class: a token bucket refilled at
	// TransportRateLimit messages a second holding TransportRateBurst; a
	// message beyond it is refused with a retry-after. 0 keeps the
	// defaults, 20000 a second and a burst of 4000: far above what a
	// healthy peer sends, so they bite only on a runaway or hostile one.
	TransportRateLimit float64 `yaml:"transport_rate_limit"`
	TransportRateBurst int     `yaml:"transport_rate_burst"`

	// Logger receives the node's logs; when nil, a gate or manager
	// discards them and a worker writes to slog.Default().
	Logger *slog.Logger `yaml:"-"`
}

// Server is a node that elects a leader among its configured peers and
// serves the client API: a gate or a manager.
type Server struct {
	Node `yaml:",inline"`

	// ElectionProfile is the election timing profile: lan, local or test.
	ElectionProfile string `yaml:"election_profile"`
	// ElectionPriority ranks this node among equally healthy members of
	// its group: the higher is preferred as leader (0 by default; equal
	// priorities leave the choice to the race). See docs/leadership.md.
	ElectionPriority int `yaml:"election_priority"`
	// Peers lists every configured member of the election group, this node
	// included: the configured list, not the live one, fixes the quorum
	// (len/2+1) and who receives replicated state. Empty means a group of
	// one at QUICListen.
	Peers []leadership.Member `yaml:"peers"`

	// APIListen is the TCP address the API server binds; APIAdvertise is
	// the URL peers hand to clients to reach it, published in SWIM meta
	// Tags["api"]. Empty APIAdvertise is derived from APIListen when that
	// names a concrete host and port.
	APIListen    string `yaml:"api_listen"`
	APIAdvertise string `yaml:"api_advertise"`
	// APIRateLimit is the requests per second each client IP may make on
	// average, APIRateBurst how many at once; 0 keeps the API's defaults
	// (50 and 100). A CI fleet submitting through one NAT address, or a
	// benchmark, needs more.
	APIRateLimit float64 `yaml:"api_rate_limit"`
	APIRateBurst int     `yaml:"api_rate_burst"`
	// APIInsecureHTTP lets the API serve plain HTTP on an address other
	// than loopback. Without it such a node refuses to start unless the
	// API has TLS (api_tls_cert, api_tls_key): bearer tokens would cross
	// the network in clear.
	APIInsecureHTTP bool `yaml:"api_insecure_http"`
	// APIMaxParsing is how many job bodies the API reads and parses at
	// once; more wait their turn. Parsing a job file costs tens of times
	// its size in memory, so this, times the largest body, bounds what
	// submissions can take. 0 keeps the default (DefaultAPIMaxParsing).
	APIMaxParsing int `yaml:"api_max_parsing"`

	// MaxJobBytes caps a job's stored size (its encoded submission);
	// a larger one is refused at submit. 0 keeps DefaultMaxJobBytes.
	MaxJobBytes Bytes `yaml:"max_job_bytes"`
	// BlobMinFree is the free space blob uploads must leave on the data
	// dir's filesystem, so the node's databases always have room; 0 keeps
	// the smaller of 1 GiB and 5 % of the filesystem.
	BlobMinFree Bytes `yaml:"blob_min_free"`
	// BlobMaxUnfinished bounds the bytes of uploads not yet committed,
	// BlobMaxUnreferenced the bytes of stored blobs no kept job names;
	// 0 keeps 16 GiB and 64 GiB.
	BlobMaxUnfinished   Bytes `yaml:"blob_max_unfinished"`
	BlobMaxUnreferenced Bytes `yaml:"blob_max_unreferenced"`

	// DataDir holds the node's election state and its stores.
	DataDir string `yaml:"data_dir"`

	// QuorumTimeout bounds the wait for a majority of the group to store a
	// change (a new job; on managers also placements and their commits).
	QuorumTimeout time.Duration `yaml:"quorum_timeout"`
	// DispatchTimeout bounds one attempt to hand work to the tier below: a
	// gate's job to a datacenter, a manager's workflow to a worker.
	DispatchTimeout time.Duration `yaml:"dispatch_timeout"`
	// Retention keeps finished jobs queryable this long.
	Retention time.Duration `yaml:"retention"`
}

// DefaultAPIMaxParsing is how many job bodies the API parses at once when
// the config does not say: a few, so submissions from many clients go
// through in turn while one process's memory stays bounded.
const DefaultAPIMaxParsing = 4

// DefaultMaxJobBytes caps a job's stored size when the config does not say:
// sixteen times the largest job file, room for data carried in the params,
// while a submission that would be copied per task stays out.
const DefaultMaxJobBytes = 16 << 20

// MaxJobBytesOr is the configured cap on a job's stored size, or the
// default.
func (s Server) MaxJobBytesOr() int64 {
	if s.MaxJobBytes > 0 {
		return int64(s.MaxJobBytes)
	}
	return DefaultMaxJobBytes
}

// DefaultNode is a node on one machine at the given addresses, in a
// datacenter's SWIM cluster (the fastlan profile; gates, whose cluster
// spans datacenters, set lan).
func DefaultNode(quicListen, swimBind string) Node {
	return Node{QUICListen: quicListen, SwimBind: swimBind, SwimProfile: swim.ProfileFastLAN}
}

// DefaultServer is a server of a group of one on one machine.
func DefaultServer(quicListen, swimBind, apiListen, dataDir string) Server {
	return Server{
		Node:            DefaultNode(quicListen, swimBind),
		ElectionProfile: "lan",
		APIListen:       apiListen,
		DataDir:         dataDir,
		QuorumTimeout:   2 * time.Second,
		DispatchTimeout: 5 * time.Second,
		Retention:       7 * 24 * time.Hour,
	}
}

// Injected says which of a node's collaborators its caller supplies (tests
// do): an injected transport makes QUICListen irrelevant, injected
// membership SwimBind and SwimProfile.
type Injected struct {
	Transport, Membership bool
}

// Check adds the node's problems to p.
func (n Node) Check(p *Problems, inj Injected) {
	if err := CheckID(n.ID); err != nil {
		p.Add("ID", "%v", err)
	}
	if !inj.Transport {
		p.HostPort("QUICListen", n.QUICListen)
	}
	if !inj.Membership {
		if _, _, err := BindAddr(n.SwimBind); err != nil {
			p.Add("SwimBind", "%v", err)
		}
		if _, err := swim.ProfileTiming(n.SwimProfile); err != nil {
			p.Add("SwimProfile", "%v", err)
		}
	}
	for i, a := range n.Join {
		if err := checkHostPort(a); err != nil {
			p.Add("Join", "entry %d: %v", i, err)
		}
	}
	if n.MemoryLimit < 0 {
		p.Add("MemoryLimit", "must be 0 (derived from the host) or more, got %d", n.MemoryLimit)
	}
	if w := n.TransportReplayWindow; w != 0 && w < time.Second {
		// Below a second, ordinary clock skew between hosts refuses
		// honest messages as stale.
		p.Add("TransportReplayWindow", "must be 0 (60s) or at least 1s, got %s", w)
	}
	if r := n.TransportRateLimit; r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		p.Add("TransportRateLimit", "must be a finite number, 0 or more (0 keeps the default), got %v", r)
	}
	p.AtLeast("TransportRateBurst", n.TransportRateBurst, 0)
}

// Check adds the server's problems to p; role ("gate", "manager") names
// this node in the peers check.
func (s Server) Check(p *Problems, role string, inj Injected) {
	s.Node.Check(p, inj)
	if _, err := leadership.ProfileByName(s.ElectionProfile); err != nil {
		p.Add("ElectionProfile", "%v", err)
	}
	if err := leadership.CheckMembers(s.ID, role, s.Peers); err != nil {
		p.errs = append(p.errs, err) // each line already names Peers
	}
	if s.APIListen != "" {
		p.HostPort("APIListen", s.APIListen)
	}
	if s.APIAdvertise != "" {
		if u, err := url.Parse(s.APIAdvertise); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.Add("APIAdvertise", "%q is not an http(s) URL", s.APIAdvertise)
		}
	}
	if s.DataDir == "" {
		p.Add("DataDir", "must not be empty")
	}
	if s.APIRateLimit < 0 || math.IsNaN(s.APIRateLimit) || math.IsInf(s.APIRateLimit, 0) {
		p.Add("APIRateLimit", "must be a finite number, 0 or more (0 keeps the default), got %v", s.APIRateLimit)
	}
	p.AtLeast("APIRateBurst", s.APIRateBurst, 0)
	p.AtLeast("APIMaxParsing", s.APIMaxParsing, 0)
	for _, f := range []struct {
		name string
		v    Bytes
	}{{"MaxJobBytes", s.MaxJobBytes}, {"BlobMinFree", s.BlobMinFree}, {"BlobMaxUnfinished", s.BlobMaxUnfinished}, {"BlobMaxUnreferenced", s.BlobMaxUnreferenced}} {
		if f.v < 0 {
			p.Add(f.name, "must be 0 or more, got %d", f.v)
		}
	}
	p.Positive("QuorumTimeout", s.QuorumTimeout)
	p.Positive("DispatchTimeout", s.DispatchTimeout)
	p.Positive("Retention", s.Retention)
}

// AdoptTransport prepares s for a transport its caller injects (tests,
// tools): with no peers configured the group is this node alone at the
// transport's address, and the transport must speak for ID. nil adopts
// nothing.
func (s *Server) AdoptTransport(tr transport.Transport) error {
	if tr == nil {
		return nil
	}
	if len(s.Peers) == 0 {
		s.Peers = []leadership.Member{{ID: s.ID, QUIC: tr.Addr()}}
	}
	if tr.LocalID() != s.ID {
		return fmt.Errorf("Deps.Transport: local id %q is not ID %q", tr.LocalID(), s.ID)
	}
	return nil
}

// ElectionProfileOr is the election timing s names, or override when the
// caller supplies one.
func (s Server) ElectionProfileOr(override *leadership.Profile) (leadership.Profile, error) {
	if override != nil {
		return *override, nil
	}
	return leadership.ProfileByName(s.ElectionProfile)
}

// TransportConfig is the node's QUIC transport, over
// transport.DefaultConfig: its id and listen address.
func (n Node) TransportConfig(keyring *security.Keyring, logger *slog.Logger) transport.Config {
	c := transport.DefaultConfig()
	c.NodeID, c.ListenAddr, c.Keyring, c.Logger = n.ID, n.QUICListen, keyring, logger
	if n.TransportReplayWindow > 0 {
		c.Replay.Window = n.TransportReplayWindow
	}
	if n.TransportRateLimit > 0 || n.TransportRateBurst > 0 {
		for i := range c.RateLimit.Limits {
			l := &c.RateLimit.Limits[i]
			if n.TransportRateLimit > 0 {
				l.PerSecond = n.TransportRateLimit
			}
			if n.TransportRateBurst > 0 {
				l.Burst = n.TransportRateBurst
			}
		}
	}
	return c
}

// SwimConfig is the node's SWIM membership, over swim.DefaultConfig: its
// name, the address to bind (SwimBind, or another cluster's such as a
// manager's GateSwimBind), its timing profile and the gossip keys derived
// from keyring (none when nil). The role adds its metadata, embedder and
// events.
func (n Node) SwimConfig(bind string, keyring *security.Keyring, logger *slog.Logger) (swim.Config, error) {
	host, port, err := BindAddr(bind)
	if err != nil {
		return swim.Config{}, err
	}
	c := swim.DefaultConfig()
	c.NodeName, c.BindAddr, c.BindPort, c.Profile, c.Logger = n.ID, host, port, n.SwimProfile, logger
	if keyring != nil {
		c.Keys = keyring.MemberlistKeys()
	}
	return c, nil
}

// CheckID checks a node id: ids go into SWIM names, the --peers flag's
// id=addr lists and log lines, so they are short and hold no separators.
func CheckID(id string) error {
	if id == "" {
		return errors.New("must not be empty")
	}
	if len(id) > 64 || strings.ContainsAny(id, " \t\n/=,") {
		return fmt.Errorf("%q must be at most 64 characters without spaces, '/', '=' or ','", id)
	}
	return nil
}

// BindAddr splits a SWIM bind address into the IP and port memberlist
// wants; it binds an address, so a host name is refused.
func BindAddr(addr string) (string, int, error) {
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

func checkHostPort(addr string) error {
	if addr == "" {
		return errors.New("must not be empty (host:port)")
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%q: port %q is not a number in 0-65535", addr, port)
	}
	return nil
}

// Problems collects a config's problems, each naming its field, so a
// config is refused with all of them at once.
type Problems struct {
	errs []error
}

// Add records a problem with field.
func (p *Problems) Add(field, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

// HostPort records a problem unless addr is host:port with a numeric port.
func (p *Problems) HostPort(field, addr string) {
	if err := checkHostPort(addr); err != nil {
		p.Add(field, "%v", err)
	}
}

// Positive records a problem unless d is above zero.
func (p *Problems) Positive(field string, d time.Duration) {
	if d <= 0 {
		p.Add(field, "must be positive, got %s", d)
	}
}

// AtLeast records a problem unless n is at least least.
func (p *Problems) AtLeast(field string, n, least int) {
	if n < least {
		if least == 0 {
			p.Add(field, "must not be negative, got %d", n)
			return
		}
		p.Add(field, "must be at least %d, got %d", least, n)
	}
}

// Err is every problem joined, nil when there are none.
func (p *Problems) Err() error { return errors.Join(p.errs...) }

// Bytes is a size in a config file: a plain number of bytes, or one with a
// unit ("512MiB", "1 GiB", "10 GB"; binary and decimal units as written).
type Bytes int64

// UnmarshalText implements encoding.TextUnmarshaler, which the YAML decoder
// uses for the config's scalars.
func (b *Bytes) UnmarshalText(text []byte) error {
	n, err := humanize.ParseBytes(strings.TrimSpace(string(text)))
	if err != nil {
		return fmt.Errorf("size %q: want bytes, or a number with a unit such as 512MiB or 2GiB", text)
	}
	if n > math.MaxInt64 {
		return fmt.Errorf("size %q is too large", text)
	}
	*b = Bytes(n)
	return nil
}

// MarshalText implements encoding.TextMarshaler: the exact byte count.
func (b Bytes) MarshalText() ([]byte, error) { return []byte(strconv.FormatInt(int64(b), 10)), nil }

// String is the size in binary units.
func (b Bytes) String() string { return humanize.IBytes(uint64(max(b, 0))) }

// BlobLimits is what the server's blob store may take of its disk;
// referenced names the blobs its kept jobs use.
func (s Server) BlobLimits(referenced func() map[blobstore.Sum]bool) blobstore.Limits {
	return blobstore.Limits{
		MinFree:         int64(s.BlobMinFree),
		MaxUnfinished:   int64(s.BlobMaxUnfinished),
		MaxUnreferenced: int64(s.BlobMaxUnreferenced),
		Referenced:      referenced,
	}
}
