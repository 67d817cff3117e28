package nodeconfig

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"tempest/internal/testutil"
	"tempest/leadership"
	"tempest/security"
	"tempest/security/securitytest"
	"tempest/swim"
	"tempest/transport"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

func TestDefaultServerNeedsOnlyID(t *testing.T) {
	s := DefaultServer("127.0.0.1:7301", "127.0.0.1:7302", "127.0.0.1:7411", "data/x")
	if s.SwimProfile != swim.ProfileFastLAN {
		t.Errorf("default swim profile %q, want fastlan (a datacenter's LAN)", s.SwimProfile)
	}
	s.ID = "x1"
	var p Problems
	s.Check(&p, "gate", Injected{})
	if err := p.Err(); err != nil {
		t.Fatalf("defaults plus an id: %v", err)
	}
}

// Every broken field is reported at once, each naming its field.
func TestCheckNamesEveryField(t *testing.T) {
	s := Server{
		Node: Node{
			ID:          "has space",
			QUICListen:  "nohostport",
			SwimBind:    "localhost:7946", // memberlist binds an IP
			SwimProfile: "warp",
			Join:        []string{"a:1", "b"},
		},
		ElectionProfile: "warp",
		Peers:           []leadership.Member{{ID: "a", QUIC: "a:1"}},
		APIListen:       "127.0.0.1:http",
		APIAdvertise:    "ftp://x",
		APIRateLimit:    -1,
		APIRateBurst:    -1,
	}
	var p Problems
	s.Check(&p, "gate", Injected{})
	p.Positive("Tick", 0)
	p.AtLeast("Retries", -1, 0)
	p.AtLeast("Limit", 0, 1)
	err := p.Err()
	if err == nil {
		t.Fatal("a broken config passed")
	}
	for _, want := range []string{"ID:", "QUICListen:", "SwimBind:", "SwimProfile:", "Join: entry 1", "ElectionProfile:",
		"Peers: must include this gate", "APIListen:", "APIAdvertise:", "APIRateLimit:", "APIRateBurst:", "DataDir:", "QuorumTimeout: must be positive", "DispatchTimeout:", "Retention:",
		"Tick: must be positive",
		"Retries: must not be negative", "Limit: must be at least 1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("no %q in:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "Join: entry 0") {
		t.Errorf("a good join address was reported:\n%v", err)
	}
}

// An injected transport or membership makes its address irrelevant.
func TestInjectedSkipsAddresses(t *testing.T) {
	n := Node{ID: "n1"}
	var p Problems
	n.Check(&p, Injected{Transport: true, Membership: true})
	if err := p.Err(); err != nil {
		t.Fatalf("injected transport and membership: %v", err)
	}
	n.Check(&p, Injected{})
	for _, want := range []string{"QUICListen:", "SwimBind:", "SwimProfile:"} {
		if err := p.Err(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("no %q in %v", want, err)
		}
	}
}

func TestBindAddr(t *testing.T) {
	if host, port, err := BindAddr("10.0.0.1:7302"); err != nil || host != "10.0.0.1" || port != 7302 {
		t.Fatalf("BindAddr = %q %d %v", host, port, err)
	}
	for _, bad := range []string{"", "10.0.0.1", "host:1", "10.0.0.1:http", "10.0.0.1:70000"} {
		if _, _, err := BindAddr(bad); err == nil {
			t.Errorf("BindAddr(%q) accepted", bad)
		}
	}
}

