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

	"tempest/internal/overload"
	"tempest/internal/testutil"
	"tempest/leadership"
	"tempest/swim"
	"tempest/transport"
	"tempest/wire"
)

// fakeDC is a hub node standing in for one datacenter's manager leader:
// it takes (or refuses) jobs and lease transfers, and records every
// command a gate sends it.
type fakeDC struct {
	dc     string
	tr     transport.Transport
	refuse atomic.Pointer[string] // set: submissions are refused with it
	// dropSubs: this many submissions fail as if unreachable first.
	dropSubs atomic.Int32
	// stops is how many workflows a cancel says it stopped; holdCancel,
	// if set, is received from before a cancel is answered.
	stops      atomic.Int32
	holdCancel chan struct{}

	mu        sync.Mutex
	subs      map[string][]wire.JobSubmission
	transfers map[string][]wire.LeaseTransfer
	cancels   map[string][]wire.CancelJob
}

func newFakeDC(t *testing.T, hub *transport.Hub, dc string) *fakeDC {
	f := &fakeDC{dc: dc, tr: hub.Node(dc + "-1"), subs: map[string][]wire.JobSubmission{},
		transfers: map[string][]wire.LeaseTransfer{}, cancels: map[string][]wire.CancelJob{}}
	t.Cleanup(func() { f.tr.Close() })
	f.tr.Handle(wire.TypeJobSubmission, func(_ context.Context, _ transport.Peer, m wire.Message) (wire.Message, error) {
		s := m.(*wire.JobSubmission)
		f.mu.Lock()
		f.subs[s.JobID] = append(f.subs[s.JobID], *s)
		f.mu.Unlock()
		if f.dropSubs.Add(-1) >= 0 {
			return nil, errors.New("datacenter unreachable")
		}
		if r := f.refuse.Load(); r != nil {
			return &wire.JobAck{JobID: s.JobID, Accepted: false, Error: *r}, nil
		}
		return &wire.JobAck{JobID: s.JobID, Accepted: true}, nil
	})
	f.tr.Handle(wire.TypeLeaseTransfer, func(_ context.Context, _ transport.Peer, m wire.Message) (wire.Message, error) {
		lt := m.(*wire.LeaseTransfer)
		f.mu.Lock()
		f.transfers[lt.JobID] = append(f.transfers[lt.JobID], *lt)
		f.mu.Unlock()
		return &wire.LeaseAck{JobID: lt.JobID, Datacenter: lt.Datacenter, Accepted: true}, nil
	})
	f.tr.Handle(wire.TypeCancelJob, func(_ context.Context, _ transport.Peer, m wire.Message) (wire.Message, error) {
		c := m.(*wire.CancelJob)
		f.mu.Lock()
		f.cancels[c.JobID] = append(f.cancels[c.JobID], *c)
		f.mu.Unlock()
		if f.holdCancel != nil {
			<-f.holdCancel
		}
		return &wire.CancelAck{JobID: c.JobID, Cancelled: true, WorkflowsCancelled: int(f.stops.Load())}, nil
	})
	return f
}

func (f *fakeDC) cancelled(id string) []wire.CancelJob {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]wire.CancelJob(nil), f.cancels[id]...)
}

func (f *fakeDC) submissions(id string) []wire.JobSubmission {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]wire.JobSubmission(nil), f.subs[id]...)
}

func (f *fakeDC) leaseTransfers(id string) []wire.LeaseTransfer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]wire.LeaseTransfer(nil), f.transfers[id]...)
}

// report sends the datacenter's report of job id to gate to, under the
// token of the job's lease there.
func (f *fakeDC) report(to *Gate, id string, st wire.JobStatus, wfs ...wire.WorkflowProgress) (*wire.ProgressAck, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	reply, err := f.tr.Call(ctx, to.ID(), &wire.JobProgress{JobID: id, Datacenter: f.dc, Status: st, Workflows: wfs, FenceToken: lease(to, id, f.dc).FenceToken})
	if err != nil {
		return nil, err
	}
	return reply.(*wire.ProgressAck), nil
}

// seeDCs tells every gate of hg that each fake is its datacenter's leader.
func seeDCs(hg *hubGates, dcs ...*fakeDC) {
	for _, g := range hg.gates {
		for _, f := range dcs {
			g.observeManager(&wire.ManagerHeartbeat{NodeID: f.dc + "-1", Datacenter: f.dc, IsLeader: true, Term: 1, Version: 1,
				Addr: f.dc + "-1", AvailableCores: 4})
		}
	}
}

