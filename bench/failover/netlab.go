package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// netLab is a private network for the nodes: one namespace per node, each
// with an eth0 plugged into a bridge that lives in a namespace of its own,
// so nothing of the host's network is touched. Loss is applied to every
// packet crossing the bridge, once: with tc netem on the egress of each
// bridge port, or, on kernels built without netem, with an nftables rule in
// the bridge's forward hook that drops a random share of frames (the sender
// sees no error either way, as with loss on a real link).
//
// Addresses come from 198.18.0.0/15, the range RFC 2544 reserves for
// benchmarking, and exist only inside these namespaces.
type netLab struct {
	log    *slog.Logger
	prefix string
	bridge string   // namespace holding the bridge
	nodeNS []string // namespace of node i
	addrs  []string // IP of node i
	lossPc float64
	method string // "netem" or "nftables"
	made   []string
}

const (
	labSubnet  = "198.18.0.%d"
	labBridge  = "br0"
	nftTable   = "tempest_loss"
	cmdTimeout = 20 * time.Second
)

// checkLabTools makes sure ip and tc are present, installing iproute2
// (and, if asked for, nftables) with apt-get when install is set.
func checkLabTools(ctx context.Context, install bool, log *slog.Logger) error {
	if os.Geteuid() != 0 {
		return errors.New("-netns-loss needs root (network namespaces, bridge, qdiscs)")
	}
	missing := missingTools("ip", "tc")
	if len(missing) == 0 {
		return nil
	}
	if !install {
		return fmt.Errorf("-netns-loss needs %s (package iproute2); install it or rerun with -install", strings.Join(missing, " and "))
	}
	return aptInstall(ctx, log, "iproute2")
}

func missingTools(names ...string) []string {
	var missing []string
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			missing = append(missing, n)
		}
	}
	return missing
}

// aptInstall installs packages, refreshing the package lists once if the
// first attempt fails (a fresh machine may have none).
func aptInstall(ctx context.Context, log *slog.Logger, pkgs ...string) error {
	log.Info("installing packages", "pkgs", pkgs)
	args := append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)
	if _, err := run(ctx, "apt-get", args...); err == nil {
		return nil
	}
	if _, err := run(ctx, "apt-get", "update"); err != nil {
		return fmt.Errorf("apt-get update: %w", err)
	}
	if _, err := run(ctx, "apt-get", args...); err != nil {
		return fmt.Errorf("apt-get install %s: %w", strings.Join(pkgs, " "), err)
	}
	return nil
}

