package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tempest/api"
	"tempest/gate"
	"tempest/internal/devcluster"
	"tempest/internal/target"
	"tempest/internal/testutil"
	"tempest/wire"
)

// A datacenter of three managers grows to five and shrinks back to three
// while a job runs, one change at a time through the API: each manager
// added starts SYNCING (a learner, counting toward nothing) and is promoted
// by the leader once it has copied the leader's jobs; each one removed
// stops by itself, saying why. The job completes with the target's exact
// count, no two managers ever lead one term, and a removed manager
// restarted with its old configuration and data is refused and exits,
// naming the reason, without moving anybody's term.
func TestManagersGrowToFiveAndShrinkToThreeWhileAJobRuns(t *testing.T) {
	// The lan profile (a 1 s election timeout), as in the handover tests:
	// the test profile's leaders flap on a host this loaded, and each
	// change waits for the group to settle.
	c := startWith(t, devcluster.Options{Managers: 3, Workers: 2, CoresPerWorker: 2, ElectionProfile: "lan",
		ManagerConfig: map[string]any{"api_rate_limit": 1000, "api_rate_burst": 1000}})
	dc := c.Datacenters()[0]
	tgt := startTarget(t, target.DefaultConfig())
	id := c.submit(httpJob("grow-shrink", "http://"+tgt.Addr(), 2, "20s", ""))
	c.waitRunning(id)

	var managers []string
	for _, n := range c.Nodes() {
		if n.Role == "manager" {
			managers = append(managers, n.Name)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	watch := c.watchLeaders(ctx, &wg, managers)

	// Grow: add, then start, each new manager; it syncs and is promoted.
	var added []string
	for range 2 {
		n, err := c.AddManager(dc)
		if err != nil {
			t.Fatal(err)
		}
		g := c.changeMembers(func(ctx context.Context, cl *api.Client) (*api.GroupView, error) {
			return cl.AddMember(ctx, api.MemberChange{ID: n.Name, Addr: n.QUIC})
		})
		if m, ok := member(g, n.Name); !ok || m.Voter {
			t.Fatalf("%s added as %+v, want a learner (SYNCING): %+v", n.Name, m, g)
		}
		if err := c.Restart(n.Name); err != nil {
			t.Fatal(err)
		}
		c.watchLeader(ctx, &wg, watch, n.Name)
		added = append(added, n.Name)
		c.waitGroup(fmt.Sprintf("%s promoted", n.Name), func(g *api.GroupView) error {
			if m, ok := member(g, n.Name); !ok || !m.Voter || m.State == api.MemberSyncing || m.State == api.MemberUnreachable {
				return fmt.Errorf("%s is %+v", n.Name, m)
			}
			return nil
		})
	}
	g := c.waitGroup("five voters", func(g *api.GroupView) error {
		if n := votersOf(g); n != 5 || g.Quorum != 3 {
			return fmt.Errorf("%d voters, quorum %d", n, g.Quorum)
		}
		return nil
	})
	t.Logf("grown: epoch %d, %v", g.Epoch, g.Members)
	if st := c.status(id); st.Status.Terminal() {
		t.Logf("note: the job ended (%s) before the group shrank; the load was slower than the changes", st.Status)
	}

	// Shrink: an original manager that does not lead, then the newest.
	lead := c.leader()
	var first string
	for _, name := range managers {
		if name != lead {
			first = name
			break
		}
	}
	for _, gone := range []string{first, added[len(added)-1]} {
		c.changeMembers(func(ctx context.Context, cl *api.Client) (*api.GroupView, error) {
			return cl.RemoveMember(ctx, gone)
		})
		c.waitFailed(gone)
		c.logHas(gone, "removed from the manager group")
	}
	g = c.waitGroup("three voters", func(g *api.GroupView) error {
		if n := votersOf(g); n != 3 || g.Quorum != 2 || len(g.Members) != 3 {
			return fmt.Errorf("%d voters of %d members, quorum %d", n, len(g.Members), g.Quorum)
		}
		for _, m := range g.Members {
			if m.State == api.MemberUnreachable || m.State == api.MemberSyncing {
				return fmt.Errorf("%s is %s", m.ID, m.State)
			}
		}
		return nil
	})
	t.Logf("shrunk: epoch %d, %v", g.Epoch, g.Members)

	st := c.waitStatus(id, 90*time.Second, terminal)
	if st.Status != wire.JobCompleted {
		t.Fatalf("job ended %s (%s) across the membership changes", st.Status, st.Error)
	}
	if reported, seen := reportedRequests(st), tgt.Stats().Requests; reported != seen || seen == 0 {
		t.Fatalf("job reports %d requests, the target answered %d", reported, seen)
	}

	// The first manager removed comes back with its old config and data:
	// it says why and exits without campaigning (it cannot move anybody's
	// term). The one removed second (the newest) comes back too: same.
	for _, gone := range []string{first, added[len(added)-1]} {
		n, _ := c.Node(gone)
		before, err := os.ReadFile(n.Log)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Restart(gone); err != nil {
			t.Fatal(err)
		}
		c.waitFailed(gone)
		after, err := os.ReadFile(n.Log)
		if err != nil {
			t.Fatal(err)
		}
		again := string(after[len(before):])
		if !strings.Contains(again, "no longer a member of its group") {
			t.Fatalf("%s restarted after its removal without saying why it stops:\n%s", gone, again)
		}
		if strings.Contains(again, "state=pre-candidate") || strings.Contains(again, "state=candidate") {
			t.Fatalf("%s campaigned after its removal:\n%s", gone, again)
		}
	}
	cancel()
	wg.Wait()
	if len(watch.doubled) > 0 {
		t.Fatalf("two leaders: %v", watch.doubled)
	}
}

// A gate is added and another removed while a two-datacenter job runs,
// through the gates' API: the new gate is SYNCING, then promoted; the
// removed one stops saying why; the job completes with the target's exact
// count.
func TestGateAddedAndAnotherRemovedWhileATwoDatacenterJobRuns(t *testing.T) {
	c := startWith(t, devcluster.Options{Gates: 3, Datacenters: 2, Managers: 1, Workers: 1, CoresPerWorker: 2,
		LeaseTTL: gate.DefaultConfig().LeaseTTL, ElectionProfile: "lan"})
	tgt := startTarget(t, target.DefaultConfig())
	id := c.submit(gatedJob("gate-members", "http://"+tgt.Addr(), 2, "12s", 2))
	c.waitRunning(id)
	gates := func() []string {
		var out []string
		for _, n := range c.Nodes() {
			if n.Role == "gate" && c.Running(n.Name) {
				out = append(out, n.API)
			}
		}
		for i, a := range out {
			out[i] = "http://" + a
		}
		return out
	}

	n, err := c.AddGate()
	if err != nil {
		t.Fatal(err)
	}
	g := c.changeVia(gates(), func(ctx context.Context, cl *api.Client) (*api.GroupView, error) {
		return cl.AddMember(ctx, api.MemberChange{ID: n.Name, Addr: n.QUIC})
	})
	if m, ok := member(g, n.Name); !ok || m.Voter || g.Name != "gates" {
		t.Fatalf("%s added as %+v to %s, want a learner of the gates", n.Name, m, g.Name)
	}
	if err := c.Restart(n.Name); err != nil {
		t.Fatal(err)
	}
	c.waitGroup(n.Name+" promoted", func(g *api.GroupView) error {
		if m, ok := member(g, n.Name); !ok || !m.Voter || m.State == api.MemberSyncing {
			return fmt.Errorf("%s is %+v", n.Name, m)
		}
		return nil
	})

	lead := c.gateLeader()
	var gone string
	for _, m := range []string{"gate-1", "gate-2", "gate-3"} {
		if m != lead {
			gone = m
			break
		}
	}
	c.changeVia(gates(), func(ctx context.Context, cl *api.Client) (*api.GroupView, error) {
		return cl.RemoveMember(ctx, gone)
	})
	c.waitFailed(gone)
	c.logHas(gone, "removed from the gate group")
	g = c.waitGroup("three gates", func(g *api.GroupView) error {
		if n := votersOf(g); n != 3 || g.Quorum != 2 || len(g.Members) != 3 {
			return fmt.Errorf("%d voters of %d members, quorum %d", n, len(g.Members), g.Quorum)
		}
		return nil
	})
	t.Logf("gates: epoch %d, %v", g.Epoch, g.Members)

	st := c.waitStatus(id, 90*time.Second, terminal)
	if st.Status != wire.JobCompleted {
		t.Fatalf("job ended %s: %s", st.Status, st.Error)
	}
	if got, want := uint64(st.TotalCompleted+st.TotalFailed), tgt.Stats().Requests; got != want || want == 0 {
		t.Fatalf("gate total %d, target answered %d", got, want)
	}
}

// changeMembers runs one membership change through the managers' API,
// again while the group is still settling a previous one (503).
func (c *cluster) changeMembers(change func(context.Context, *api.Client) (*api.GroupView, error)) *api.GroupView {
	c.t.Helper()
	return c.changeVia(c.ManagerAPIs(c.Datacenters()[0]), change)
}

// changeVia is changeMembers through the API endpoints apis.
func (c *cluster) changeVia(apis []string, change func(context.Context, *api.Client) (*api.GroupView, error)) *api.GroupView {
	c.t.Helper()
	cl, err := api.NewClient(apis, c.Token())
	if err != nil {
		c.t.Fatal(err)
	}
	defer cl.Close()
	var g *api.GroupView
	testutil.Eventually(c.t, 30*time.Second, 200*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		g, err = change(ctx, cl)
		var apiErr *api.Error
		if errors.As(err, &apiErr) && apiErr.Status < 500 {
			c.t.Fatalf("membership change refused: %v", err)
		}
		return err
	})
	return g
}

// waitGroup waits until the managers' group, as the leader has it, passes
// cond, and returns it.
func (c *cluster) waitGroup(what string, cond func(*api.GroupView) error) *api.GroupView {
	c.t.Helper()
	var g *api.GroupView
	testutil.Eventually(c.t, 60*time.Second, 100*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		view, err := c.client.Cluster(ctx)
		if err != nil {
			return err
		}
		if len(view.Groups) != 1 {
			return fmt.Errorf("%d groups in the cluster view", len(view.Groups))
		}
		g = &view.Groups[0]
		if err := cond(g); err != nil {
			return fmt.Errorf("%s: %w (epoch %d)", what, err, g.Epoch)
		}
		return nil
	})
	return g
}