func lease(g *Gate, id, dc string) wire.DatacenterLease {
	for _, l := range g.leases(id) {
		if l.Datacenter == dc {
			return l
		}
	}
	return wire.DatacenterLease{}
}

func dcStatus(g *Gate, id, dc string) wire.JobProgress {
	rec, _, _ := g.record(id)
	for _, p := range rec.Datacenters {
		if p.Datacenter == dc {
			return p
		}
	}
	return wire.JobProgress{}
}

// twoDCJob submits a sleep job to both east and west through g.
func twoDCJob(t *testing.T, g *Gate, th ...wire.Threshold) string {
	t.Helper()
	sub := sleepJob()
	sub.DatacenterCount = 2
	sub.Workflows[0].Thresholds = th
	ack, err := g.Submit(context.Background(), sub)
	if err != nil || len(ack.Datacenters) != 2 {
		t.Fatalf("submit: %+v, %v; want two datacenters", ack, err)
	}
	return ack.JobID
}

// oneGate starts a single gate (it leads alone) with fake datacenters east
// and west.
func oneGate(t *testing.T, ttl time.Duration) (*hubGates, *Gate, *fakeDC, *fakeDC) {
	hub := transport.NewHub()
	hg := startHubGates(t, hub, []string{"g1"}, ttl)
	east, west := newFakeDC(t, hub, "east"), newFakeDC(t, hub, "west")
	seeDCs(hg, east, west)
	return hg, hg.leader(10*time.Second, "g1"), east, west
}

// A client's cancel reaches every datacenter still running the job, each
// under its own lease's token, and none that already finished; the job
// ends CANCELLED, durably, and a datacenter reporting afterwards is told to
// stop. The answer counts the workflows the datacenters stopped, not the
// datacenters.
func TestCancelStopsEveryRunningDatacenterUnderItsToken(t *testing.T) {
	hg, g, east, west := oneGate(t, time.Minute)
	west.stops.Store(3)
	id := twoDCJob(t, g)
	if _, err := east.report(g, id, wire.JobCompleted); err != nil {
		t.Fatal(err)
	}
	if _, err := west.report(g, id, wire.JobRunning); err != nil {
		t.Fatal(err)
	}
	westToken := lease(g, id, "west").FenceToken
	ack, err := g.Cancel(context.Background(), id, "changed my mind")
	if err != nil || !ack.Cancelled || ack.WorkflowsCancelled != 3 {
		t.Fatalf("cancel: %+v, %v; want west's three workflows stopped", ack, err)
	}
	if c := west.cancelled(id); len(c) != 1 || c[0].FenceToken != westToken || c[0].Reason != "changed my mind" {
		t.Fatalf("west got %+v; want one CancelJob under token %#x", c, westToken)
	}
	if c := east.cancelled(id); len(c) != 0 {
		t.Fatalf("east, already done, was told to stop: %+v", c)
	}
	st, _ := g.Job(context.Background(), id)
	if st.Status != wire.JobCancelled || st.Error != "changed my mind" {
		t.Fatalf("job %s (%q), want CANCELLED with the client's reason", st.Status, st.Error)
	}
	if p := dcStatus(g, id, "west"); p.Status != wire.JobCancelled {
		t.Fatalf("west's part %s, want CANCELLED", p.Status)
	}
	if p := dcStatus(g, id, "east"); p.Status != wire.JobCompleted {
		t.Fatalf("east's part %s, want COMPLETED as it reported", p.Status)
	}
	a, err := west.report(g, id, wire.JobRunning)
	if err != nil || !a.Cancel || a.FenceToken != westToken {
		t.Fatalf("west reporting after the cancel: %+v, %v; want a cancel under %#x", a, err, westToken)
	}
	// The ending was written: a restarted gate still knows it.
	hg.stop["g1"]()
	hg.start("g1", time.Minute)
	again := hg.gates["g1"]
	if rec, _, ok := again.record(id); !ok || rec.Status != wire.JobCancelled {
		t.Fatalf("after a restart: %v %s, want the job CANCELLED", ok, rec.Status)
	}
}

