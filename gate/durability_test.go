package gate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/swim"
	"tempest/transport"
	"tempest/wire"
)

func othersThan(ids []string, not string) []string {
	return slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == not })
}

// fakeEast is the hub node "east-1" standing in for datacenter east's
// manager leader: it takes jobs and lease transfers, answers status
// requests with its heartbeat, and sends the reports a manager would.
type fakeEast struct {
	tr       transport.Transport
	version  atomic.Uint64
	statuses atomic.Int32 // status requests answered

	mu      sync.Mutex
	cancels map[string]uint64 // job id -> fence token of the last CancelJob
}

func (e *fakeEast) cancelled(id string) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cancels[id]
}

func newFakeEast(t *testing.T, hub *transport.Hub) *fakeEast {
	e := &fakeEast{tr: hub.Node("east-1"), cancels: map[string]uint64{}}
	t.Cleanup(func() { e.tr.Close() })
	e.tr.Handle(wire.TypeCancelJob, func(_ context.Context, _ transport.Peer, m wire.Message) (wire.Message, error) {
		c := m.(*wire.CancelJob)
		e.mu.Lock()
		e.cancels[c.JobID] = c.FenceToken
		e.mu.Unlock()
		return &wire.CancelAck{JobID: c.JobID, Cancelled: true}, nil
	})
	e.tr.Handle(wire.TypeJobSubmission, func(_ context.Context, _ transport.Peer, m wire.Message) (wire.Message, error) {
		return &wire.JobAck{JobID: m.(*wire.JobSubmission).JobID, Accepted: true}, nil
	})
	e.tr.Handle(wire.TypeLeaseTransfer, func(_ context.Context, _ transport.Peer, m wire.Message) (wire.Message, error) {
		lt := m.(*wire.LeaseTransfer)
		return &wire.LeaseAck{JobID: lt.JobID, Datacenter: lt.Datacenter, Accepted: true}, nil
	})
	e.tr.Handle(wire.TypeManagerStatusRequest, func(context.Context, transport.Peer, wire.Message) (wire.Message, error) {
		e.statuses.Add(1)
		return &wire.ManagerHeartbeat{NodeID: "east-1", Datacenter: "east", IsLeader: true, Term: 1,
			Version: e.version.Add(1), Addr: "east-1", AvailableCores: 4, WorkerCount: 2}, nil
	})
	return e
}

func (e *fakeEast) report(to string, jp *wire.JobProgress) (*wire.ProgressAck, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	jp.Datacenter = "east"
	reply, err := e.tr.Call(ctx, to, jp)
	if err != nil {
		return nil, err
	}
	return reply.(*wire.ProgressAck), nil
}

// knowEastByMembership tells g that east-1 is a live manager of east, as
// SWIM membership would, without any heartbeat.
func knowEastByMembership(g *Gate) {
	g.dcs.member(swim.NodeInfo{Name: "east-1", Meta: swim.NodeMeta{Role: wire.RoleManager, Datacenter: "east", QUICAddr: "east-1"}}, true)
}

func holds(g *Gate, id string) bool {
	_, _, ok := g.record(id)
	return ok
}

// A gate that wins an election serves (takes jobs, grants leases, answers
// reports) only once it has read a majority of gates: while it cannot read
// any other gate it leads in name only, and once it can it holds every job.
func TestLeaderServesOnlyAfterReadingAMajority(t *testing.T) {
	hub := transport.NewHub()
	var blockSync atomic.Bool
	dropWhile[*wire.StateSyncRequest](hub, &blockSync)
	ids := []string{"g1", "g2", "g3"}
	hg := startHubGates(t, hub, ids, time.Minute)
	hg.observe(1)
	first := hg.leader(10*time.Second, ids...)
	var jobs []string
	for range 3 {
		ack, err := first.Submit(context.Background(), sleepJob())
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, ack.JobID)
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		for _, g := range hg.gates {
			if !g.Ready() {
				return fmt.Errorf("%s not ready", g.ID())
			}
		}
		return nil
	})

	blockSync.Store(true)
	hg.stop[first.ID()]()
	rest := othersThan(ids, first.ID())
	var winner *Gate
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		for _, id := range rest {
			if g := hg.gates[id]; g.lead.Held() != nil {
				winner = g
				return nil
			}
		}
		return errors.New("no election won yet")
	})
	// Many sync timeouts pass; it must not serve.
	for end := time.Now().Add(10 * hg.gates[rest[0]].cfg.SyncTimeout); time.Now().Before(end); {
		if winner.IsLeader() {
			t.Fatalf("%s serves as leader without having read another gate", winner.ID())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		ack, err := winner.Submit(ctx, sleepJob())
		cancel()
		if err == nil {
			t.Fatalf("%s took job %s without having read another gate", winner.ID(), ack.JobID)
		}
	}

	blockSync.Store(false)
	leader := hg.leader(10*time.Second, rest...)
	for _, id := range jobs {
		if l := leader.leases(id); len(l) != 1 || l[0].LeaseHolder != leader.ID() {
			t.Fatalf("job %s: leases %+v, want one held by %s", id, l, leader.ID())
		}
	}
}

