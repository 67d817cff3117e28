package gate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tempest/api"
	"tempest/internal/testutil"
	"tempest/leadership"
	"tempest/transport"
	"tempest/wire"
)

// hubGates runs gates on an in-memory hub: real gates, real elections,
// real bbolt files; only the network is simulated.
type hubGates struct {
	t     *testing.T
	hub   *transport.Hub
	ids   []string
	gates map[string]*Gate
	stop  map[string]func()
	// dirs keeps each gate's data directory, so a restart finds its disk.
	dirs map[string]string
	// tune, if set, adjusts each gate's config before it starts.
	tune func(*Config)
	// now, if set, is the gates' clock.
	now func() time.Time
}

func startHubGates(t *testing.T, hub *transport.Hub, ids []string, ttl time.Duration, tune ...func(*Config)) *hubGates {
	t.Helper()
	hg := &hubGates{t: t, hub: hub, ids: ids, gates: map[string]*Gate{}, stop: map[string]func(){}, dirs: map[string]string{}}
	if len(tune) > 0 {
		hg.tune = tune[0]
	}
	for _, id := range ids {
		hg.start(id, ttl)
	}
	return hg
}

func (hg *hubGates) start(id string, ttl time.Duration) {
	t := hg.t
	var peers []Peer
	for _, p := range hg.ids {
		peers = append(peers, Peer{ID: p, QUIC: p})
	}
	cfg := DefaultConfig()
	cfg.ID, cfg.Peers, cfg.SwimBind = id, peers, ""
	if hg.dirs[id] == "" {
		hg.dirs[id] = t.TempDir()
	}
	cfg.DataDir = hg.dirs[id]
	cfg.LeaseTTL, cfg.TickInterval, cfg.SyncTimeout, cfg.QuorumTimeout, cfg.DispatchTimeout = ttl, 20*time.Millisecond, 300*time.Millisecond, time.Second, 200*time.Millisecond
	// One record per state-sync page, so every sync pages.
	cfg.SyncPageBytes = 1
	cfg.Logger = testutil.Logger(t, slog.LevelInfo)
	if hg.tune != nil {
		hg.tune(&cfg)
	}
	tr := hg.hub.Node(id)
	profile := leadership.TestProfile()
	g, err := New(cfg, Deps{Transport: tr, ElectionProfile: &profile, Now: hg.now})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Run(ctx)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
			if err := g.Shutdown(context.Background()); err != nil {
				t.Errorf("shutdown %s: %v", id, err)
			}
			tr.Close()
		})
	}
	hg.gates[id], hg.stop[id] = g, stop
	t.Cleanup(stop)
}

func (hg *hubGates) leader(within time.Duration, among ...string) *Gate {
	hg.t.Helper()
	var found *Gate
	testutil.Eventually(hg.t, within, 10*time.Millisecond, func() error {
		for _, id := range among {
			if g := hg.gates[id]; g.IsLeader() {
				found = g
				return nil
			}
		}
		return fmt.Errorf("none of %v leads", among)
	})
	return found
}

// observe tells every gate that datacenter east's leader is the hub node m.
func (hg *hubGates) observe(version uint64) {
	for _, g := range hg.gates {
		g.observeManager(&wire.ManagerHeartbeat{NodeID: "east-1", Datacenter: "east", IsLeader: true, Term: 1, Version: version, Addr: "east-1", AvailableCores: 4})
	}
}

func sleepJob() *wire.JobSubmission {
	return &wire.JobSubmission{Name: "nap", DatacenterCount: 1, Workflows: []wire.WorkflowSpec{{Name: "nap", Type: "sleep", Cores: 1}}}
}