// What a cancel cannot do is refused with the reason, changing nothing.
func TestCancelRefusals(t *testing.T) {
	_, g, east, _ := oneGate(t, time.Minute)
	sub := sleepJob()
	ack, err := g.Submit(context.Background(), sub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := east.report(g, ack.JobID, wire.JobCompleted); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		id       string
		wantCode wire.Code
		wantErr  string // in the ack when there is no error
	}{
		{"unknown job", "j-nope", wire.CodeNotFound, ""},
		{"finished job", ack.JobID, 0, "job already COMPLETED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := g.Cancel(context.Background(), tc.id, "stop")
			if tc.wantCode != 0 {
				if wire.CodeOf(err) != tc.wantCode {
					t.Fatalf("cancel: %+v, %v; want %s", got, err, tc.wantCode)
				}
				return
			}
			if err != nil || got.Cancelled || got.Error != tc.wantErr {
				t.Fatalf("cancel: %+v, %v; want refused with %q", got, err, tc.wantErr)
			}
		})
	}
	if c := east.cancelled(ack.JobID); len(c) != 0 {
		t.Fatalf("a refused cancel reached the datacenter: %+v", c)
	}
	if st, _ := g.Job(context.Background(), ack.JobID); st.Status != wire.JobCompleted {
		t.Fatalf("a refused cancel changed the job: %s", st.Status)
	}
}

// A follower redirects what only the leader does to the leader it follows,
// and a leader cut off from the other gates stops acting as one (its
// elector steps down; the gate follows it even before any callback).
func TestNotLeaderRedirects(t *testing.T) {
	hub := transport.NewHub()
	ids := []string{"g1", "g2", "g3"}
	hg := startHubGates(t, hub, ids, time.Minute)
	east := newFakeDC(t, hub, "east")
	seeDCs(hg, east)
	leader := hg.leader(10*time.Second, ids...)
	follower := hg.gates[othersThan(ids, leader.ID())[0]]
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if id, _ := follower.elector.Leader(); id != leader.ID() {
			return fmt.Errorf("follower follows %q", id)
		}
		return nil
	})
	ack, err := leader.Submit(context.Background(), sleepJob())
	if err != nil {
		t.Fatal(err)
	}
	notLeader := func(what string, err error, leaderID string) {
		t.Helper()
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodeNotLeader || we.Leader != leaderID {
			t.Fatalf("%s on a follower: %v; want not_leader naming %q", what, err, leaderID)
		}
	}
	_, err = follower.Submit(context.Background(), sleepJob())
	notLeader("submit", err, leader.ID())
	_, err = follower.Cancel(context.Background(), ack.JobID, "stop")
	notLeader("cancel", err, leader.ID())
	if is, _ := follower.Leader(); is || follower.IsLeader() {
		t.Fatal("a follower says it leads")
	}
	if c := east.cancelled(ack.JobID); len(c) != 0 {
		t.Fatalf("a follower's cancel reached the datacenter: %+v", c)
	}

	// Cut the leader off: it steps down, and every leader-only path says so.
	hub.Isolate(leader.ID())
	defer hub.Heal()
	testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		if leader.IsLeader() || leader.lead.Leading() != nil {
			return errors.New("the cut-off gate still leads")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := leader.Submit(ctx, sleepJob()); wire.CodeOf(err) != wire.CodeNotLeader {
		t.Fatalf("submit to a deposed leader: %v; want not_leader", err)
	}
	if is, _ := leader.Leader(); is {
		t.Fatal("a deposed leader answers the API as leader")
	}
	hg.leader(20*time.Second, othersThan(ids, leader.ID())...)
}

