package integration

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"tempest/api"
	"tempest/internal/devcluster"
)

// Every manager of a datacenter but one is replaced, one change at a time,
// while a paced exactly-once count pipeline runs: m4 added, m1 removed,
// m5 added, then the last original that does not lead is SIGKILLed and
// the leader is removed. The new leader can then read only the two added
// managers' stores, so it holds a checkpoint only if an added manager got
// it before it counted: the running pipeline's (copied while they were
// learners, or sent to them), and the rows of a pipeline that completed
// before any change (copied only: it writes nothing after). Both outputs
// equal the sequential pass.
//
// About two minutes with -race on a loaded host, so it runs with the chaos
// suite (CHAOS_DURATION set, as `make chaos` does).
func TestRainstormManagersReplacedExactlyOnce(t *testing.T) {
	if os.Getenv("CHAOS_DURATION") == "" {
		t.Skip("runs with the chaos suite (make chaos sets CHAOS_DURATION)")
	}
	const (
		before = 6000  // records of the pipeline done before the changes
		paced  = 60000 // records of the one running through them
		rate   = 1000  // a minute at least: the changes land mid-run
	)
	c := startWith(t, devcluster.Options{Managers: 3, Workers: 2, CoresPerWorker: 3, ElectionProfile: "lan",
		ManagerConfig: map[string]any{"api_rate_limit": 1000, "api_rate_burst": 1000}})
	dc := c.Datacenters()[0]

	doneID, doneOut := c.runPipeline(fmt.Sprintf(`name: before
timeout: 300s
workflows:
  - name: before
    type: rainstorm
    exactly_once: true
    source: {generate: {records: %d, keys: 17}}
    stages:
      - {name: low, op: filter, tasks: 2, field: value, matches: '^[0-4]?[0-9]?[0-9]$'}
      - {name: count, op: count, tasks: 2, key: key}
`, before), "before", 4*time.Minute)
	wantDone := generated(t, before, 17, keepLow)
	diffRows(t, "the pipeline done before the changes", doneOut.Rows, wantDone)

	id := c.submit(pacedJob(paced, rate, true))
	c.taskWorker(id, "paced", 3)

	var originals []string
	for _, n := range c.Nodes() {
		if n.Role == "manager" {
			originals = append(originals, n.Name)
		}
	}
	lead := c.leader()
	var others []string // the originals that do not lead
	for _, name := range originals {
		if name != lead {
			others = append(others, name)
		}
	}
	add := func() string {
		t.Helper()
		n, err := c.AddManager(dc)
		if err != nil {
			t.Fatal(err)
		}
		c.changeMembers(func(ctx context.Context, cl *api.Client) (*api.GroupView, error) {
			return cl.AddMember(ctx, api.MemberChange{ID: n.Name, Addr: n.QUIC})
		})
		if err := c.Restart(n.Name); err != nil {
			t.Fatal(err)
		}
		c.waitGroup(n.Name+" promoted", func(g *api.GroupView) error {
			if m, ok := member(g, n.Name); !ok || !m.Voter || m.State == api.MemberSyncing || m.State == api.MemberUnreachable {
				return fmt.Errorf("%s is %+v", n.Name, m)
			}
			return nil
		})
		c.logHas(n.Name, "copied the leader's checkpoints")
		// The API through every manager, added ones included: the
		// originals go.
		cl, err := api.NewClient(c.ManagerAPIs(dc), c.Token())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		c.client = cl
		return n.Name
	}
	remove := func(gone string) {
		t.Helper()
		c.changeMembers(func(ctx context.Context, cl *api.Client) (*api.GroupView, error) {
			return cl.RemoveMember(ctx, gone)
		})
		c.waitFailed(gone)
		c.logHas(gone, "removed from the manager group")
	}

	m4 := add()
	remove(others[0])
	m5 := add()
	if st := c.status(id); st.Status.Terminal() {
		t.Fatalf("the paced pipeline ended (%s) before the last change: it must run through them", st.Status)
	}
	// With the last other original down, a majority of {original, m4, m5}
	// is {m4, m5}: the new leader reads only what they hold.
	if err := c.Kill(others[1]); err != nil {
		t.Fatal(err)
	}
	if now := c.leader(); now != lead {
		t.Logf("note: %s leads now, not %s; removing %s all the same", now, lead, lead)
	}
	remove(lead)
	g := c.waitGroup("three voters, the new ones leading", func(g *api.GroupView) error {
		if n := votersOf(g); n != 3 || g.Quorum != 2 {
			return fmt.Errorf("%d voters, quorum %d", n, g.Quorum)
		}
		i := slices.IndexFunc(g.Members, func(m api.MemberView) bool { return m.State == api.MemberLeader })
		if i < 0 || (g.Members[i].ID != m4 && g.Members[i].ID != m5) {
			return fmt.Errorf("no added manager leads: %+v", g.Members)
		}
		return nil
	})
	t.Logf("replaced: epoch %d, %+v", g.Epoch, g.Members)

	out := c.finish(id, "paced")
	diffRows(t, "the paced pipeline across the changes", out.Rows, generated(t, paced, 17, keepLow))
	again, err := c.output(doneID, "before")
	if err != nil {
		t.Fatal(err)
	}
	if !again.Complete {
		t.Fatalf("the pipeline done before the changes shows incomplete output after them: %+v", again.Tasks)
	}
	diffRows(t, "the pipeline done before the changes, read after them", again.Rows, wantDone)
}
