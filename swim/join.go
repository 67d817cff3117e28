package swim

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"time"
)

// KeepJoining calls join (a Node's Join, or a test's stand-in) with seeds
// until one answers or ctx ends, waiting base, then twice as long each time
// up to max, between attempts. cluster names the cluster in logs. It
// reports whether it joined. Every role runs it on its own goroutine at
// start: seeds may come up after the node does.
func KeepJoining(ctx context.Context, join func(context.Context, []string) (int, error), seeds []string,
	base, max time.Duration, cluster string, log *slog.Logger) bool {
	wait := base
	for attempt := 1; ; attempt++ {
		n, err := join(ctx, seeds)
		if err == nil {
			log.Info("joined "+cluster, "contacted", n, "seeds", seeds)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		// Every failure while the waits grow, then one in ten: a seed that
		// stays down must not flood the log.
		if wait < max || attempt%10 == 0 {
			log.Warn("join "+cluster+" failed; retrying", "seeds", seeds, "attempt", attempt, "err", err, "retry_in", wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		wait = min(wait*2, max)
	}
}

// KeepJoined joins seeds as KeepJoining does, then keeps them joined until
// ctx ends: every push/pull interval of the node's profile, the seeds that
// are not live members are contacted again.
//
// memberlist never contacts a node it has declared dead once it stops
// gossiping to the dead (GossipToTheDeadTime), and a node cut off from all
// its peers declares each of them dead as they declare it. When the cut
// heals, nobody probes anybody across it, and the two sides stay apart for
// good: a manager its peers keep listing as dead, or a group with no
// quorum. Serf repairs this by reconnecting to failed members; this does
// it with the seeds, which are what an operator names as the cluster. A
// join is a push/pull: each side learns the other's word on it (dead) and
// refutes it with a higher incarnation, so a round or two after the heal
// both sides list each other alive.
func (n *Node) KeepJoined(ctx context.Context, seeds []string, base, max time.Duration, cluster string, log *slog.Logger) {
	if !KeepJoining(ctx, n.Join, seeds, base, max, cluster, log) {
		return
	}
	t := time.NewTicker(n.rejoinEvery)
	defer t.Stop()
	away := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		absent := n.absent(ctx, seeds)
		if len(absent) == 0 {
			away = false
			continue
		}
		c, err := n.join(ctx, absent, true)
		switch {
		case err == nil && c > 0:
			log.Info("contacted "+cluster+" seeds that were not live members", "seeds", absent, "contacted", c)
		case err != nil && !away && ctx.Err() == nil:
			// Once per absence: the seed may be down for long.
			log.Info(cluster+" seeds not live members and unreachable; retrying every push/pull interval",
				"seeds", absent, "every", n.rejoinEvery, "err", err)
			away = true
		}
	}
}

// absent returns the seeds that are neither this node nor a live member's
// address.
func (n *Node) absent(ctx context.Context, seeds []string) []string {
	live := map[string]bool{}
	for _, m := range n.Members() {
		live[m.Addr] = true
	}
	var out []string
	for _, s := range n.others(ctx, seeds) {
		if !live[s] && !slices.ContainsFunc(resolve(ctx, s), func(a string) bool { return live[a] }) {
			out = append(out, s)
		}
	}
	return out
}

// others drops this node's own address from addrs.
func (n *Node) others(ctx context.Context, addrs []string) []string {
	return slices.DeleteFunc(slices.Clone(addrs), func(a string) bool {
		return a == n.addr || slices.Contains(resolve(ctx, a), n.addr)
	})
}

// resolve turns host:port into ip:port forms, one per address of host (an
// IP literal is itself, without a lookup); nil if it does not resolve.
func resolve(ctx context.Context, hostport string) []string {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return []string{net.JoinHostPort(ip.Unmap().String(), port)}
	}
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		if a, ok := netip.AddrFromSlice(ip.IP); ok {
			out = append(out, net.JoinHostPort(a.Unmap().String(), port))
		}
	}
	return out
}