// Submissions the gate cannot place are refused with a typed error, and
// nothing is kept of them.
func TestSubmitRefusals(t *testing.T) {
	_, g, east, west := oneGate(t, time.Minute)
	huge := sleepJob()
	huge.Workflows[0].Params = []byte(strings.Repeat("x", maxRecordBytes+1))
	for _, tc := range []struct {
		name  string
		sub   *wire.JobSubmission
		setup func()
		code  wire.Code
		msg   string
		kept  bool // placed, then refused by the datacenters
	}{
		{"no workflows", &wire.JobSubmission{Name: "empty", DatacenterCount: 1}, nil, wire.CodeRejected, "no workflows", false},
		{"more datacenters than are healthy", &wire.JobSubmission{Name: "wide", DatacenterCount: 3,
			Workflows: sleepJob().Workflows}, nil, wire.CodeUnavailable, "asks for 3 datacenters", false},
		{"an unknown datacenter named", &wire.JobSubmission{Name: "where", Datacenters: []string{"mars"},
			Workflows: sleepJob().Workflows}, nil, wire.CodeRejected, `"mars" is unknown`, false},
		{"a record too large for one message", huge, nil, wire.CodeTooLarge, "one message between gates", false},
		{"every datacenter refuses", func() *wire.JobSubmission { s := sleepJob(); s.DatacenterCount = 2; return s }(),
			func() {
				no := "no such workflow type"
				east.refuse.Store(&no)
				west.refuse.Store(&no)
			}, wire.CodeRejected, "no such workflow type", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := g.Jobs(context.Background())
			if tc.setup != nil {
				tc.setup()
			}
			ack, err := g.Submit(context.Background(), tc.sub)
			if wire.CodeOf(err) != tc.code || !strings.Contains(fmt.Sprint(err), tc.msg) {
				t.Fatalf("submit: %+v, %v; want %s containing %q", ack, err, tc.code, tc.msg)
			}
			after, _ := g.Jobs(context.Background())
			if !tc.kept {
				if len(after) != len(before) {
					t.Fatalf("a refused submission was kept: %d jobs before, %d after", len(before), len(after))
				}
				return
			}
			// Refused by the datacenters: the job is kept, FAILED, naming them.
			st := after[0]
			if st.Status != wire.JobFailed || !strings.Contains(st.Error, "refused the job") {
				t.Fatalf("job refused everywhere: %s (%q), want FAILED naming the refusals", st.Status, st.Error)
			}
		})
	}
}

// A submission repeated with the same job id is answered like the first,
// and the job is placed once.
func TestSubmitIsIdempotentByJobID(t *testing.T) {
	_, g, east, _ := oneGate(t, time.Minute)
	sub := sleepJob()
	sub.JobID = "j-once"
	first, err := g.Submit(context.Background(), sub)
	if err != nil {
		t.Fatal(err)
	}
	rec, _, _ := g.record("j-once")
	second, err := g.Submit(context.Background(), sub)
	if err != nil || second.JobID != first.JobID || strings.Join(second.Datacenters, ",") != strings.Join(first.Datacenters, ",") {
		t.Fatalf("repeat: %+v, %v; want the first answer %+v", second, err, first)
	}
	again, _, _ := g.record("j-once")
	if again.Version != rec.Version {
		t.Fatalf("the repeat wrote the record again: version %d -> %d", rec.Version, again.Version)
	}
	if n := len(east.submissions("j-once")); n != 1 {
		t.Fatalf("east got the job %d times, want once", n)
	}
}

// A lease that no report renews fails only its own datacenter: that one is
// told to stop under its token, the other runs on, and the job ends FAILED
// as a partial failure naming the lease.
func TestLeaseExpiryFailsOnlyTheSilentDatacenter(t *testing.T) {
	_, g, east, west := oneGate(t, 1500*time.Millisecond)
	id := twoDCJob(t, g)
	westToken := lease(g, id, "west").FenceToken
	// East reports all along, as its manager would; west never does.
	stop := make(chan struct{})
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			east.report(g, id, wire.JobRunning)
		}
	}()
	testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		if p := dcStatus(g, id, "west"); p.Status != wire.JobFailed {
			return fmt.Errorf("west is %s", p.Status)
		}
		return nil
	})
	close(stop)
	<-reported
	if p := dcStatus(g, id, "west"); !strings.Contains(p.Error, "lease expired") {
		t.Fatalf("west failed with %q, want the lease named", p.Error)
	}
	if p := dcStatus(g, id, "east"); p.Status != wire.JobRunning {
		t.Fatalf("east, which kept reporting, is %s", p.Status)
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if c := west.cancelled(id); len(c) == 0 || c[0].FenceToken != westToken {
			return fmt.Errorf("west got %+v, want a cancel under %#x", c, westToken)
		}
		return nil
	})
	if _, err := east.report(g, id, wire.JobCompleted); err != nil {
		t.Fatal(err)
	}
	st, _ := g.Job(context.Background(), id)
	if st.Status != wire.JobFailed || !strings.Contains(st.Error, "partial failure: 1 of 2") || !strings.Contains(st.Error, "lease expired") {
		t.Fatalf("job %s (%q), want a partial failure naming west's lease", st.Status, st.Error)
	}
	if st.CompletedDatacenters != 1 || st.FailedDatacenters != 1 {
		t.Fatalf("completed_datacenters %d, failed_datacenters %d; want 1 and 1", st.CompletedDatacenters, st.FailedDatacenters)
	}
}