// A role embedding Server inline reads the same keys as if it declared the
// fields itself, with unknown keys still refused.
func TestInlineKeys(t *testing.T) {
	type role struct {
		Server `yaml:",inline"`
		Tick   time.Duration `yaml:"tick"`
	}
	file := `
id: r1
quic_listen: 10.0.0.1:7301
swim_bind: 10.0.0.1:7302
swim_profile: fastlan
election_profile: local
join: [10.0.0.2:7302]
peers:
  - {id: r1, quic: 10.0.0.1:7301}
api_listen: 10.0.0.1:7411
api_advertise: https://r1.example:7411
api_rate_limit: 500
api_rate_burst: 1000
data_dir: /var/lib/tempest/r1
quorum_timeout: 3s
dispatch_timeout: 4s
retention: 1h
tick: 2s
`
	dec := yaml.NewDecoder(strings.NewReader(file))
	dec.KnownFields(true)
	var r role
	if err := dec.Decode(&r); err != nil {
		t.Fatal(err)
	}
	want := role{Server: Server{
		Node: Node{ID: "r1", QUICListen: "10.0.0.1:7301", SwimBind: "10.0.0.1:7302", SwimProfile: "fastlan",
			Join: []string{"10.0.0.2:7302"}},
		ElectionProfile: "local", Peers: []leadership.Member{{ID: "r1", QUIC: "10.0.0.1:7301"}},
		APIListen: "10.0.0.1:7411", APIAdvertise: "https://r1.example:7411", APIRateLimit: 500, APIRateBurst: 1000,
		DataDir:       "/var/lib/tempest/r1",
		QuorumTimeout: 3 * time.Second, DispatchTimeout: 4 * time.Second, Retention: time.Hour,
	}, Tick: 2 * time.Second}
	var got, exp bytes.Buffer
	yaml.NewEncoder(&got).Encode(r)
	yaml.NewEncoder(&exp).Encode(want)
	if got.String() != exp.String() {
		t.Fatalf("decoded:\n%s\nwant:\n%s", got.String(), exp.String())
	}
	if !strings.Contains(got.String(), "\nquic_listen: ") || strings.Contains(got.String(), "server:") {
		t.Fatalf("keys are not inline:\n%s", got.String())
	}
	dec = yaml.NewDecoder(strings.NewReader("id: r1\nlogger: x\n"))
	dec.KnownFields(true)
	if err := dec.Decode(&r); err == nil || !strings.Contains(err.Error(), "logger") {
		t.Fatalf("unknown key logger: %v", err)
	}
}

