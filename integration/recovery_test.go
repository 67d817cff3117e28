package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"tempest/api"
	"tempest/integration/checker"
	"tempest/internal/devcluster"
	"tempest/internal/testutil"
	"tempest/wire"
)

// viewTimeout bounds one ask of one node's API while the cluster is
// checked for wholeness: a node that does not answer in that long (paused,
// or forwarding to a leader that hangs) is passed over for the next one,
// not waited on for the whole check.
const viewTimeout = 2 * time.Second

// awaitWhole waits, up to within, until the cluster is whole again: every
// datacenter ready, every node alive in the views that list it, and a probe
// job through the entry points completed. It returns how long that took,
// or what was still missing when within ran out.
func (p *pcluster) awaitWhole(within time.Duration, dcs int) (time.Duration, error) {
	p.t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if _, err := p.WaitReady(ctx); err != nil {
		return 0, fmt.Errorf("not ready: %w", err)
	}
	var last error
	for {
		if last = p.allAlive(ctx); last == nil {
			break
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("a node is not alive in every view %s after the check began (bound %s): %w",
				time.Since(start).Round(100*time.Millisecond), within, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
	for {
		id, ans := p.submitLoad("probe", 5, "1s", dcs)
		if ans == checker.Acked {
			st, err := p.awaitTerminal(ctx, id)
			if err != nil {
				return 0, fmt.Errorf("probe job %s: %w", id, err)
			}
			if st.Status != wire.JobCompleted {
				return 0, fmt.Errorf("probe job %s ended %s", id, st.Status)
			}
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("no probe job acknowledged within %s (the last answer: %s)", within, ans)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// awaitTerminal polls a job through the entry points until it ends.
func (p *pcluster) awaitTerminal(ctx context.Context, id string) (*api.JobStatus, error) {
	for {
		qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		st, err := p.client.Job(qctx, id)
		cancel()
		if err == nil && st.Status.Terminal() {
			return st, nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("still %s", st.Status)
			}
			return nil, fmt.Errorf("not ended: %w", err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// allAlive checks that every node is alive in the views that list it:
// each datacenter's leader lists that datacenter's managers and workers,
// and, with gates, the gate leader lists every gate and every manager.
// A view is asked of the group's nodes one at a time (each forwards to its
// leader), so one node that hangs does not hide the others' answer.
func (p *pcluster) allAlive(ctx context.Context) error {
	var errs []error
	for _, dc := range p.Datacenters() {
		want := append(p.namesOf("manager", dc), p.namesOf("worker", dc)...)
		errs = append(errs, p.aliveIn(ctx, dc, p.namesOf("manager", dc), want))
	}
	if gates := p.namesOf("gate", ""); len(gates) > 0 {
		errs = append(errs, p.aliveIn(ctx, "gates", gates, append(slices.Clone(gates), p.namesOf("manager", "")...)))
	}
	return errors.Join(errs...)
}

// aliveIn asks the nodes named by ask, in turn, for the cluster view until
// one answers, and checks that it lists every node of want alive.
func (p *pcluster) aliveIn(ctx context.Context, group string, ask, want []string) error {
	var view *api.ClusterView
	var errs []error
	for _, name := range ask {
		n, ok := p.Node(name)
		if !ok || n.API == "" {
			continue
		}
		v, err := p.viewOf(ctx, n)
		if err == nil {
			view = v
			break
		}
		errs = append(errs, fmt.Errorf("%s: %w", name, err))
	}
	if view == nil {
		return fmt.Errorf("%s: no view: %w", group, errors.Join(errs...))
	}
	seen := map[string]api.NodeView{}
	for _, n := range view.Nodes {
		seen[n.Name] = n
	}
	var missing []string
	for _, name := range want {
		n, ok := seen[name]
		switch {
		case !ok:
			missing = append(missing, name+" (absent)")
		case !nodeAlive(n):
			missing = append(missing, fmt.Sprintf("%s (%s, term %d)", name, n.State, n.Term))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s: not alive in the leader's view: %v", group, missing)
	}
	return nil
}

func (p *pcluster) viewOf(ctx context.Context, n *devcluster.Node) (*api.ClusterView, error) {
	cl, err := api.NewClient([]string{"http://" + n.API}, p.Token(), api.WithRequestTimeout(viewTimeout))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return cl.Cluster(ctx)
}

// nodeAlive: a manager or gate "alive", a worker registered and in a state
// that takes work.
func nodeAlive(n api.NodeView) bool {
	if n.Role == string(wire.RoleWorker) {
		return n.TotalCores > 0 && (n.State == "HEALTHY" || n.State == "DEGRADED")
	}
	return n.State == "alive"
}

// wholeBound is how long a cluster whose every fault is lifted may take to
// be whole again: a restarted node's SWIM join retries back off to 30
// heartbeat intervals (15 s with the test profile), its refutation of
// the death its peers remember crosses the group within a push/pull
// interval, and an election, the workers' re-registration and a probe
// job take a few seconds more.
const wholeBound = 45 * time.Second

// A manager restarted with the same id and address after SIGKILL rejoins
// SWIM and its group, whatever its peers last knew of the killed process:
// declared dead by them first, or restarted while cut off from them (its
// joins fail until the cut heals). A manager cut off from every node for
// longer than SWIM remembers the dead is a member again once the cut heals.
func TestManagerRejoinsOnceItsFaultEnds(t *testing.T) {
	p := startPartitioned(t, devcluster.Options{Gates: 3, Datacenters: 1, Managers: 3, Workers: 1, LeaseTTL: 5 * time.Second})
	managers := p.namesOf("manager", "dc1")
	others := func(n string) []string { return without(p.namesOf("", ""), n) }
	steps := []struct {
		name  string
		fault func(t *testing.T, n string)
	}{
		{"declared dead, then restarted", func(t *testing.T, n string) {
			if err := p.Kill(n); err != nil {
				t.Fatal(err)
			}
			p.awaitDeadInView(t, n, 30*time.Second)
			if err := p.Restart(n); err != nil {
				t.Fatal(err)
			}
		}},
		{"restarted while cut off, then healed", func(t *testing.T, n string) {
			if err := p.net.Cut(n, others(n)...); err != nil {
				t.Fatal(err)
			}
			if err := p.Kill(n); err != nil {
				t.Fatal(err)
			}
			p.awaitDeadInView(t, n, 30*time.Second)
			if err := p.Restart(n); err != nil {
				t.Fatal(err)
			}
			// Part of the fault: the restarted node's first joins fail.
			time.Sleep(3 * time.Second)
			if err := p.net.Heal(); err != nil {
				t.Fatal(err)
			}
		}},
		{"cut off from every node until its peers forgot it, then healed", func(t *testing.T, n string) {
			if err := p.net.Cut(n, others(n)...); err != nil {
				t.Fatal(err)
			}
			p.awaitDeadInView(t, n, 30*time.Second)
			// Part of the fault: the test profile gossips to the dead for
			// 5 s; past that, neither side contacts the other on its own.
			time.Sleep(8 * time.Second)
			if err := p.net.Heal(); err != nil {
				t.Fatal(err)
			}
		}},
	}
	// Subtests on one cluster, in order (-run picks some): each begins
	// once the one before has left the cluster whole.
	for i, s := range steps {
		n := managers[i%len(managers)]
		if !t.Run(s.name, func(t *testing.T) {
			s.fault(t, n)
			took, err := p.awaitWhole(wholeBound, 1)
			if err != nil {
				p.dumpStacks()
				t.Fatalf("%s: not whole within %s of the fault's end: %v", n, wholeBound, err)
			}
			t.Logf("%s: whole again %s after the fault's end", n, took.Round(10*time.Millisecond))
		}) {
			return
		}
	}
}

// awaitDeadInView waits until the datacenter's leader lists n as dead.
func (p *pcluster) awaitDeadInView(t *testing.T, n string, within time.Duration) {
	t.Helper()
	node, _ := p.Node(n)
	testutil.Eventually(t, within, 200*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*viewTimeout)
		defer cancel()
		for _, m := range without(p.namesOf("manager", node.DC), n) {
			mn, _ := p.Node(m)
			v, err := p.viewOf(ctx, mn)
			if err != nil {
				continue
			}
			for _, nv := range v.Nodes {
				if nv.Name == n && nv.State == "dead" {
					return nil
				}
			}
			return fmt.Errorf("%s is not dead in %s's view yet", n, m)
		}
		return errors.New("no view")
	})
}

// dumpStacks asks every running node for its goroutines (SIGQUIT: the Go
// runtime writes them to the node's log and exits), so a cluster that did
// not recover shows where each node waits. It ends the nodes: call it only
// once the test has failed.
func (p *pcluster) dumpStacks() {
	for _, n := range p.Nodes() {
		if !p.Running(n.Name) {
			continue
		}
		_ = p.Signal(n.Name, syscall.SIGCONT) // a paused node cannot dump
		if err := p.Signal(n.Name, syscall.SIGQUIT); err == nil {
			_ = p.Wait(n.Name, 10*time.Second)
		}
	}
	p.t.Logf("every node's goroutines are in its log (SIGQUIT)")
}
