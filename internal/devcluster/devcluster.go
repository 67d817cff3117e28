// Package devcluster starts a local Tempest cluster as separate processes of
// the real binaries on loopback, with short SWIM and election timings. It
// backs `tempest dev`, `tempest demo` and the integration tests, so all three
// run exactly the same cluster.
package devcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"tempest/security"
)

// Options describe the cluster to start.
type Options struct {
	// Dir receives cluster.json, env, and a folder per node (data, log).
	Dir string
	// BinDir holds tempest-manager and tempest-worker.
	BinDir string
	// Datacenter names the only datacenter of a one-datacenter cluster.
	// With Datacenters > 1 they are named dc1, dc2, ...
	Datacenter  string
	Datacenters int
	// Managers and Workers are per datacenter.
	Managers int
	Workers  int
	// Gates, when positive, starts that many gates: the managers of every
	// datacenter join the gates' SWIM cluster, and clients (cluster.json's
	// api, Client) go through the gates.
	Gates int
	// LeaseTTL is the gates' lease_ttl (default 6s: a manager failover
	// with the test profiles takes well under that).
	LeaseTTL time.Duration
	// CoresPerWorker is each worker's core count (default 2).
	CoresPerWorker int
	// Secret and Token default to fresh random values.
	Secret string
	Token  string
	// SwimProfile and ElectionProfile default to "test": fast detection on
	// loopback, never for a real network.
	SwimProfile     string
	ElectionProfile string
	Logger          *slog.Logger
	// Place, when set, is asked where each node runs: its own address for
	// every listener (QUIC, SWIM, API) and a command prefix such as
	// `ip netns exec NS`. Partition tests put each node in a network
	// namespace this way. Nil keeps every node on loopback with free ports.
	Place func(name, role, dc string) (Placement, error)
	// ManagerConfig holds config-file keys added to every manager's file
	// (benchmarks raise api_rate_limit this way).
	ManagerConfig map[string]any
	// GateConfig holds config-file keys added to every gate's file.
	GateConfig map[string]any
	// WorkerConfig holds config-file keys added to every worker's file:
	// `exec` and `source_dirs`, which are off unless given (tempest dev
	// allows the example exec program this way).
	WorkerConfig map[string]any
}

// Placement is where one node runs.
type Placement struct {
	// IP is the address the node binds every listener to, on fixed ports
	// (nothing else uses the address). Empty: loopback, free ports.
	IP string
	// Prefix runs before the binary, e.g. ["ip", "netns", "exec", "ns1"].
	Prefix []string
}

// Fixed ports of a node with its own address (Placement.IP).
const (
	placedQUIC     = 7101
	placedSwim     = 7102
	placedAPI      = 7103
	placedGateSwim = 7104
)

func (o *Options) defaults() error {
	if o.Dir == "" {
		return errors.New("devcluster: Dir is required")
	}
	if o.BinDir == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("devcluster: find binaries: %w", err)
		}
		o.BinDir = filepath.Dir(exe)
	}
	if o.Datacenter == "" {
		o.Datacenter = "dc1"
	}
	if o.Datacenters <= 0 {
		o.Datacenters = 1
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 6 * time.Second
	}
	if o.Managers <= 0 {
		o.Managers = 3
	}
	if o.Workers < 0 {
		o.Workers = 0
	}
	if o.CoresPerWorker <= 0 {
		o.CoresPerWorker = 2
	}
	if o.SwimProfile == "" {
		o.SwimProfile = "test"
	}
	if o.ElectionProfile == "" {
		o.ElectionProfile = "test"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Secret == "" {
		s, err := security.GenerateSecret()
		if err != nil {
			return err
		}
		o.Secret = s
	}
	if o.Token == "" {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		o.Token = hex.EncodeToString(b)
	}
	bins := []string{"tempest-manager", "tempest-worker"}
	if o.Gates > 0 {
		bins = append(bins, "tempest-gate")
	}
	for _, bin := range bins {
		if _, err := os.Stat(filepath.Join(o.BinDir, bin)); err != nil {
			return fmt.Errorf("devcluster: %s not found in %s (run `make build`): %w", bin, o.BinDir, err)
		}
	}
	return nil
}