// A sync cut off part way keeps the pages it got, and the next attempt asks
// from the page after them, not from the start.
func TestSyncKeepsPagesAndResumes(t *testing.T) {
	hub := transport.NewHub()
	var (
		mu      sync.Mutex
		block   = true
		allowed = 2 // pages g3 may fetch from g1 while blocked
		asked   []wire.StateSyncRequest
	)
	var lateGate atomic.Pointer[Gate]
	hub.SetHook(func(from, to string, msg wire.Message) bool {
		mu.Lock()
		defer mu.Unlock()
		if _, rec := msg.(*wire.ReplicateGateRecord); rec && to == "g3" && block {
			return false
		}
		req, sync := msg.(*wire.StateSyncRequest)
		if !sync || from != "g3" {
			return true
		}
		switch {
		case !block:
		case to == "g1" && allowed > 0:
			allowed--
		default:
			return false
		}
		// Once the late gate is ready its start sync is over; what it
		// asks after that is the catch-up from the leader, which reads
		// from the start by design when the majority it read left the
		// leader out.
		if l := lateGate.Load(); to == "g1" && (l == nil || !l.Ready()) {
			asked = append(asked, *req)
		}
		return true
	})
	ids := []string{"g1", "g2", "g3"}
	// A round long enough that a page asked for is not lost to its
	// timeout on a busy machine.
	hg := &hubGates{t: t, hub: hub, ids: ids, gates: map[string]*Gate{}, stop: map[string]func(){}, dirs: map[string]string{},
		tune: func(c *Config) { c.SyncTimeout = 5 * time.Second }}
	hg.start("g1", time.Minute)
	hg.start("g2", time.Minute)
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

	hg.start("g3", time.Minute)
	late := hg.gates["g3"]
	lateGate.Store(late)
	// One record per page: the two pages it got are kept though the
	// read never completed.
	testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		n := 0
		for _, id := range jobs {
			if holds(late, id) {
				n++
			}
		}
		if n != 2 {
			return fmt.Errorf("late gate holds %d jobs, want the 2 of the pages it got", n)
		}
		return nil
	})
	if late.Ready() {
		t.Fatal("late gate ready without reading a majority")
	}
	mu.Lock()
	block = false
	mu.Unlock()
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if !late.Ready() {
			return errors.New("late gate not ready")
		}
		for _, id := range jobs {
			if !holds(late, id) {
				return fmt.Errorf("late gate lacks job %s", id)
			}
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	for i, req := range asked[2:] {
		if req.SinceVersion == 0 && req.SinceJobID == "" {
			t.Fatalf("request %d to g1 after the cut started over: %+v", i+2, req)
		}
	}
}