// A new gate leader takes every lease over under a token from its own term,
// reports renew a lease, and a lease nobody renews expires and fails its
// datacenter for the job.
func TestTakeoverRaisesFenceTokensAndExpiryFailsTheDatacenter(t *testing.T) {
	hub := transport.NewHub()
	ids := []string{"g1", "g2", "g3"}
	hg := startHubGates(t, hub, ids, 600*time.Millisecond)
	hg.observe(1)
	first := hg.leader(10*time.Second, ids...)
	ack, err := first.Submit(context.Background(), sleepJob())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(ack.Datacenters, ",") != "east" {
		t.Fatalf("datacenters %v, want east", ack.Datacenters)
	}
	id := ack.JobID
	before := first.leases(id)[0]
	if before.LeaseHolder != first.ID() || before.FenceToken>>32 != first.elector.Status().Term {
		t.Fatalf("lease %+v: want holder %s and a token from term %d", before, first.ID(), first.elector.Status().Term)
	}

	// The datacenter reports, as its manager leader would: the lease lives
	// on past its TTL while reports come.
	east := hub.Node("east-1")
	defer east.Close()
	report := func(to *Gate, st wire.JobStatus) (*wire.ProgressAck, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		reply, err := east.Call(ctx, to.ID(), &wire.JobProgress{JobID: id, Datacenter: "east", Status: st, TotalCompleted: 1, FenceToken: before.FenceToken})
		if err != nil {
			return nil, err
		}
		return reply.(*wire.ProgressAck), nil
	}
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
		if _, err := report(first, wire.JobRunning); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st, _ := first.Job(context.Background(), id); st.Status != wire.JobRunning {
		t.Fatalf("job %s while its datacenter reported (%s)", st.Status, st.Error)
	}

	// The leader goes; another takes the lease over with a newer token.
	hg.stop[first.ID()]()
	var rest []string
	for _, g := range ids {
		if g != first.ID() {
			rest = append(rest, g)
		}
	}
	second := hg.leader(10*time.Second, rest...)
	after := second.leases(id)[0]
	if after.LeaseHolder != second.ID() || after.FenceToken <= before.FenceToken || after.FenceToken>>32 != second.elector.Status().Term {
		t.Fatalf("after takeover lease %+v, before %+v: want holder %s and a newer token", after, before, second.ID())
	}
	// A report to a follower reaches the leader, whose answer names it.
	var follower *Gate
	for _, g := range rest {
		if g != second.ID() {
			follower = hg.gates[g]
		}
	}
	a, err := report(follower, wire.JobRunning)
	if err != nil || a.Leader != second.ID() {
		t.Fatalf("report through a follower: %+v, %v; want the leader %s named", a, err, second.ID())
	}

	// Reports stop: the lease expires and the datacenter fails the job.
	st := waitJob(t, second, id, 10*time.Second)
	if st.Status != wire.JobFailed || !strings.Contains(st.Error, "lease expired") {
		t.Fatalf("job ended %s (%q), want FAILED after the lease expired", st.Status, st.Error)
	}
	// A datacenter that reports after that is told to stop.
	if a, err := report(second, wire.JobRunning); err != nil || !a.Cancel {
		t.Fatalf("late report answered %+v, %v; want a cancel", a, err)
	}
}

// A gate that has not synced state from another gate may not lead: with
// its state sync blocked it stays out of elections even when it is one of
// the only two gates left, and once the sync goes through it holds every
// job. The gate left beside it is elected but does not serve meanwhile: the
// leases it took over cannot reach a majority of gates while the late one
// takes no records.
func TestLateGateMayNotLeadUntilSynced(t *testing.T) {
	hub := transport.NewHub()
	var block atomic.Bool
	block.Store(true)
	hub.SetHook(func(from, to string, msg wire.Message) bool {
		// While blocked, g3 gets no state at all: neither its own syncs
		// nor the leader's replicated records, so what it ends up holding
		// came through the (paged) sync. It still answers the others'
		// syncs (with nothing), so the gate left beside it can read a
		// majority and lead.
		_, sync := msg.(*wire.StateSyncRequest)
		_, rec := msg.(*wire.ReplicateGateRecord)
		return !(block.Load() && (sync && from == "g3" || rec && to == "g3"))
	})
	ids := []string{"g1", "g2", "g3"}
	hg := startHubGates(t, hub, ids, time.Minute)
	hg.observe(1)
	first := hg.leader(10*time.Second, "g1", "g2")
	var jobs []string
	for range 5 {
		ack, err := first.Submit(context.Background(), sleepJob())
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, ack.JobID)
	}
	late := hg.gates["g3"]
	var led atomic.Bool
	watchCtx, stopWatch := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watchCtx.Err() == nil {
			if late.lead.Held() != nil {
				led.Store(true)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	hg.stop[first.ID()]()
	other := "g1"
	if first.ID() == "g1" {
		other = "g2"
	}
	elected := hg.gates[other]
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if elected.lead.Held() == nil {
			return fmt.Errorf("%s not elected", other)
		}
		return nil
	})
	stopWatch()
	<-watched
	if led.Load() || late.Ready() {
		t.Fatalf("the unsynced gate led=%v ready=%v", led.Load(), late.Ready())
	}
	if elected.IsLeader() {
		t.Fatalf("%s serves though its takeover reached no majority", other)
	}
	block.Store(false)
	hg.leader(15*time.Second, other)
	testutil.Eventually(t, 15*time.Second, 20*time.Millisecond, func() error {
		if !late.Ready() {
			return errors.New("late gate not ready")
		}
		for _, id := range jobs { // five records, one sync page each
			if len(late.leases(id)) != 1 {
				return fmt.Errorf("late gate does not hold job %s", id)
			}
		}
		return nil
	})
}

