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