// Node is one process of the cluster, as written to cluster.json.
type Node struct {
	Name string `json:"name"`
	Role string `json:"role"`
	DC   string `json:"dc"`
	PID  int    `json:"pid"`
	API  string `json:"api,omitempty"`
	// Metrics is a worker's Prometheus listener (host:port, /metrics); the
	// gates and managers serve theirs on the API.
	Metrics string `json:"metrics,omitempty"`
	QUIC    string `json:"quic"`
	Swim    string `json:"swim"`
	// GateSwim is a manager's address in the gates' SWIM cluster.
	GateSwim string `json:"gate_swim,omitempty"`
	DataDir  string `json:"data_dir"`
	Log      string `json:"log"`
	// SecretFile is DIR/<node>/secret.env (0600): the node's AUTH_SECRET,
	// AUTH_SECRET_PREVIOUS and, for managers, TEMPEST_TOKEN. Like systemd's
	// EnvironmentFile, it becomes the process environment at every start,
	// and Argv names it in --secret-file so SIGHUP reloads from it.
	SecretFile string   `json:"secret_file"`
	Argv       []string `json:"argv"`
	// Prefix runs before Argv (Placement.Prefix), e.g. `ip netns exec NS`.
	Prefix []string `json:"prefix,omitempty"`
	// ip is the node's own address (Placement.IP), "" on loopback.
	ip string

	cmd  *exec.Cmd
	done chan struct{}
	err  error
	// secrets is what SecretFile holds, kept so start need not parse it
	// back; both change together, under Cluster.mu, in writeSecrets.
	secrets map[string]string
}

// Cluster is a running local cluster.
type Cluster struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	nodes    []*Node
	managers map[string][]*Node // by datacenter
	// gateSeeds are the gates' SWIM addresses, for managers added later.
	gateSeeds []string
	gates     []*Node
	// ports holds every port handed out: the kernel may offer a port it
	// just freed again, and two nodes of one cluster must never share one.
	ports map[string]bool
}

// File is the JSON shape of DIR/cluster.json.
type File struct {
	API   string  `json:"api"`
	Token string  `json:"token"`
	Nodes []*Node `json:"nodes"`
}

// Start allocates ports, writes the layout, starts every node and returns
// once every process is running. Use WaitReady to wait for a leader and
// registered workers.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("devcluster: %w", err)
	}
	c := &Cluster{opts: opts, log: opts.Logger, managers: make(map[string][]*Node)}
	var gateSeeds []string
	if opts.Gates > 0 {
		var err error
		if gateSeeds, err = c.layoutGates(); err != nil {
			return nil, err
		}
	}
	for _, dc := range c.Datacenters() {
		if err := c.layoutDatacenter(dc, gateSeeds); err != nil {
			return nil, err
		}
	}
	for _, n := range c.Nodes() {
		if err := c.start(n); err != nil {
			c.Stop(context.Background())
			return nil, err
		}
	}
	if err := c.WriteFiles(); err != nil {
		c.Stop(context.Background())
		return nil, err
	}
	return c, nil
}

// Datacenters names the cluster's datacenters.
func (c *Cluster) Datacenters() []string {
	if c.opts.Datacenters <= 1 {
		return []string{c.opts.Datacenter}
	}
	out := make([]string, c.opts.Datacenters)
	for i := range out {
		out[i] = fmt.Sprintf("dc%d", i+1)
	}
	return out
}

// layoutGates writes every gate's config and returns the gates' SWIM seeds.
func (c *Cluster) layoutGates() ([]string, error) {
	for i := 0; i < c.opts.Gates; i++ {
		if _, err := c.newGateNode(i + 1); err != nil {
			return nil, err
		}
	}
	for _, n := range c.gates {
		if err := c.writeGateConfig(n, c.gates); err != nil {
			return nil, err
		}
	}
	var seeds []string
	for _, n := range c.gates {
		seeds = append(seeds, n.Swim)
	}
	return seeds, nil
}

// newGateNode lays out the addresses of the k-th gate.
func (c *Cluster) newGateNode(k int) (*Node, error) {
	n, err := c.newNode("gate", "", fmt.Sprintf("gate-%d", k))
	if err != nil {
		return nil, err
	}
	if n.API, err = c.addr(n, placedAPI, freeTCP); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.gates = append(c.gates, n)
	c.mu.Unlock()
	return n, nil
}

