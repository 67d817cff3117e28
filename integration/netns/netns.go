// Package netns builds a small private network out of Linux network
// namespaces for partition tests: a bridge in a namespace of its own, one
// namespace per node joined to it by a veth pair, and one veth from the
// test's own (root) namespace onto the bridge so the test can reach the
// nodes' APIs and the nodes can reach a target the test serves.
//
// Addresses come from one /24 of 10.213.0.0/16 that exists only inside the
// namespaces a Net creates and on its one root-side veth; no namespace has
// a default route, so nothing a node sends can leave that network.
//
// Faults are nftables rules on the bridge (drop between given nodes, one
// way or both; random loss with `numgen random mod 100`), so dropped
// packets vanish as on a real network, or a node's link set down. This kernel has no netem, so there is no delay
// injection; loss and cuts are what nftables gives.
package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// namePrefix starts every namespace and root-side link a Net creates, so
// Sweep can find the leftovers of crashed runs.
const namePrefix = "tpn"

// ErrUnsupported says this machine cannot run namespaces (not root, no ip
// or nft, no netns support). Tests skip on it.
var ErrUnsupported = errors.New("netns: network namespaces unavailable")

// Net is one private network. Its methods are safe for concurrent use.
type Net struct {
	id     string // unique per run: the owning pid
	subnet int    // third octet of 10.213.subnet.0/24
	bridge string // namespace holding the bridge
	hostIf string // root-side veth
	hostIP string

	mu    sync.Mutex
	nodes map[string]*Node
	order []*Node
	// The faults, as one nftables table in the bridge's namespace.
	drops map[[2]string]bool // (source IP, destination IP) pairs dropped
	loss  map[string]int     // node IP → percent of its packets dropped
}

// Node is one namespace on the network.
type Node struct {
	Name string // as given to Add
	NS   string // namespace name
	IP   string
	port string // bridge-side veth
}

// Check says whether namespaces can be used here; the error wraps
// ErrUnsupported with the reason.
func Check() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: needs root (uid %d)", ErrUnsupported, os.Geteuid())
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%w: %s not installed: %v", ErrUnsupported, tool, err)
		}
	}
	probe := fmt.Sprintf("%sprobe%d", namePrefix, os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		return fmt.Errorf("%w: ip netns add: %v: %s", ErrUnsupported, err, bytes.TrimSpace(out))
	}
	defer exec.Command("ip", "netns", "del", probe).Run()
	if out, err := exec.Command("ip", "netns", "exec", probe, "nft", "list", "ruleset").CombinedOutput(); err != nil {
		return fmt.Errorf("%w: nft in a namespace: %v: %s", ErrUnsupported, err, bytes.TrimSpace(out))
	}
	return nil
}

// Install installs iproute2 and nftables with apt-get when ip or nft is
// missing. Best effort: the error says what failed, and Check decides.
func Install(ctx context.Context) error {
	var missing []string
	if _, err := exec.LookPath("ip"); err != nil {
		missing = append(missing, "iproute2")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		missing = append(missing, "nftables")
	}
	if len(missing) == 0 || os.Geteuid() != 0 {
		return nil
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("netns: %s missing and no apt-get to install them", strings.Join(missing, ", "))
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "apt-get", "update", "-qq").CombinedOutput(); err != nil {
		return fmt.Errorf("netns: apt-get update: %v: %s", err, out)
	}
	args := append([]string{"install", "-y", "-qq"}, missing...)
	if out, err := exec.CommandContext(ctx, "apt-get", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("netns: apt-get install %s: %v: %s", strings.Join(missing, " "), err, out)
	}
	return nil
}

// Sweep deletes namespaces and root-side links left by runs whose process
// is gone (a crashed or killed test). Namespaces of live runs are kept.
func Sweep() error {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return fmt.Errorf("netns: list namespaces: %w", err)
	}
	var errs []error
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if pid, ok := ownerPID(name); ok && !alive(pid) {
			errs = append(errs, run("ip", "netns", "del", name))
		}
	}
	links, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("netns: list links: %w", err))...)
	}
	for _, line := range strings.Split(string(links), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if pid, ok := ownerPID(name); ok && !alive(pid) {
			errs = append(errs, run("ip", "link", "del", name))
		}
	}
	return errors.Join(errs...)
}