// A report renews its datacenter's lease and the answer says for how long;
// a report from a datacenter the job does not run in is refused.
func TestReportRenewsTheLeaseAndRefusesStrangers(t *testing.T) {
	hg, g, east, _ := oneGate(t, time.Minute)
	ack, err := g.Submit(context.Background(), sleepJob())
	if err != nil {
		t.Fatal(err)
	}
	id := ack.JobID
	if ack.Datacenters[0] != "east" {
		// The two fakes have equal cores; east sorts first.
		t.Fatalf("placed in %v, want east", ack.Datacenters)
	}
	before := lease(g, id, "east").ExpiresAt
	a, err := east.report(g, id, wire.JobRunning)
	if err != nil || a.LeaseTTL != g.cfg.LeaseTTL || a.Cancel || a.Leader != g.ID() {
		t.Fatalf("report: %+v, %v; want the lease renewed for %s", a, err, g.cfg.LeaseTTL)
	}
	if after := lease(g, id, "east").ExpiresAt; after <= before {
		t.Fatalf("lease expiry %d -> %d, want it pushed out", before, after)
	}
	if p := dcStatus(g, id, "east"); p.Status != wire.JobRunning {
		t.Fatalf("east's part %s after its report, want RUNNING", p.Status)
	}
	stranger := newFakeDC(t, hg.hub, "north")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = stranger.tr.Call(ctx, g.ID(), &wire.JobProgress{JobID: id, Datacenter: "north", Status: wire.JobCompleted})
	if wire.CodeOf(err) != wire.CodeRejected {
		t.Fatalf("report from a datacenter the job does not run in: %v; want rejected", err)
	}
	if st, _ := g.Job(context.Background(), id); st.Status.Terminal() {
		t.Fatalf("a stranger's report ended the job: %s", st.Status)
	}
}

// abortReason judges abort_on_fail thresholds on the results merged across
// datacenters, never on one datacenter alone, and never on no data.
func TestAbortReason(t *testing.T) {
	g := &Gate{}
	wf := func(dc string, completed, failed int64, steps ...wire.StepStats) wire.JobProgress {
		return wire.JobProgress{Datacenter: dc, Status: wire.JobRunning, Workflows: []wire.WorkflowProgress{{
			WorkflowName: "web", CompletedCount: completed, FailedCount: failed, StepStats: steps, Elapsed: time.Second}}}
	}
	for _, tc := range []struct {
		name string
		th   wire.Threshold
		dcs  []wire.JobProgress
		want string // in the reason; "" for none
	}{
		{"merged passes though one datacenter alone fails", wire.Threshold{Expr: "error_rate < 5%", AbortOnFail: true},
			[]wire.JobProgress{wf("east", 100, 0), wf("west", 91, 9)}, ""},
		{"merged fails", wire.Threshold{Expr: "error_rate < 4%", AbortOnFail: true},
			[]wire.JobProgress{wf("east", 100, 0), wf("west", 91, 9)}, wire.ThresholdAbortPrefix + "error_rate < 4% (actual "},
		{"failing without abort_on_fail", wire.Threshold{Expr: "error_rate < 1%"},
			[]wire.JobProgress{wf("east", 50, 50)}, ""},
		{"no data yet", wire.Threshold{Expr: "error_rate < 1%", AbortOnFail: true},
			[]wire.JobProgress{wf("east", 0, 0), wf("west", 0, 0)}, ""},
		{"one step's threshold names the step", wire.Threshold{Expr: "error_rate < 10%", Step: "login", AbortOnFail: true},
			[]wire.JobProgress{
				wf("east", 10, 10, wire.StepStats{StepName: "login", CompletedCount: 5, FailedCount: 5}),
				wf("west", 10, 0, wire.StepStats{StepName: "login", CompletedCount: 5})},
			"in workflow web, step login"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &wire.GateJobRecord{Submission: wire.JobSubmission{JobID: "j", Workflows: []wire.WorkflowSpec{
				{Name: "web", Type: "sleep", Thresholds: []wire.Threshold{tc.th}}}}, Datacenters: tc.dcs}
			got := g.abortReason(rec)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("abortReason = %q, want %q", got, tc.want)
			}
		})
	}
}