// writeGateConfig writes n's config: its peers are group (n among them),
// its SWIM seeds the group's.
func (c *Cluster) writeGateConfig(n *Node, group []*Node) error {
	var seeds []string
	var peers []map[string]string
	for _, g := range group {
		seeds = append(seeds, g.Swim)
		peers = append(peers, map[string]string{"id": g.Name, "quic": g.QUIC})
	}
	cfg := map[string]any{
		"id": n.Name, "quic_listen": n.QUIC, "swim_bind": n.Swim, "api_listen": n.API,
		"data_dir": n.DataDir, "peers": peers, "join": seeds,
		"swim_profile": c.opts.SwimProfile, "election_profile": c.opts.ElectionProfile,
		"lease_ttl": c.opts.LeaseTTL.String(),
	}
	maps.Copy(cfg, c.opts.GateConfig)
	path, err := c.writeConfig(n, cfg)
	if err != nil {
		return err
	}
	n.Argv = []string{filepath.Join(c.opts.BinDir, "tempest-gate"), "--config", path, "--secret-file", n.SecretFile}
	return nil
}

// AddGate lays out one more gate with an empty data dir and a config naming
// the gates and itself; like AddManager, add it to the group, then start it
// (Restart).
func (c *Cluster) AddGate() (*Node, error) {
	c.mu.Lock()
	group := slices.Clone(c.gates)
	c.mu.Unlock()
	n, err := c.newGateNode(len(group) + 1)
	if err != nil {
		return nil, err
	}
	if err := c.writeGateConfig(n, append(group, n)); err != nil {
		return nil, err
	}
	return n, nil
}

// layoutDatacenter writes one datacenter's managers and workers.
func (c *Cluster) layoutDatacenter(dc string, gateSeeds []string) error {
	mgrs := make([]*Node, c.opts.Managers)
	for i := range mgrs {
		n, err := c.newManagerNode(dc, i+1, gateSeeds)
		if err != nil {
			return err
		}
		mgrs[i] = n
	}
	for _, n := range mgrs {
		if err := c.writeManagerConfig(n, mgrs, gateSeeds); err != nil {
			return err
		}
	}
	c.mu.Lock()
	c.managers[dc] = mgrs
	c.gateSeeds = gateSeeds
	c.mu.Unlock()
	for i := 0; i < c.opts.Workers; i++ {
		if _, err := c.newWorker(dc, c.opts.CoresPerWorker, nil); err != nil {
			return err
		}
	}
	return nil
}