// A report for a job the leader does not hold is never cancelled blindly:
// the leader finds the job on another gate and takes it over; it cancels
// only when a majority of gates says no such job exists, and when too few
// gates answer it lets the datacenter go on.
func TestReportForAJobTheLeaderLacks(t *testing.T) {
	hub := transport.NewHub()
	var dropLookups atomic.Bool
	dropWhile[*wire.GateRecordRequest](hub, &dropLookups)
	ids := []string{"g1", "g2", "g3"}
	hg := startHubGates(t, hub, ids, time.Minute)
	east := newFakeEast(t, hub)
	hg.observe(1)
	leader := hg.leader(10*time.Second, ids...)
	follower := hg.gates[othersThan(ids, leader.ID())[0]]

	// A job only one follower holds, leased by a gate long gone (a term
	// before this one).
	oldToken := uint64(7)
	orphan := &wire.GateJobRecord{
		Submission:  wire.JobSubmission{JobID: "j-orphan", Name: "nap", Workflows: sleepJob().Workflows},
		Status:      wire.JobRunning,
		Leases:      []wire.DatacenterLease{{JobID: "j-orphan", Datacenter: "east", LeaseHolder: "g-old", FenceToken: oldToken, ExpiresAt: time.Now().Add(time.Minute).UnixNano()}},
		Datacenters: []wire.JobProgress{{JobID: "j-orphan", Datacenter: "east", Status: wire.JobRunning}},
		CreatedAt:   time.Now().UnixNano(),
		Version:     1,
	}
	if follower.adopt(orphan) == nil {
		t.Fatal("follower did not take the record")
	}
	ack, err := east.report(leader.ID(), &wire.JobProgress{JobID: "j-orphan", Status: wire.JobRunning, TotalCompleted: 3, FenceToken: oldToken})
	if err != nil || ack.Cancel {
		t.Fatalf("report for a job another gate holds: %+v, %v; want it taken, not cancelled", ack, err)
	}
	l := leader.leases("j-orphan")
	if len(l) != 1 || l[0].LeaseHolder != leader.ID() || l[0].FenceToken <= oldToken {
		t.Fatalf("leases after the lookup %+v: want the leader holding a newer token", l)
	}
	if st, err := leader.Job(context.Background(), "j-orphan"); err != nil || st.TotalCompleted != 3 {
		t.Fatalf("job after the report: %+v, %v; want the report merged", st, err)
	}

	// Nobody answers: the datacenter goes on.
	dropLookups.Store(true)
	if ack, err := east.report(leader.ID(), &wire.JobProgress{JobID: "j-nowhere", Status: wire.JobRunning}); err != nil || ack.Cancel {
		t.Fatalf("report while no gate could be asked: %+v, %v; want no cancel", ack, err)
	}
	if east.cancelled("j-nowhere") != 0 {
		t.Fatal("the datacenter was told to cancel a job whose gates did not all answer")
	}
	// A majority says there is no such job: it stops, told under a token
	// from the leader's term (managers obey an answer's cancel only from
	// the lease holder).
	dropLookups.Store(false)
	if ack, err := east.report(leader.ID(), &wire.JobProgress{JobID: "j-nowhere", Status: wire.JobRunning}); err != nil || !ack.Cancel {
		t.Fatalf("report for a job no gate holds: %+v, %v; want a cancel", ack, err)
	}
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if tok := east.cancelled("j-nowhere"); tok>>32 != leader.elector.Status().Term {
			return fmt.Errorf("cancel token %d, want one from term %d", tok, leader.elector.Status().Term)
		}
		return nil
	})
}