// A workflow retried in a datacenter shows that datacenter's attempts
// through the gate (it read 1 through gates and 2 through the managers).
func TestGateShowsTheDatacentersAttempts(t *testing.T) {
	_, g, east, west := oneGate(t, time.Minute)
	id := twoDCJob(t, g, wire.Threshold{Expr: "error_rate < 50%"})
	if _, err := west.report(g, id, wire.JobRunning, wire.WorkflowProgress{WorkflowName: "nap", CompletedCount: 5, Elapsed: time.Second, Attempts: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := east.report(g, id, wire.JobRunning, wire.WorkflowProgress{WorkflowName: "nap", CompletedCount: 5, Elapsed: time.Second}); err != nil {
		t.Fatal(err)
	}
	st, err := g.Job(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Workflows) != 1 || st.Workflows[0].Attempts != 2 {
		t.Fatalf("workflows %+v, want one with 2 attempts", st.Workflows)
	}
}

// An abort_on_fail threshold failing on the merged results mid-run ends the
// job everywhere: every datacenter still running is told to stop under its
// token, and the job ends FAILED with the threshold as its reason.
func TestAbortOnFailStopsEveryDatacenter(t *testing.T) {
	_, g, east, west := oneGate(t, time.Minute)
	id := twoDCJob(t, g, wire.Threshold{Expr: "error_rate < 5%", AbortOnFail: true})
	tokens := map[string]uint64{"east": lease(g, id, "east").FenceToken, "west": lease(g, id, "west").FenceToken}
	if _, err := west.report(g, id, wire.JobRunning, wire.WorkflowProgress{WorkflowName: "nap", CompletedCount: 95, FailedCount: 5, Elapsed: time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := east.report(g, id, wire.JobRunning, wire.WorkflowProgress{WorkflowName: "nap", CompletedCount: 50, FailedCount: 50, Elapsed: time.Second}); err != nil {
		t.Fatal(err)
	}
	st := waitJob(t, g, id, 20*time.Second)
	if st.Status != wire.JobFailed || !strings.HasPrefix(st.Error, wire.ThresholdAbortPrefix) || !strings.Contains(st.Error, "error_rate < 5%") {
		t.Fatalf("job %s (%q), want FAILED by the threshold", st.Status, st.Error)
	}
	for _, f := range []*fakeDC{east, west} {
		c := f.cancelled(id)
		if len(c) != 1 || c[0].FenceToken != tokens[f.dc] || !strings.HasPrefix(c[0].Reason, wire.ThresholdAbortPrefix) {
			t.Fatalf("%s got %+v; want one cancel under %#x naming the threshold", f.dc, c, tokens[f.dc])
		}
		if p := dcStatus(g, id, f.dc); p.Status != wire.JobCancelled {
			t.Fatalf("%s's part %s, want CANCELLED", f.dc, p.Status)
		}
	}
}

// A new leader moves only the leases of datacenters still running a job:
// those get this term's tokens and a LeaseTransfer; a finished
// datacenter's lease stays as it was.
func TestTakeOverMovesOnlyUnfinishedLeases(t *testing.T) {
	hub := transport.NewHub()
	ids := []string{"g1", "g2", "g3"}
	hg := startHubGates(t, hub, ids, time.Minute)
	east, west := newFakeDC(t, hub, "east"), newFakeDC(t, hub, "west")
	seeDCs(hg, east, west)
	first := hg.leader(10*time.Second, ids...)
	id := twoDCJob(t, first)
	if _, err := east.report(first, id, wire.JobCompleted); err != nil {
		t.Fatal(err)
	}
	eastBefore, westBefore := lease(first, id, "east"), lease(first, id, "west")
	// Every gate holds the job's newest version before the leader goes.
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		want, _, _ := first.record(id)
		for _, gid := range othersThan(ids, first.ID()) {
			if rec, _, _ := hg.gates[gid].record(id); rec.Version != want.Version {
				return fmt.Errorf("%s has version %d of %d", gid, rec.Version, want.Version)
			}
		}
		return nil
	})
	hg.stop[first.ID()]()
	second := hg.leader(10*time.Second, othersThan(ids, first.ID())...)
	term := second.elector.Status().Term
	westAfter, eastAfter := lease(second, id, "west"), lease(second, id, "east")
	if westAfter.LeaseHolder != second.ID() || leadership.TokenTerm(westAfter.FenceToken) != term || westAfter.FenceToken <= westBefore.FenceToken {
		t.Fatalf("west's lease %+v after takeover (before %+v), want it held by %s under term %d", westAfter, westBefore, second.ID(), term)
	}
	if eastAfter != eastBefore {
		t.Fatalf("east's finished lease moved: %+v -> %+v", eastBefore, eastAfter)
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if tr := west.leaseTransfers(id); len(tr) == 0 || tr[len(tr)-1].NewFenceToken != westAfter.FenceToken {
			return fmt.Errorf("west got transfers %+v, want one under %#x", tr, westAfter.FenceToken)
		}
		return nil
	})
	if tr := east.leaseTransfers(id); len(tr) != 0 {
		t.Fatalf("east, finished, got lease transfers: %+v", tr)
	}
}

// update is the one path a change takes: a commit gets one new version
// however often it is marked, wakes watchers, is written; a record written
// as it is keeps its version; a forgotten job leaves memory and disk.
func TestUpdateVersionsWritesAndWakes(t *testing.T) {
	_, g, _, _ := oneGate(t, time.Minute)
	ack, err := g.Submit(context.Background(), sleepJob())
	if err != nil {
		t.Fatal(err)
	}
	id := ack.JobID
	rec, changed, _ := g.record(id)
	version := func() (v uint64) {
		g.view(func() { v = g.version })
		return v
	}
	if err := g.update(func(tx *txn) {
		j := g.jobs[id]
		tx.commit(j)
		tx.commit(j)
	}); err != nil {
		t.Fatal(err)
	}
	after, _, _ := g.record(id)
	if after.Version != rec.Version+1 || version() != after.Version {
		t.Fatalf("version %d -> %d (gate at %d), want exactly one bump", rec.Version, after.Version, version())
	}
	select {
	case <-changed:
	default:
		t.Fatal("a commit did not wake the job's watchers")
	}
	onDisk := func(id string) *wire.GateJobRecord {
		recs, err := g.store.load()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Submission.JobID == id {
				return r
			}
		}
		return nil
	}
	if d := onDisk(id); d == nil || d.Version != after.Version {
		t.Fatalf("on disk %+v, want version %d", d, after.Version)
	}

	other := &wire.GateJobRecord{Submission: wire.JobSubmission{JobID: "j-adopted"}, Status: wire.JobRunning, Version: version() + 10}
	if err := g.update(func(tx *txn) {
		if g.adoptLocked(tx, other) == nil {
			t.Error("a newer record was not adopted")
		}
	}); err != nil {
		t.Fatal(err)
	}
	if d := onDisk("j-adopted"); d == nil || d.Version != other.Version || version() != other.Version {
		t.Fatalf("adopted record on disk %+v (gate at %d), want version %d kept", d, version(), other.Version)
	}

	if err := g.update(func(tx *txn) { tx.forget(id) }); err != nil {
		t.Fatal(err)
	}
	if holds(g, id) || onDisk(id) != nil {
		t.Fatal("a forgotten job is still held")
	}
}