// newManagerNode lays out the addresses of a datacenter's k-th manager.
func (c *Cluster) newManagerNode(dc string, k int, gateSeeds []string) (*Node, error) {
	n, err := c.newNode("manager", dc, fmt.Sprintf("%s-manager-%d", dc, k))
	if err != nil {
		return nil, err
	}
	if n.API, err = c.addr(n, placedAPI, freeTCP); err != nil {
		return nil, err
	}
	if len(gateSeeds) > 0 {
		if n.GateSwim, err = c.addr(n, placedGateSwim, freeTCPAndUDP); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// writeManagerConfig writes n's config: its peers are group (n among them),
// its SWIM seeds the group's.
func (c *Cluster) writeManagerConfig(n *Node, group []*Node, gateSeeds []string) error {
	var peerList []map[string]string
	var seeds []string
	for _, m := range group {
		peerList = append(peerList, map[string]string{"id": m.Name, "quic": m.QUIC})
		seeds = append(seeds, m.Swim)
	}
	cfg := map[string]any{
		"id": n.Name, "datacenter": n.DC,
		"quic_listen": n.QUIC, "swim_bind": n.Swim, "api_listen": n.API,
		"data_dir": n.DataDir, "peers": peerList, "join": seeds,
		"swim_profile": c.opts.SwimProfile, "election_profile": c.opts.ElectionProfile,
	}
	if n.GateSwim != "" {
		cfg["gate_swim_bind"] = n.GateSwim
		cfg["gate_swim_profile"] = c.opts.SwimProfile
		cfg["gate_join"] = gateSeeds
		cfg["gate_report_interval"] = "250ms"
	}
	maps.Copy(cfg, c.opts.ManagerConfig)
	path, err := c.writeConfig(n, cfg)
	if err != nil {
		return err
	}
	n.Argv = []string{filepath.Join(c.opts.BinDir, "tempest-manager"), "--config", path, "--secret-file", n.SecretFile}
	return nil
}

// AddManager lays out and starts one more manager in datacenter dc, with
// an empty data dir and a config naming the datacenter's managers and
// itself. It is not a member of their group until someone adds it
// (`tempest members add`, api.Client.AddMember with its name and QUIC
// address); add it first, then start it (Restart), or it waits to be
// added.
func (c *Cluster) AddManager(dc string) (*Node, error) {
	c.mu.Lock()
	group := slices.Clone(c.managers[dc])
	gateSeeds := c.gateSeeds
	c.mu.Unlock()
	n, err := c.newManagerNode(dc, len(group)+1, gateSeeds)
	if err != nil {
		return nil, err
	}
	if err := c.writeManagerConfig(n, append(group, n), gateSeeds); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.managers[dc] = append(c.managers[dc], n)
	c.mu.Unlock()
	return n, nil
}

// newWorker lays out one more worker pointed at the managers.
func (c *Cluster) newWorker(dc string, cores int, edit func(cfg map[string]any)) (*Node, error) {
	c.mu.Lock()
	mgrs := c.managers[dc]
	c.mu.Unlock()
	var seeds, mgrQUIC []string
	for _, m := range mgrs {
		seeds = append(seeds, m.Swim)
		mgrQUIC = append(mgrQUIC, m.QUIC)
	}
	workers := 0
	for _, n := range c.Nodes() {
		if n.Role == "worker" && n.DC == dc {
			workers++
		}
	}
	n, err := c.newNode("worker", dc, fmt.Sprintf("%s-worker-%d", dc, workers+1))
	if err != nil {
		return nil, err
	}
	// A worker has no API, so its API port serves its metrics.
	if n.Metrics, err = c.addr(n, placedAPI, freeTCP); err != nil {
		return nil, err
	}
	cfg := map[string]any{
		"id": n.Name, "datacenter": dc,
		"quic_listen": n.QUIC, "swim_bind": n.Swim,
		"join": seeds, "managers": mgrQUIC, "cores": cores,
		"swim_profile": c.opts.SwimProfile, "metrics_listen": n.Metrics,
	}
	maps.Copy(cfg, c.opts.WorkerConfig)
	if edit != nil {
		edit(cfg)
	}
	path, err := c.writeConfig(n, cfg)
	if err != nil {
		return nil, err
	}
	n.Argv = []string{filepath.Join(c.opts.BinDir, "tempest-worker"), "--config", path, "--secret-file", n.SecretFile}
	return n, nil
}

// writeConfig writes a node's config file beside its data and log. Secrets
// are not in it: they reach the process through its environment. A local
// cluster's scrapers are its own user, so /metrics shows its jobs, and an
// API placed on a private test network (Options.Place) serves plain HTTP
// there; a key the caller set stays as set.
func (c *Cluster) writeConfig(n *Node, cfg map[string]any) (string, error) {
	if _, set := cfg["metrics_job_series"]; !set {
		cfg["metrics_job_series"] = true
	}
	if api, ok := cfg["api_listen"].(string); ok && !isLoopback(api) {
		if _, set := cfg["api_insecure_http"]; !set {
			cfg["api_insecure_http"] = true
		}
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("devcluster: config for %s: %w", n.Name, err)
	}
	path := filepath.Join(filepath.Dir(n.DataDir), "config.yaml")
	if err := writeFileAtomic(path, b, 0o600); err != nil {
		return "", err
	}
	return path, nil
}

// isLoopback reports whether a host:port names a loopback address.
func isLoopback(hostPort string) bool {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// AddWorker starts one more worker with the given cores in the first
// datacenter and returns its name.
func (c *Cluster) AddWorker(cores int) (string, error) { return c.AddWorkerConfigured(cores, nil) }

// AddWorkerConfigured is AddWorker with edit applied to the worker's config
// (its YAML keys) before it starts: a test's way to give one worker, say,
// SWIM seeds that never answer.
func (c *Cluster) AddWorkerConfigured(cores int, edit func(cfg map[string]any)) (string, error) {
	n, err := c.newWorker(c.Datacenters()[0], cores, edit)
	if err != nil {
		return "", err
	}
	if err := c.start(n); err != nil {
		return "", err
	}
	return n.Name, c.WriteFiles()
}

// Secret is the cluster's AUTH_SECRET, for tests that speak the wire.
func (c *Cluster) Secret() string { return c.opts.Secret }

func (c *Cluster) newNode(role, dc, name string) (*Node, error) {
	dir := filepath.Join(c.opts.Dir, name)
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		return nil, fmt.Errorf("devcluster: %w", err)
	}
	n := &Node{
		Name: name, Role: role, DC: dc,
		DataDir:    filepath.Join(dir, "data"),
		Log:        filepath.Join(dir, "node.log"),
		SecretFile: filepath.Join(dir, "secret.env"),
	}
	if c.opts.Place != nil {
		pl, err := c.opts.Place(name, role, dc)
		if err != nil {
			return nil, fmt.Errorf("devcluster: place %s: %w", name, err)
		}
		n.ip, n.Prefix = pl.IP, pl.Prefix
	}
	var err error
	if n.QUIC, err = c.addr(n, placedQUIC, freeUDP); err != nil {
		return nil, err
	}
	if n.Swim, err = c.addr(n, placedSwim, freeTCPAndUDP); err != nil {
		return nil, err
	}
	if err := c.writeSecrets(n, c.opts.Secret, ""); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()
	return n, nil
}

// Env is the environment a node process started with the cluster's
// original secrets gets: secrets never go on the command line or into
// config files. Each node's actual environment comes from its SecretFile
// (see SetSecrets).
func (c *Cluster) Env() []string {
	return append(baseEnv(),
		"AUTH_SECRET="+c.opts.Secret,
		"TEMPEST_TOKEN="+c.opts.Token,
	)
}

// baseEnv is this process's environment without any cluster secret, so a
// variable the launcher happens to have cannot reach a node unbidden.
func baseEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k != "AUTH_SECRET" && k != "AUTH_SECRET_PREVIOUS" && k != "TEMPEST_TOKEN" {
			out = append(out, kv)
		}
	}
	return out
}