// ownerPID parses the pid out of a name this package made: tpn<pid>-... for
// namespaces, tpn<pid>h for the root-side link.
func ownerPID(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, namePrefix)
	if !ok {
		return 0, false
	}
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end <= 0 {
		return 0, false
	}
	pid, err := strconv.Atoi(rest[:end])
	return pid, err == nil
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// New builds the bridge namespace and the root-side veth. Close removes
// everything it made. Leftovers of dead runs are swept first.
func New() (*Net, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	if err := Sweep(); err != nil {
		return nil, err
	}
	n := &Net{id: strconv.Itoa(os.Getpid()), nodes: map[string]*Node{}, drops: map[[2]string]bool{}, loss: map[string]int{}}
	var err error
	if n.subnet, err = freeSubnet(os.Getpid()); err != nil {
		return nil, err
	}
	// One process may run several Nets one after another; the bridge name
	// carries the subnet so a leftover of an earlier one cannot clash.
	n.bridge = fmt.Sprintf("%s%s-br%d", namePrefix, n.id, n.subnet)
	n.hostIf = fmt.Sprintf("%s%sh%d", namePrefix, n.id, n.subnet)
	if len(n.hostIf) > 15 {
		n.hostIf = fmt.Sprintf("%s%sh", namePrefix, n.id)
	}
	n.hostIP = n.addr(254)
	steps := [][]string{
		{"ip", "netns", "add", n.bridge},
		{"ip", "-n", n.bridge, "link", "set", "lo", "up"},
		{"ip", "-n", n.bridge, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", n.bridge, "link", "set", "br0", "up"},
		{"ip", "link", "add", n.hostIf, "type", "veth", "peer", "name", "up0", "netns", n.bridge},
		{"ip", "-n", n.bridge, "link", "set", "up0", "master", "br0", "up"},
		{"ip", "addr", "add", n.hostIP + "/24", "dev", n.hostIf},
		{"ip", "link", "set", n.hostIf, "up"},
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			n.Close()
			return nil, err
		}
	}
	if err := n.applyLocked(); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// freeSubnet picks a /24 of 10.213.0.0/16 that no route of the root
// namespace uses, starting from one derived from seed.
func freeSubnet(seed int) (int, error) {
	out, err := exec.Command("ip", "-4", "route", "show").Output()
	if err != nil {
		return 0, fmt.Errorf("netns: list routes: %w", err)
	}
	routes := string(out)
	for i := range 250 {
		s := (seed+i)%250 + 1
		if !strings.Contains(routes, fmt.Sprintf("10.213.%d.", s)) {
			return s, nil
		}
	}
	return 0, errors.New("netns: every 10.213.N.0/24 is in use")
}

func (n *Net) addr(host int) string { return fmt.Sprintf("10.213.%d.%d", n.subnet, host) }

// HostIP is the test process's address on the network: serve a target
// here for the nodes to reach.
func (n *Net) HostIP() string { return n.hostIP }

// Subnet is the network's CIDR.
func (n *Net) Subnet() string { return n.addr(0) + "/24" }

// Add makes a namespace for a node, joins it to the bridge and gives it
// the next address.
func (n *Net) Add(name string) (*Node, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.nodes[name]; ok {
		return nil, fmt.Errorf("netns: node %q exists", name)
	}
	idx := len(n.order) + 1
	if idx > 250 {
		return nil, errors.New("netns: at most 250 nodes")
	}
	nd := &Node{Name: name, NS: fmt.Sprintf("%s%s-%d-%d", namePrefix, n.id, n.subnet, idx), IP: n.addr(idx),
		port: fmt.Sprintf("p%d", idx)}
	steps := [][]string{
		{"ip", "netns", "add", nd.NS},
		{"ip", "-n", nd.NS, "link", "set", "lo", "up"},
		{"ip", "link", "add", "name", "eth0", "netns", nd.NS, "type", "veth", "peer", "name", nd.port, "netns", n.bridge},
		{"ip", "-n", n.bridge, "link", "set", nd.port, "master", "br0", "up"},
		{"ip", "-n", nd.NS, "addr", "add", nd.IP + "/24", "dev", "eth0"},
		{"ip", "-n", nd.NS, "link", "set", "eth0", "up"},
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			_ = run("ip", "netns", "del", nd.NS)
			return nil, err
		}
	}
	n.nodes[name] = nd
	n.order = append(n.order, nd)
	return nd, nil
}

// Node finds a node by name.
func (n *Net) Node(name string) (*Node, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	nd, ok := n.nodes[name]
	return nd, ok
}

// Exec is the command prefix that runs a program inside a node's namespace.
func (nd *Node) Exec() []string { return []string{"ip", "netns", "exec", nd.NS} }

func (n *Net) lookup(names ...string) ([]*Node, error) {
	out := make([]*Node, len(names))
	for i, name := range names {
		nd, ok := n.nodes[name]
		if !ok {
			return nil, fmt.Errorf("netns: no node %q", name)
		}
		out[i] = nd
	}
	return out, nil
}

// Cut drops every packet between a and each of peers, both ways. Packets
// vanish on the bridge, so neither end gets an error, as on a real network.
func (n *Net) Cut(a string, peers ...string) error {
	return n.change(append([]string{a}, peers...), func(nodes []*Node) {
		for _, p := range nodes[1:] {
			n.drops[[2]string{nodes[0].IP, p.IP}] = true
			n.drops[[2]string{p.IP, nodes[0].IP}] = true
		}
	})
}

// CutOneWay drops packets from a to each of peers; the other direction
// still flows.
func (n *Net) CutOneWay(a string, peers ...string) error {
	return n.change(append([]string{a}, peers...), func(nodes []*Node) {
		for _, p := range nodes[1:] {
			n.drops[[2]string{nodes[0].IP, p.IP}] = true
		}
	})
}