// A datacenter that refuses a job for good fails only its own part at once
// (and is not asked again); the job runs on in the others and the client's
// answer is an acceptance.
func TestOneDatacenterRefusingFailsOnlyItsPart(t *testing.T) {
	_, g, east, west := oneGate(t, time.Minute)
	no := "too few workers for 1 core"
	east.refuse.Store(&no)
	// West misses the first attempt, so the leader's tick must send it
	// again: that tick would have asked east again too, had its refusal
	// left it on the list.
	west.dropSubs.Store(1)
	id := twoDCJob(t, g)
	if p := dcStatus(g, id, "east"); p.Status != wire.JobFailed || !strings.Contains(p.Error, "east refused the job: "+no) {
		t.Fatalf("east's part %s (%q), want FAILED with its refusal", p.Status, p.Error)
	}
	if p := dcStatus(g, id, "west"); p.Status.Terminal() {
		t.Fatalf("west's part %s, want it running on", p.Status)
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n := len(west.submissions(id)); n < 2 {
			return fmt.Errorf("west was asked %d times; the tick has not retried it yet", n)
		}
		return nil
	})
	if n := len(east.submissions(id)); n != 1 {
		t.Fatalf("east, which refused, was asked %d times", n)
	}
	if _, err := west.report(g, id, wire.JobCompleted); err != nil {
		t.Fatal(err)
	}
	st, _ := g.Job(context.Background(), id)
	if st.Status != wire.JobFailed || !strings.Contains(st.Error, "partial failure: 1 of 2") {
		t.Fatalf("job %s (%q), want a partial failure", st.Status, st.Error)
	}
}