// Sync pages hold at least one whole record, split inside one version when
// several records share it, and never exceed the message cap; a record too
// large for any message is an error the asker sees, naming the job.
func TestSyncPagesStayUnderTheMessageCap(t *testing.T) {
	hub := transport.NewHub()
	ids := []string{"g1", "g2", "g3"}
	hg := startHubGates(t, hub, ids, time.Minute, func(c *Config) { c.SyncPageBytes = 2 << 20 })
	src, dst := hg.gates["g1"], hg.gates["g2"]
	big := strings.Repeat("x", 3<<20)
	var want []string
	for i := range 4 {
		id := fmt.Sprintf("j-big-%d", i)
		want = append(want, id)
		// One version for all: a deposed leader and its successor can
		// both have written version 7.
		if src.adopt(&wire.GateJobRecord{Submission: wire.JobSubmission{JobID: id}, Status: wire.JobRunning, Error: big, Version: 7}) == nil {
			t.Fatalf("g1 did not take %s", id)
		}
	}
	// Records of megabytes through the codec, under -race: generous.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	peer := transport.Peer{NodeID: "g2"}
	req := &wire.StateSyncRequest{RequesterID: "g2", RequesterRole: wire.RoleGate}
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		reply, err := src.handleStateSync(ctx, peer, req)
		if err != nil {
			t.Fatal(err)
		}
		resp := reply.(*wire.StateSyncResponse)
		b, err := wire.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GateJobs) == 0 || len(b) > wire.MaxMessageSize {
			t.Fatalf("page %d: %d records in %d bytes; want at least one, within %d", pages, len(resp.GateJobs), len(b), wire.MaxMessageSize)
		}
		if !resp.More {
			break
		}
		last := resp.GateJobs[len(resp.GateJobs)-1]
		req.SinceVersion, req.SinceJobID = last.Version, last.Submission.JobID
	}
	// The whole read, over the (size-checking) hub.
	if _, _, err := dst.fetchRecords(ctx, "g1", dst.group.Load().Addr("g1"), syncCursor{}); err != nil {
		t.Fatalf("sync from g1: %v", err)
	}
	for _, id := range want {
		if !holds(dst, id) {
			t.Fatalf("g2 lacks %s after the sync", id)
		}
	}

	// A record grown past one message with its datacenters' histograms is
	// sent without them (the submission, leases and statuses are what a
	// successor needs), not left out of the sync.
	hist := make([]byte, 4<<20)
	heavy := &wire.GateJobRecord{Submission: wire.JobSubmission{JobID: "j-heavy"}, Status: wire.JobRunning, Version: 8}
	for _, d := range []string{"east", "west", "north"} {
		heavy.Datacenters = append(heavy.Datacenters, wire.JobProgress{JobID: "j-heavy", Datacenter: d, Status: wire.JobRunning, TotalCompleted: 5,
			Workflows: []wire.WorkflowProgress{{WorkflowName: "nap", StepStats: []wire.StepStats{{StepName: "s", Histogram: hist}}}}})
	}
	if src.adopt(heavy) == nil {
		t.Fatal("g1 did not take j-heavy")
	}
	if _, _, err := dst.fetchRecords(ctx, "g1", dst.group.Load().Addr("g1"), syncCursor{7, "j-big-3"}); err != nil {
		t.Fatalf("sync of a record grown past one message: %v", err)
	}
	got, _, ok := dst.record("j-heavy")
	if !ok || len(got.Datacenters) != 3 || got.Datacenters[2].TotalCompleted != 5 || got.Datacenters[0].Workflows[0].StepStats != nil {
		t.Fatalf("g2 holds j-heavy as %+v (%v); want its statuses and counts without histograms", got.Datacenters, ok)
	}

	huge := &wire.GateJobRecord{Submission: wire.JobSubmission{JobID: "j-huge"}, Status: wire.JobRunning,
		Error: strings.Repeat("y", wire.MaxMessageSize), Version: 9}
	if src.adopt(huge) == nil {
		t.Fatal("g1 did not take j-huge")
	}
	_, _, err := dst.fetchRecords(ctx, "g1", dst.group.Load().Addr("g1"), syncCursor{8, "j-heavy"})
	if wire.CodeOf(err) != wire.CodeTooLarge || !strings.Contains(err.Error(), "j-huge") {
		t.Fatalf("sync of an oversized record: %v; want a too_large error naming j-huge", err)
	}

	// A job whose record could never reach the other gates is refused
	// before anything is stored.
	leader := hg.leader(10*time.Second, ids...)
	job := sleepJob()
	job.JobID, job.Name = "j-toolarge", strings.Repeat("n", wire.MaxMessageSize)
	hg.observe(1)
	if _, err := leader.Submit(ctx, job); wire.CodeOf(err) != wire.CodeTooLarge {
		t.Fatalf("submit of a job too large for one message: %v; want too_large", err)
	}
	for _, g := range hg.gates {
		if holds(g, job.JobID) {
			t.Fatalf("%s holds the refused job", g.ID())
		}
	}
}