// run executes a command and returns its stdout; errors carry its stderr.
func run(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

var labName = regexp.MustCompile(`^tfo(\d+)-(br|n\d+)$`)

// removeStaleLabs deletes namespaces left by a driver that was killed
// outright (SIGKILL leaves no chance to clean up): those named after a
// process that no longer exists.
func removeStaleLabs(ctx context.Context, log *slog.Logger) {
	out, err := run(ctx, "ip", "netns", "list")
	if err != nil {
		log.Warn("listing network namespaces", "err", err)
		return
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		m := labName.FindStringSubmatch(f[0])
		if m == nil {
			continue
		}
		if _, err := os.Stat("/proc/" + m[1]); err == nil {
			continue // its driver is still running
		}
		log.Info("removing stale namespace of a dead run", "ns", f[0])
		if _, err := run(ctx, "ip", "netns", "del", f[0]); err != nil {
			log.Warn("removing stale namespace", "ns", f[0], "err", err)
		}
	}
}

// newNetLab builds the namespaces for n nodes with lossPc percent loss.
// On error, whatever was built is torn down before returning.
func newNetLab(ctx context.Context, n int, lossPc float64, install bool, log *slog.Logger) (lab *netLab, err error) {
	removeStaleLabs(ctx, log)
	prefix := fmt.Sprintf("tfo%d", os.Getpid())
	lab = &netLab{log: log, prefix: prefix, bridge: prefix + "-br", lossPc: lossPc}
	defer func() {
		if err != nil {
			lab.Close()
			lab = nil
		}
	}()
	if err := lab.add(ctx, lab.bridge); err != nil {
		return lab, err
	}
	steps := [][]string{
		{"-n", lab.bridge, "link", "set", "lo", "up"},
		{"-n", lab.bridge, "link", "add", labBridge, "type", "bridge"},
		{"-n", lab.bridge, "link", "set", labBridge, "up"},
	}
	if err := ipSteps(ctx, steps); err != nil {
		return lab, err
	}
	for i := range n {
		ns := fmt.Sprintf("%s-n%d", prefix, i+1)
		if err := lab.add(ctx, ns); err != nil {
			return lab, err
		}
		port := fmt.Sprintf("p%d", i+1)
		addr := fmt.Sprintf(labSubnet, i+1)
		steps := [][]string{
			{"-n", ns, "link", "set", "lo", "up"},
			{"-n", lab.bridge, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns},
			{"-n", lab.bridge, "link", "set", port, "master", labBridge},
			{"-n", lab.bridge, "link", "set", port, "up"},
			{"-n", ns, "addr", "add", addr + "/24", "dev", "eth0"},
			{"-n", ns, "link", "set", "eth0", "up"},
		}
		if err := ipSteps(ctx, steps); err != nil {
			return lab, err
		}
		lab.nodeNS = append(lab.nodeNS, ns)
		lab.addrs = append(lab.addrs, addr)
	}
	if lossPc > 0 {
		if err := lab.applyLoss(ctx, install); err != nil {
			return lab, err
		}
	}
	log.Info("network namespaces ready", "bridge", lab.bridge, "nodes", lab.nodeNS, "loss_percent", lossPc, "method", lab.method)
	return lab, nil
}

func (l *netLab) add(ctx context.Context, ns string) error {
	if _, err := run(ctx, "ip", "netns", "add", ns); err != nil {
		return err
	}
	l.made = append(l.made, ns)
	return nil
}

func ipSteps(ctx context.Context, steps [][]string) error {
	for _, s := range steps {
		if _, err := run(ctx, "ip", s...); err != nil {
			return err
		}
	}
	return nil
}

func (l *netLab) applyLoss(ctx context.Context, install bool) error {
	pc := strconv.FormatFloat(l.lossPc, 'f', -1, 64) + "%"
	var netemErr error
	for i := range l.nodeNS {
		port := fmt.Sprintf("p%d", i+1)
		if _, err := run(ctx, "tc", "-n", l.bridge, "qdisc", "add", "dev", port, "root", "netem", "loss", pc); err != nil {
			netemErr = err
			break
		}
	}
	if netemErr == nil {
		l.method = "netem"
		return nil
	}
	// Undo any port that did take netem before switching method.
	for i := range l.nodeNS {
		_, _ = run(ctx, "tc", "-n", l.bridge, "qdisc", "del", "dev", fmt.Sprintf("p%d", i+1), "root")
	}
	l.log.Warn("tc netem unavailable (kernel built without sch_netem?); dropping with nftables instead", "err", netemErr)
	if len(missingTools("nft")) > 0 {
		if !install {
			return fmt.Errorf("tc netem failed (%w) and the nftables fallback needs nft; install nftables or rerun with -install", netemErr)
		}
		if err := aptInstall(ctx, l.log, "nftables"); err != nil {
			return err
		}
	}
	// numgen draws per packet; losing pc percent means dropping when the
	// draw over 0..9999 is below pc*100.
	threshold := int(l.lossPc*100 + 0.5)
	ruleset := fmt.Sprintf(`table bridge %[1]s {
	chain forward {
		type filter hook forward priority 0; policy accept;
		counter
		numgen random mod 10000 < %[2]d counter drop
	}
}
`, nftTable, threshold)
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", l.bridge, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(ruleset)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft ruleset: %w: %s", err, strings.TrimSpace(string(out)))
	}
	l.method = "nftables"
	return nil
}

var nftCounter = regexp.MustCompile(`counter packets (\d+) bytes \d+`)

// lossStats reports how many packets crossed the bridge and how many the
// loss rule dropped, when the method keeps such counters.
func (l *netLab) lossStats(ctx context.Context) (seen, dropped uint64, err error) {
	if l.method != "nftables" {
		return 0, 0, errors.New("counters are read only for the nftables method")
	}
	out, err := run(ctx, "ip", "netns", "exec", l.bridge, "nft", "list", "table", "bridge", nftTable)
	if err != nil {
		return 0, 0, err
	}
	m := nftCounter.FindAllStringSubmatch(out, -1)
	if len(m) != 2 {
		return 0, 0, fmt.Errorf("expected 2 counters in nft output, found %d", len(m))
	}
	seen, _ = strconv.ParseUint(m[0][1], 10, 64)
	dropped, _ = strconv.ParseUint(m[1][1], 10, 64)
	return seen, dropped, nil
}

// Close deletes every namespace the lab made; veth pairs, the bridge and
// the loss rules go with them. It does not depend on the caller's context,
// so it also runs after Ctrl-C.
func (l *netLab) Close() {
	ctx := context.Background()
	for i := len(l.made) - 1; i >= 0; i-- {
		if _, err := run(ctx, "ip", "netns", "del", l.made[i]); err != nil {
			l.log.Error("deleting network namespace", "ns", l.made[i], "err", err)
		}
	}
	l.made = nil
}