// status is a job's status now.
func (c *cluster) status(id string) *api.JobStatus {
	c.t.Helper()
	return c.waitStatus(id, 10*time.Second, func(*api.JobStatus) error { return nil })
}

// waitFailed waits for name to exit by itself, with a failure status.
func (c *cluster) waitFailed(name string) {
	c.t.Helper()
	if err := c.Wait(name, 30*time.Second); err != nil {
		c.t.Fatal(err)
	}
	if c.ExitError(name) == nil {
		c.t.Fatalf("%s exited with status 0; want a failure", name)
	}
}

// logHas fails the test unless name's log holds s.
func (c *cluster) logHas(name, s string) {
	c.t.Helper()
	n, _ := c.Node(name)
	b, err := os.ReadFile(n.Log)
	if err != nil {
		c.t.Fatal(err)
	}
	if !strings.Contains(string(b), s) {
		c.t.Fatalf("%s's log does not say %q", name, s)
	}
}

func member(g *api.GroupView, id string) (api.MemberView, bool) {
	i := slices.IndexFunc(g.Members, func(m api.MemberView) bool { return m.ID == id })
	if i < 0 {
		return api.MemberView{}, false
	}
	return g.Members[i], true
}

func votersOf(g *api.GroupView) int {
	n := 0
	for _, m := range g.Members {
		if m.Voter {
			n++
		}
	}
	return n
}