// Every gate forgets a finished job Retention after it ended, followers
// included, and no gate takes an expired record back: not from its own disk
// at a restart, not from a sync, not through a new leader.
func TestEveryGateExpiresFinishedJobsAndNoneReadoptsThem(t *testing.T) {
	hub := transport.NewHub()
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	const retention = time.Hour
	ids := []string{"g1", "g2", "g3"}
	hg := startHubGates(t, hub, ids, time.Minute, func(c *Config) { c.Retention = retention })
	// The gates' clock, as Deps.Now: restart them all on it.
	for _, id := range ids {
		hg.stop[id]()
	}
	hg.now = now
	for _, id := range ids {
		hg.start(id, time.Minute)
	}
	east := newFakeEast(t, hub)
	hg.observe(1)
	leader := hg.leader(10*time.Second, ids...)
	ack, err := leader.Submit(context.Background(), sleepJob())
	if err != nil {
		t.Fatal(err)
	}
	id := ack.JobID
	token := leader.leases(id)[0].FenceToken
	if a, err := east.report(leader.ID(), &wire.JobProgress{JobID: id, Status: wire.JobCompleted, TotalCompleted: 1, FenceToken: token}); err != nil || a.Cancel {
		t.Fatalf("final report: %+v, %v", a, err)
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		for _, g := range hg.gates {
			if rec, _, ok := g.record(id); !ok || rec.Status != wire.JobCompleted {
				return fmt.Errorf("%s does not hold the job COMPLETED yet", g.ID())
			}
		}
		return nil
	})
	// One follower sleeps through the expiry with the record on its disk.
	sleeper := othersThan(ids, leader.ID())[0]
	hg.stop[sleeper]()
	skew.Store(int64(retention + time.Minute))
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		for _, g := range othersThan(ids, sleeper) {
			if holds(hg.gates[g], id) {
				return fmt.Errorf("%s still holds the job past retention", g)
			}
		}
		return nil
	})
	hg.start(sleeper, time.Minute)
	if holds(hg.gates[sleeper], id) {
		t.Fatalf("%s loaded an expired job from its disk", sleeper)
	}
	// A new leader syncs from everyone; nobody brings the job back.
	hg.stop[leader.ID()]()
	next := hg.leader(10*time.Second, othersThan(ids, leader.ID())...)
	for _, g := range othersThan(ids, leader.ID()) {
		if holds(hg.gates[g], id) {
			t.Fatalf("%s holds the expired job after %s took over", g, next.ID())
		}
	}
	// Nor does one arriving by replication or sync.
	expired := &wire.GateJobRecord{Submission: wire.JobSubmission{JobID: id}, Status: wire.JobCompleted,
		FinishedAt: time.Now().UnixNano(), Version: 1 << 40}
	if next.adopt(expired) != nil || holds(next, id) {
		t.Fatal("the leader adopted a record past retention")
	}
}

// A gate that takes the lead asks the managers for their heartbeats before
// it serves, so a submit right after a failover finds the datacenters
// healthy though SWIM has not carried a heartbeat yet; and a submit that
// finds the table stale asks again before refusing.
func TestNewLeaderSeedsItsDatacenterTable(t *testing.T) {
	hub := transport.NewHub()
	var skew atomic.Int64
	ids := []string{"g1", "g2", "g3"}
	hg := &hubGates{t: t, hub: hub, ids: ids, gates: map[string]*Gate{}, stop: map[string]func(){}, dirs: map[string]string{},
		now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }}
	east := newFakeEast(t, hub)
	for _, id := range ids {
		hg.start(id, time.Minute)
		// Membership only: no gate has had a heartbeat.
		knowEastByMembership(hg.gates[id])
	}
	leader := hg.leader(10*time.Second, ids...)
	if h := leader.dcs.health(leader.cfg.HealthTimeout); len(h) != 1 || !h[0].Healthy {
		t.Fatalf("new leader's table %+v: want east healthy before any submit", h)
	}
	if _, err := leader.Submit(context.Background(), sleepJob()); err != nil {
		t.Fatalf("submit right after the takeover: %v", err)
	}
	// Time passes with no heartbeat: the table goes stale, and a submit
	// asks the managers again rather than refuse.
	before := east.statuses.Load()
	skew.Store(int64(2 * leader.cfg.HealthTimeout))
	if h := leader.dcs.health(leader.cfg.HealthTimeout); h[0].Healthy {
		t.Fatal("east still healthy after HealthTimeout of silence")
	}
	if _, err := leader.Submit(context.Background(), sleepJob()); err != nil {
		t.Fatalf("submit with a stale table: %v", err)
	}
	if east.statuses.Load() == before {
		t.Fatal("the submit did not ask the managers")
	}
}