func waitJob(t *testing.T, g *Gate, id string, within time.Duration) *api.JobStatus {
	t.Helper()
	var last *api.JobStatus
	testutil.Eventually(t, within, 20*time.Millisecond, func() error {
		st, err := g.Job(context.Background(), id)
		if err != nil {
			return err
		}
		last = st
		if !st.Status.Terminal() {
			return fmt.Errorf("job %s", st.Status)
		}
		return nil
	})
	return last
}

// Only the leader a gate follows may write its records: a record from
// another gate (a deposed leader still replicating) is refused.
func TestRecordsOnlyFromTheLeader(t *testing.T) {
	hub := transport.NewHub()
	ids := []string{"g1", "g2", "g3"}
	hg := startHubGates(t, hub, ids, time.Minute)
	leader := hg.leader(10*time.Second, ids...)
	var followers []*Gate
	for _, id := range ids {
		if id != leader.ID() {
			followers = append(followers, hg.gates[id])
		}
	}
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if l, _ := followers[1].elector.Leader(); l != leader.ID() {
			return fmt.Errorf("%s follows %q", followers[1].ID(), l)
		}
		return nil
	})
	rec := &wire.ReplicateGateRecord{Record: wire.GateJobRecord{Submission: wire.JobSubmission{JobID: "j-stray"}, Version: 1 << 40}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	reply, err := followers[0].tr.Call(ctx, followers[1].ID(), rec)
	if err != nil {
		t.Fatal(err)
	}
	if ack := reply.(*wire.JobAck); ack.Accepted || len(followers[1].leases("j-stray")) != 0 {
		t.Fatalf("a follower took a record from another follower: %+v", ack)
	}
	reply, err = leader.tr.Call(ctx, followers[1].ID(), rec)
	if err != nil || !reply.(*wire.JobAck).Accepted {
		t.Fatalf("the leader's record: %v, %v", reply, err)
	}
}

// Through a gate, `tempest cluster` lists every datacenter's workers with
// their cores, as each datacenter's leader knows them, and the managers'
// rows carry their datacenter's core totals. A datacenter whose leader does
// not answer is named as unreachable rather than shown without workers.
func TestClusterListsEveryDatacentersWorkers(t *testing.T) {
	_, g, east, _ := oneGate(t, time.Minute)
	g.observeManager(&wire.ManagerHeartbeat{NodeID: "east-1", Datacenter: "east", IsLeader: true, Term: 1, Version: 2,
		Addr: "east-1", AvailableCores: 3, TotalCores: 5, WorkerCount: 1})
	east.tr.Handle(wire.TypeDatacenterNodesRequest, func(context.Context, transport.Peer, wire.Message) (wire.Message, error) {
		return &wire.DatacenterNodes{Datacenter: "east", Workers: []wire.DatacenterNode{
			{ID: "e-w1", State: "HEALTHY", AvailableCores: 3, TotalCores: 3, SendKeyID: 0xab},
			{ID: "e-w2", State: "dead", TotalCores: 2},
		}}, nil
	})
	// west's fake has no handler: its leader does not answer.

	view, err := g.Cluster(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]api.NodeView{}
	for _, n := range view.Nodes {
		got[n.Name] = n
	}
	for name, want := range map[string]api.NodeView{
		"east-1": {Role: "manager", DC: "east", AvailableCores: 3, TotalCores: 5},
		"e-w1":   {Role: "worker", DC: "east", State: "HEALTHY", AvailableCores: 3, TotalCores: 3, SendKey: "000000ab"},
		"e-w2":   {Role: "worker", DC: "east", State: "dead", AvailableCores: 0, TotalCores: 2},
	} {
		n, ok := got[name]
		if !ok {
			t.Errorf("%s missing from the view: %+v", name, view.Nodes)
			continue
		}
		if n.Role != want.Role || n.DC != want.DC || n.AvailableCores != want.AvailableCores || n.TotalCores != want.TotalCores ||
			(want.State != "" && n.State != want.State) || n.SendKey != want.SendKey {
			t.Errorf("%s: %+v, want %+v", name, n, want)
		}
	}
	if len(view.Unreachable) != 1 || !strings.Contains(view.Unreachable[0], "west") {
		t.Errorf("unreachable %q, want west named", view.Unreachable)
	}
}