// nodeEnv is the environment a node starts with: its secret file's values,
// as systemd's EnvironmentFile= would give it.
func (c *Cluster) nodeEnv(n *Node) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	env := baseEnv()
	for _, k := range slices.Sorted(maps.Keys(n.secrets)) {
		env = append(env, k+"="+n.secrets[k])
	}
	return env
}

// SetSecrets rewrites a node's secret file with AUTH_SECRET=current and,
// unless empty, AUTH_SECRET_PREVIOUS=previous: one step of a rotation pass.
// The running process is not told; send it SIGHUP (Signal) to reload, or
// Kill and Restart it, which starts it from the file as systemd would.
// Secrets a node would refuse are refused here.
func (c *Cluster) SetSecrets(node, current, previous string) error {
	n, ok := c.Node(node)
	if !ok {
		return fmt.Errorf("devcluster: no node %q", node)
	}
	if _, err := security.NewKeyring(current, previous); err != nil {
		return fmt.Errorf("devcluster: secrets for %s: %w", node, err)
	}
	return c.writeSecrets(n, current, previous)
}

// writeSecrets writes n's secret file (0600, atomically: a node reloading
// at that moment reads the old file or the new one, never half of it) and
// records its values for the next start. Values are double-quoted with Go
// escapes, which both systemd's EnvironmentFile and nodecmd.ParseEnv read.
//
// Like an operator following the README, it gives each node only its role's
// key: workers and managers get secrets derived from AUTH_SECRET for their
// role (security.DeriveRoleSecret), gates AUTH_SECRET itself.
func (c *Cluster) writeSecrets(n *Node, current, previous string) error {
	var err error
	if current, err = roleSecret(n.Role, current); err != nil {
		return err
	}
	if previous, err = roleSecret(n.Role, previous); err != nil {
		return err
	}
	vals := map[string]string{"AUTH_SECRET": current}
	if previous != "" {
		vals["AUTH_SECRET_PREVIOUS"] = previous
	}
	if n.Role == "manager" || n.Role == "gate" {
		vals["TEMPEST_TOKEN"] = c.opts.Token
	}
	var b strings.Builder
	b.WriteString("# Written by devcluster; rewritten by Cluster.SetSecrets.\n")
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		fmt.Fprintf(&b, "%s=%s\n", k, strconv.Quote(vals[k]))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := writeFileAtomic(n.SecretFile, []byte(b.String()), 0o600); err != nil {
		return err
	}
	n.secrets = vals
	return nil
}