// The transport and SWIM configs a role starts from carry the node's id,
// addresses, profile and keys.
func TestComponentConfigs(t *testing.T) {
	keyring, err := security.NewKeyring(securitytest.Secret(t), "")
	if err != nil {
		t.Fatal(err)
	}
	n := Node{ID: "n1", QUICListen: "10.0.0.1:7301", SwimBind: "10.0.0.1:7302", SwimProfile: "fastlan"}
	tc := n.TransportConfig(keyring, nil)
	if tc.NodeID != "n1" || tc.ListenAddr != "10.0.0.1:7301" || tc.Keyring != keyring {
		t.Fatalf("transport config %+v", tc)
	}
	sc, err := n.SwimConfig("10.0.0.1:7303", keyring, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sc.NodeName != "n1" || sc.BindAddr != "10.0.0.1" || sc.BindPort != 7303 || sc.Profile != "fastlan" || len(sc.Keys) == 0 {
		t.Fatalf("swim config %+v", sc)
	}
	if sc, err := n.SwimConfig(n.SwimBind, nil, nil); err != nil || len(sc.Keys) != 0 {
		t.Fatalf("without a keyring: keys %d, err %v", len(sc.Keys), err)
	}
	if _, err := n.SwimConfig("localhost:7302", keyring, nil); err == nil {
		t.Fatal("a host name to bind was accepted")
	}
}

func TestAdoptTransport(t *testing.T) {
	hub := transport.NewHub()
	tr := hub.Node("g1")
	defer tr.Close()

	s := DefaultServer("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", t.TempDir())
	s.ID = "g1"
	if err := s.AdoptTransport(tr); err != nil {
		t.Fatal(err)
	}
	if len(s.Peers) != 1 || s.Peers[0].ID != "g1" || s.Peers[0].QUIC != tr.Addr() {
		t.Fatalf("peers %+v, want g1 alone at %s", s.Peers, tr.Addr())
	}

	configured := []leadership.Member{{ID: "g1", QUIC: "a:1"}, {ID: "g2", QUIC: "b:1"}}
	s.Peers = configured
	if err := s.AdoptTransport(tr); err != nil || len(s.Peers) != 2 {
		t.Fatalf("configured peers replaced (%+v) or refused: %v", s.Peers, err)
	}
	s.ID = "g2"
	if err := s.AdoptTransport(tr); err == nil || !strings.Contains(err.Error(), `local id "g1" is not ID "g2"`) {
		t.Fatalf("a transport speaking for another node: %v", err)
	}
	if err := s.AdoptTransport(nil); err != nil {
		t.Fatalf("no transport to adopt: %v", err)
	}
}

func TestElectionProfileOr(t *testing.T) {
	s := Server{ElectionProfile: "lan"}
	if p, err := s.ElectionProfileOr(nil); err != nil || p != leadership.LANProfile() {
		t.Fatalf("lan: %+v, %v", p, err)
	}
	test := leadership.TestProfile()
	if p, err := s.ElectionProfileOr(&test); err != nil || p != test {
		t.Fatalf("override: %+v, %v", p, err)
	}
	s.ElectionProfile = "wan"
	if _, err := s.ElectionProfileOr(nil); err == nil {
		t.Fatal("unknown profile accepted")
	}
}

func TestBytesInAConfigFile(t *testing.T) {
	for in, want := range map[string]Bytes{
		"v: 1048576":  1 << 20,
		"v: 512MiB":   512 << 20,
		"v: 1 GiB":    1 << 30,
		`v: "10 GB"`:  10_000_000_000,
		"v: 0":        0,
		"v: 64KiB   ": 64 << 10,
	} {
		var c struct {
			V Bytes `yaml:"v"`
		}
		if err := yaml.Unmarshal([]byte(in), &c); err != nil || c.V != want {
			t.Errorf("%q: got %d, %v; want %d", in, c.V, err, want)
		}
	}
	for _, in := range []string{"v: lots", "v: -5", "v: 5 parsecs"} {
		var c struct {
			V Bytes `yaml:"v"`
		}
		if err := yaml.Unmarshal([]byte(in), &c); err == nil {
			t.Errorf("%q: accepted as %d", in, c.V)
		}
	}
}

// The transport's security knobs are config keys: the replay window and
// each class's token bucket; left out, the transport's defaults stand.
func TestTransportSecurityKnobs(t *testing.T) {
	var n Node
	src := "id: n1\ntransport_replay_window: 30s\ntransport_rate_limit: 50\ntransport_rate_burst: 10\n"
	if err := yaml.Unmarshal([]byte(src), &n); err != nil {
		t.Fatal(err)
	}
	tc := n.TransportConfig(nil, nil)
	if tc.Replay.Window != 30*time.Second {
		t.Errorf("replay window %s, want 30s", tc.Replay.Window)
	}
	if len(tc.RateLimit.Limits) == 0 {
		t.Fatal("no rate limits")
	}
	for i, l := range tc.RateLimit.Limits {
		if l.PerSecond != 50 || l.Burst != 10 {
			t.Errorf("class %d limit %+v, want 50/s burst 10", i, l)
		}
	}

	d, def := Node{ID: "n1"}.TransportConfig(nil, nil), transport.DefaultConfig()
	if d.Replay.Window != def.Replay.Window || d.RateLimit.Limits[0] != def.RateLimit.Limits[0] {
		t.Errorf("unset knobs changed the defaults: replay %s, limit %+v", d.Replay.Window, d.RateLimit.Limits[0])
	}

	bad := Node{ID: "n1", TransportReplayWindow: 500 * time.Millisecond, TransportRateLimit: -1, TransportRateBurst: -1}
	var p Problems
	bad.Check(&p, Injected{Transport: true, Membership: true})
	for _, want := range []string{"TransportReplayWindow:", "TransportRateLimit:", "TransportRateBurst:"} {
		if err := p.Err(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("no %q in %v", want, err)
		}
	}
}