// A cancel shows CANCELLING while a datacenter has not yet answered that
// its workers stopped, then CANCELLED.
func TestCancelShowsCancellingUntilDatacentersAnswer(t *testing.T) {
	_, g, east, west := oneGate(t, time.Minute)
	west.holdCancel = make(chan struct{})
	release := sync.OnceFunc(func() { close(west.holdCancel) })
	t.Cleanup(release)
	id := twoDCJob(t, g)
	for _, f := range []*fakeDC{east, west} {
		if _, err := f.report(g, id, wire.JobRunning); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := g.Cancel(context.Background(), id, "enough")
		done <- err
	}()
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		st, err := g.Job(context.Background(), id)
		if err != nil {
			return err
		}
		if st.Status != wire.JobCancelling {
			return fmt.Errorf("status %s, want CANCELLING while west has not answered", st.Status)
		}
		return nil
	})
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st, _ := g.Job(context.Background(), id); st.Status != wire.JobCancelled {
		t.Fatalf("status %s after every datacenter answered, want CANCELLED", st.Status)
	}
}

// A CRITICAL gate refuses a new job before storing it, with a retry-after.
// Here any scheduler lag at all is CRITICAL.
func TestCriticalGateRefusesNewJobs(t *testing.T) {
	hub := transport.NewHub()
	hg := startHubGates(t, hub, []string{"g1"}, time.Minute, func(c *Config) { c.Overload.CriticalLag = time.Nanosecond })
	east, west := newFakeDC(t, hub, "east"), newFakeDC(t, hub, "west")
	seeDCs(hg, east, west)
	g := hg.leader(10*time.Second, "g1")
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if r := g.loadRd.Load(); r == nil || r.Level != overload.Critical {
			return fmt.Errorf("gate graded %v, want CRITICAL", r)
		}
		return nil
	})
	_, err := g.Submit(context.Background(), sleepJob())
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeUnavailable || we.RetryAfter <= 0 {
		t.Fatalf("submit to a CRITICAL gate: %v, want unavailable with a retry-after", err)
	}
	if jobs, _ := g.Jobs(context.Background()); len(jobs) != 0 {
		t.Fatalf("the refused job was stored: %+v", jobs)
	}
}

// A HIGH gate leader hands its leadership to a gate that published a lower
// level, and does not stand again while one exists; while no gate is known
// to be healthier it keeps leading. Here every gate grades itself HIGH on
// any scheduler lag at all; the leader then learns (as SWIM's metadata
// would tell it) that the others are NORMAL.
func TestOverloadedGateLeaderHandsOverToAHealthierGate(t *testing.T) {
	hub := transport.NewHub()
	ids := []string{"g1", "g2", "g3"}
	hg := startHubGates(t, hub, ids, time.Minute, func(c *Config) {
		c.Overload.HighLag, c.Overload.CriticalLag = time.Nanosecond, time.Hour
	})
	l := hg.leader(10*time.Second, ids...)
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if r := l.loadReading(); r.Level != overload.High {
			return fmt.Errorf("leader graded %s, want HIGH", r.Level)
		}
		return nil
	})
	if !l.IsLeader() {
		t.Fatal("leadership moved while no gate was known to be healthier than the leader")
	}
	for _, id := range ids {
		l.loads.member(swim.NodeInfo{Name: id, Meta: swim.NodeMeta{Role: wire.RoleGate, Tags: map[string]string{loadTag: "0"}}}, true)
	}
	next := hg.leader(20*time.Second, slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == l.ID() })...)
	if l.IsLeader() {
		t.Fatalf("%s and %s both lead", l.ID(), next.ID())
	}
	view, err := l.Cluster(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if self := view.Nodes[0]; self.Load != "HIGH" || self.LoadReason == "" {
		t.Fatalf("the overloaded gate shows load %q (%q), want HIGH with its reason", self.Load, self.LoadReason)
	}
}