// roleSecret derives the secret a node of role holds from secret.
func roleSecret(role, secret string) (string, error) {
	if secret == "" || role == "gate" {
		return secret, nil
	}
	tier, err := security.ParseRole(role)
	if err != nil {
		return "", fmt.Errorf("devcluster: %w", err)
	}
	s, err := security.DeriveRoleSecret(secret, tier)
	if err != nil {
		return "", fmt.Errorf("devcluster: %s secret: %w", role, err)
	}
	return s, nil
}

func (c *Cluster) start(n *Node) error {
	logf, err := os.OpenFile(n.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("devcluster: log for %s: %w", n.Name, err)
	}
	argv := append(slices.Clip(n.Prefix), n.Argv...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = c.nodeEnv(n)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Children die with the launcher even if it is killed with SIGKILL, so
	// a crashed `tempest dev` never leaves a cluster behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("devcluster: start %s: %w", n.Name, err)
	}
	c.mu.Lock()
	n.cmd, n.PID, n.done, n.err = cmd, cmd.Process.Pid, make(chan struct{}), nil
	done := n.done
	c.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logf.Close()
		c.mu.Lock()
		n.err = err
		c.mu.Unlock()
		close(done)
	}()
	c.log.Debug("node started", "node", n.Name, "pid", n.PID)
	return nil
}

// Nodes returns the nodes in start order.
func (c *Cluster) Nodes() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Node(nil), c.nodes...)
}

// Node finds a node by name.
func (c *Cluster) Node(name string) (*Node, bool) {
	for _, n := range c.Nodes() {
		if n.Name == name {
			return n, true
		}
	}
	return nil, false
}

// APIs lists the API base URLs clients use: the gates' when the cluster
// has gates, else the managers'.
func (c *Cluster) APIs() []string {
	role := "manager"
	if c.opts.Gates > 0 {
		role = "gate"
	}
	return c.apisOf(role, "")
}

// ManagerAPIs lists a datacenter's managers' API base URLs ("" for all).
func (c *Cluster) ManagerAPIs(dc string) []string { return c.apisOf("manager", dc) }

func (c *Cluster) apisOf(role, dc string) []string {
	var out []string
	for _, n := range c.Nodes() {
		if n.API != "" && n.Role == role && (dc == "" || n.DC == dc) {
			out = append(out, "http://"+n.API)
		}
	}
	return out
}

// Token is the API bearer token.
func (c *Cluster) Token() string { return c.opts.Token }

// Dir is the cluster's directory.
func (c *Cluster) Dir() string { return c.opts.Dir }

// Signal sends sig to a node's process.
func (c *Cluster) Signal(name string, sig syscall.Signal) error {
	n, ok := c.Node(name)
	if !ok {
		return fmt.Errorf("devcluster: no node %q", name)
	}
	c.mu.Lock()
	cmd := n.cmd
	c.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return fmt.Errorf("devcluster: %s is not running", name)
	}
	return cmd.Process.Signal(sig)
}

// Kill sends SIGKILL and waits for the process to be gone.
func (c *Cluster) Kill(name string) error {
	if err := c.Signal(name, syscall.SIGKILL); err != nil {
		return err
	}
	return c.Wait(name, 10*time.Second)
}

// Wait waits up to d for a node's process to exit.
func (c *Cluster) Wait(name string, d time.Duration) error {
	n, ok := c.Node(name)
	if !ok {
		return fmt.Errorf("devcluster: no node %q", name)
	}
	c.mu.Lock()
	done := n.done
	c.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-time.After(d):
		return fmt.Errorf("devcluster: %s still running after %s", name, d)
	}
}