// Partition cuts every node of side from every node of other.
func (n *Net) Partition(side, other []string) error {
	for _, a := range side {
		if err := n.Cut(a, other...); err != nil {
			return err
		}
	}
	return nil
}

// Loss drops pct percent of a node's packets to and from other nodes, each
// way, at random. Traffic with the test's own address (HostIP) is spared:
// a job's target lives there, and a request lost on the way to it would be
// counted failed by the worker yet maybe answered by the target, so counts
// could not be compared exactly.
func (n *Net) Loss(name string, pct int) error {
	if pct < 0 || pct > 100 {
		return fmt.Errorf("netns: loss %d%% out of range", pct)
	}
	return n.change([]string{name}, func(nodes []*Node) { n.loss[nodes[0].IP] = pct })
}

// Heal removes every rule touching the named nodes (all nodes when none
// are named) and brings their links up.
func (n *Net) Heal(names ...string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	heal := n.order
	if len(names) > 0 {
		var err error
		if heal, err = n.lookup(names...); err != nil {
			return err
		}
	}
	for _, nd := range heal {
		delete(n.loss, nd.IP)
		for pair := range n.drops {
			if pair[0] == nd.IP || pair[1] == nd.IP {
				delete(n.drops, pair)
			}
		}
	}
	errs := []error{n.applyLocked()}
	for _, nd := range heal {
		errs = append(errs, run("ip", "-n", nd.NS, "link", "set", "eth0", "up"))
	}
	return errors.Join(errs...)
}

// LinkDown takes a node's only link down: it is cut from everything,
// including the test process, and its own sends fail at once.
func (n *Net) LinkDown(name string) error { return n.link(name, "down") }

// LinkUp brings a node's link back.
func (n *Net) LinkUp(name string) error { return n.link(name, "up") }

func (n *Net) link(name, state string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	nodes, err := n.lookup(name)
	if err != nil {
		return err
	}
	return run("ip", "-n", nodes[0].NS, "link", "set", "eth0", state)
}

func (n *Net) change(names []string, f func([]*Node)) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	nodes, err := n.lookup(names...)
	if err != nil {
		return err
	}
	f(nodes)
	return n.applyLocked()
}

// applyLocked replaces the bridge's whole fault table in one nft
// transaction.
func (n *Net) applyLocked() error { return nft(n.bridge, n.ruleset()) }

// ruleset is the fault table: a bridge-family forward chain on br0, so
// every packet between two nodes passes it and a dropped one just
// vanishes (a drop in a node's own output chain would fail the send with
// EPERM, which no real network does). Loss first, then the cuts.
func (n *Net) ruleset() string {
	var rules []string
	for _, ip := range slices.Sorted(maps.Keys(n.loss)) {
		pct := n.loss[ip]
		match := ""
		if pct < 100 {
			match = fmt.Sprintf(" numgen random mod 100 < %d", pct)
		}
		if pct > 0 {
			rules = append(rules,
				fmt.Sprintf("ip saddr %s ip daddr != %s%s drop", ip, n.hostIP, match),
				fmt.Sprintf("ip daddr %s ip saddr != %s%s drop", ip, n.hostIP, match))
		}
	}
	pairs := slices.SortedFunc(maps.Keys(n.drops), func(a, b [2]string) int {
		if c := strings.Compare(a[0], b[0]); c != 0 {
			return c
		}
		return strings.Compare(a[1], b[1])
	})
	for _, p := range pairs {
		rules = append(rules, fmt.Sprintf("ip saddr %s ip daddr %s drop", p[0], p[1]))
	}
	var b strings.Builder
	// Declaring the table first makes the delete valid on the first apply.
	b.WriteString("table bridge tempest\ndelete table bridge tempest\ntable bridge tempest {\n")
	b.WriteString("  chain forward {\n    type filter hook forward priority 0; policy accept;\n")
	for _, r := range rules {
		b.WriteString("    " + r + "\n")
	}
	b.WriteString("  }\n}\n")
	return b.String()
}

// Rules returns the fault table as nft prints it.
func (n *Net) Rules() (string, error) {
	out, err := exec.Command("ip", "netns", "exec", n.bridge, "nft", "list", "table", "bridge", "tempest").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("netns: nft list in %s: %v: %s", n.bridge, err, out)
	}
	return string(out), nil
}

// Close deletes every namespace and the root-side link. Processes still
// running inside a node namespace keep it alive until they exit; the
// caller stops them first.
func (n *Net) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for _, nd := range n.order {
		errs = append(errs, run("ip", "netns", "del", nd.NS))
	}
	n.order, n.nodes = nil, map[string]*Node{}
	if linkExists(n.hostIf) {
		errs = append(errs, run("ip", "link", "del", n.hostIf))
	}
	errs = append(errs, run("ip", "netns", "del", n.bridge))
	return errors.Join(errs...)
}

func linkExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

func nft(ns, rules string) error {
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("netns: nft in %s: %v: %s\n%s", ns, err, bytes.TrimSpace(out), rules)
	}
	return nil
}

func run(args ...string) error {
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("netns: %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