// Running reports whether a node's process is alive.
func (c *Cluster) Running(name string) bool {
	n, ok := c.Node(name)
	if !ok {
		return false
	}
	c.mu.Lock()
	done := n.done
	c.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// ExitError is how name's last process ended: nil while it runs or if it
// exited with status 0, the wait error (an *exec.ExitError) otherwise.
func (c *Cluster) ExitError(name string) error {
	n, ok := c.Node(name)
	if !ok {
		return fmt.Errorf("devcluster: no node %q", name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return n.err
}

// Restart starts a stopped node again with the same argv and data dir.
func (c *Cluster) Restart(name string) error {
	n, ok := c.Node(name)
	if !ok {
		return fmt.Errorf("devcluster: no node %q", name)
	}
	if c.Running(name) {
		return fmt.Errorf("devcluster: %s is still running", name)
	}
	if err := c.start(n); err != nil {
		return err
	}
	return c.WriteFiles()
}

// Stop ends every node: SIGTERM, then SIGKILL for any still running when ctx
// ends or after 10 s.
func (c *Cluster) Stop(ctx context.Context) {
	nodes := c.Nodes()
	for _, n := range nodes {
		if c.Running(n.Name) {
			_ = c.Signal(n.Name, syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, n := range nodes {
		c.mu.Lock()
		done := n.done
		c.mu.Unlock()
		if done == nil {
			continue
		}
		timer := time.NewTimer(time.Until(deadline))
		select {
		case <-done:
		case <-timer.C:
			_ = c.Signal(n.Name, syscall.SIGKILL)
			<-done
		case <-ctx.Done():
			_ = c.Signal(n.Name, syscall.SIGKILL)
			<-done
		}
		timer.Stop()
	}
}

// WriteFiles writes DIR/cluster.json and DIR/env.
func (c *Cluster) WriteFiles() error {
	apis := c.APIs()
	c.mu.Lock()
	f := File{Token: c.opts.Token, Nodes: c.nodes}
	if len(apis) > 0 {
		f.API = apis[0]
	}
	b, err := json.MarshalIndent(f, "", "  ")
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(c.opts.Dir, "cluster.json"), append(b, '\n'), 0o600); err != nil {
		return err
	}
	env := fmt.Sprintf("export TEMPEST_API=%s TEMPEST_TOKEN=%s\n", strings.Join(apis, ","), c.opts.Token)
	return writeFileAtomic(filepath.Join(c.opts.Dir, "env"), []byte(env), 0o600)
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("devcluster: write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("devcluster: write %s: %w", path, err)
	}
	return nil
}

// addr is a node's listen address for one use: its own IP and the fixed
// port when it was placed, else a loopback port from free.
func (c *Cluster) addr(n *Node, fixed int, free func() (string, error)) (string, error) {
	if n.ip != "" {
		return net.JoinHostPort(n.ip, strconv.Itoa(fixed)), nil
	}
	return c.port(free)
}

// port returns an address from free that no node of this cluster was
// given yet.
func (c *Cluster) port(free func() (string, error)) (string, error) {
	for range 50 {
		addr, err := free()
		if err != nil {
			return "", err
		}
		_, p, _ := net.SplitHostPort(addr)
		c.mu.Lock()
		taken := c.ports[p]
		if !taken {
			if c.ports == nil {
				c.ports = map[string]bool{}
			}
			c.ports[p] = true
		}
		c.mu.Unlock()
		if !taken {
			return addr, nil
		}
	}
	return "", errors.New("devcluster: no port unused by this cluster after 50 tries")
}

// Port helpers: a port free a moment ago. The small race with other
// processes is acceptable for a local dev cluster; the node fails loudly if
// it loses it.
func freeTCP() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("devcluster: free tcp port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func freeUDP() (string, error) {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("devcluster: free udp port: %w", err)
	}
	defer c.Close()
	return c.LocalAddr().String(), nil
}

func freeTCPAndUDP() (string, error) {
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("devcluster: free port: %w", err)
		}
		addr := l.Addr().String()
		u, err := net.ListenPacket("udp", addr)
		l.Close()
		if err == nil {
			u.Close()
			return addr, nil
		}
	}
	return "", errors.New("devcluster: no port free for both tcp and udp after 50 tries")
}
