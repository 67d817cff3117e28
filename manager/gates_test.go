package manager

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/swim"
	"tempest/transport"
	"tempest/wire"
)

// Reports go to the hinted gate, then the lease holder, then the rest by
// name; a gate that just failed a report goes last until gateFailedFor
// passes.
func TestGateTargetsOrder(t *testing.T) {
	now := time.Unix(100, 0)
	g := &gateTable{g: map[string]string{"g1": "a1", "g2": "a2", "g3": "a3"}, failed: map[string]time.Time{}, now: func() time.Time { return now }}
	ids := func(first ...string) string {
		var s string
		for _, p := range g.targets(first...) {
			s += p.NodeID + " "
		}
		return s
	}
	if got := ids("g3", "g2"); got != "g3 g2 g1 " {
		t.Fatalf("targets = %q, want hint, holder, rest", got)
	}
	g.fail("g3")
	if got := ids("g3", "g2"); got != "g2 g1 g3 " {
		t.Fatalf("after g3 failed: %q, want it last", got)
	}
	now = now.Add(gateFailedFor + time.Second)
	if got := ids("g3", "g2"); got != "g3 g2 g1 " {
		t.Fatalf("after the penalty: %q, want g3 first again", got)
	}
	if got := ids("gone", "g1"); got != "g1 g2 g3 " {
		t.Fatalf("unknown hint: %q", got)
	}
}

// A command under an older fence token than the newest seen for the job is
// refused; zero (a client's own command) and newer tokens are not.
func TestStaleFence(t *testing.T) {
	j := &jobState{}
	j.rec.Submission = wire.JobSubmission{JobID: "j", FenceToken: 10, Origin: "g1"}
	if err := staleFenceLocked(j, 9); wire.CodeOf(err) != wire.CodeStaleFence {
		t.Fatalf("older token: %v, want stale_fence", err)
	}
	for _, tok := range []uint64{0, 10, 11} {
		if err := staleFenceLocked(j, tok); err != nil {
			t.Fatalf("token %d: %v", tok, err)
		}
	}
	if !adoptLeaseLocked(j, 12, "g2") || j.rec.Submission.FenceToken != 12 || j.rec.Submission.Origin != "g2" {
		t.Fatalf("newer lease not adopted: %+v", j.rec.Submission)
	}
	if adoptLeaseLocked(j, 11, "g3") || j.rec.Submission.Origin != "g2" {
		t.Fatalf("older lease adopted: %+v", j.rec.Submission)
	}
}

// A Cancel in a gate's answer is obeyed only from the job's lease holder
// under a token not older than the newest the manager knows.
func TestGateCancelIsFenced(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	c.addWorker("w1", 2)
	l := c.leader()
	sub := sleepJob(t, "leased", 1, 1, time.Minute)
	sub.JobID = "j-leased"
	sub.FenceToken = 7 << 32
	if _, err := c.hub.Node("g1").Call(context.Background(), l.ID(), sub); err != nil {
		t.Fatal(err)
	}
	waitJob(t, l, sub.JobID, wire.JobRunning, 10*time.Second)
	jp := wire.JobProgress{JobID: sub.JobID, Status: wire.JobRunning}
	for _, ack := range []wire.ProgressAck{
		{Leader: "g2", Cancel: true, FenceToken: sub.FenceToken},     // not the lease holder
		{Leader: "g1", Cancel: true, FenceToken: sub.FenceToken - 1}, // an older lease
		{Leader: "g1", Cancel: true},                                 // no token at all
	} {
		l.gateAcked(context.Background(), jp, &ack, time.Now())
		if st, err := l.Job(context.Background(), sub.JobID); err != nil || st.Status.Terminal() {
			t.Fatalf("after an unfenced cancel %+v: %v %v", ack, st.Status, err)
		}
	}
	l.gateAcked(context.Background(), jp, &wire.ProgressAck{Leader: "g1", Cancel: true, FenceToken: sub.FenceToken}, time.Now())
	waitJob(t, l, sub.JobID, wire.JobCancelled, 10*time.Second)
}

// A datacenter cut off from its gate stops the gate's job once the lease
// lapses: while the lease holder acknowledges reports the job runs on,
// and once nothing answers for lease_ttl the manager fails it here, as the
// gate has.
func TestGateLeaseLapseStopsTheJob(t *testing.T) {
	c := newTestCluster(t, 1, func(cfg *Config) { cfg.GateReportInterval = 50 * time.Millisecond })
	c.addWorker("w1", 2)
	l := c.leader()
	const ttl = 400 * time.Millisecond
	var answering atomic.Bool
	answering.Store(true)
	var renewals atomic.Int64
	g1 := c.hub.Node("g1")
	g1.Handle(wire.TypeJobProgress, func(_ context.Context, _ transport.Peer, _ wire.Message) (wire.Message, error) {
		if !answering.Load() {
			return nil, wire.Errorf(wire.CodeUnavailable, "cut off")
		}
		renewals.Add(1)
		return &wire.ProgressAck{Leader: "g1", LeaseTTL: ttl}, nil
	})
	l.gates.set("g1", "g1")
	// The loop runs beside a gate SWIM membership, which hub clusters lack.
	l.spawn(l.gateReportLoop)
	sub := sleepJob(t, "leased", 1, 1, time.Minute)
	sub.JobID = "j-lapse"
	submitAsGate(t, g1, l, sub, ttl)
	waitJob(t, l, sub.JobID, wire.JobRunning, 10*time.Second)
	// Renewed reports spanning several lease periods keep it running.
	testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		if n := renewals.Load(); n < int64(4*ttl/(50*time.Millisecond)) {
			return fmt.Errorf("%d renewals so far", n)
		}
		return nil
	})
	if st, err := l.Job(context.Background(), sub.JobID); err != nil || st.Status != wire.JobRunning {
		t.Fatalf("job with a renewed lease: %v %v, want RUNNING", st.Status, err)
	}
	answering.Store(false)
	st := waitJob(t, l, sub.JobID, wire.JobFailed, 20*time.Second)
	if !strings.Contains(st.Error, "lease lapsed") {
		t.Fatalf("job failed with %q, want the lapsed lease named", st.Error)
	}
}

// The gates' cluster spans datacenters, so a manager's membership of it runs
// the gates' profile even when its own datacenter runs fastlan.
func TestGateSwimRunsTheGatesProfile(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ID = "m1"
	cfg.GateSwimBind = "127.0.0.1:7403"
	if cfg.GateSwimProfile != swim.ProfileLAN {
		t.Fatalf("default gate swim profile %q", cfg.GateSwimProfile)
	}
	if cfg.SwimProfile != swim.ProfileFastLAN {
		t.Fatalf("default datacenter swim profile %q, want fastlan", cfg.SwimProfile)
	}
	scfg, err := gateSwimConfig(cfg, swim.NodeMeta{Role: wire.RoleManager}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if scfg.Profile != swim.ProfileLAN || scfg.BindAddr != "127.0.0.1" || scfg.BindPort != 7403 || scfg.NodeName != "m1" {
		t.Fatalf("gate swim config = %+v", scfg)
	}
	cfg.GateSwimProfile = "wan"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "GateSwimProfile") {
		t.Fatalf("an unknown gate swim profile validated: %v", err)
	}
}

// A gate's report names why a workflow waits: the gate shows it in the
// job's status as a manager does for a job submitted to it.
func TestGateReportSaysWhyAWorkflowWaits(t *testing.T) {
	c := newTestCluster(t, 1, func(cfg *Config) { cfg.GateReportInterval = 50 * time.Millisecond })
	c.addWorker("w1", 1)
	l := c.leader()
	waits := make(chan map[string]string, 64)
	g1 := c.hub.Node("g1")
	g1.Handle(wire.TypeJobProgress, func(_ context.Context, _ transport.Peer, msg wire.Message) (wire.Message, error) {
		got := map[string]string{}
		for _, w := range msg.(*wire.JobProgress).Workflows {
			got[w.WorkflowName+" "+string(w.Status)] = w.Waiting
		}
		select {
		case waits <- got:
		default:
		}
		return &wire.ProgressAck{Leader: "g1", LeaseTTL: time.Minute}, nil
	})
	l.gates.set("g1", "g1")
	l.spawn(l.gateReportLoop)
	// Two one-core workflows on a one-core worker: one runs, one waits.
	sub := sleepJob(t, "w", 2, 1, time.Minute)
	sub.JobID = "j-waits"
	submitAsGate(t, g1, l, sub, time.Minute)
	deadline := time.After(20 * time.Second)
	for {
		select {
		case got := <-waits:
			var running, waiting int
			for k, why := range got {
				switch {
				case strings.HasSuffix(k, " RUNNING") && why == "":
					running++
				case strings.HasSuffix(k, " PENDING") && why == "no free core (needs 1)":
					waiting++
				}
			}
			if running == 1 && waiting == 1 {
				return
			}
		case <-deadline:
			t.Fatal("no report to the gate named a RUNNING workflow and a PENDING one waiting for a core")
		}
	}
}

// submitAsGate submits sub to manager l as gate g1 does: under g1's lease
// (fence token 7<<32, ttl), naming g1 as its origin.
func submitAsGate(t *testing.T, g1 transport.Transport, l *Manager, sub *wire.JobSubmission, ttl time.Duration) {
	t.Helper()
	sub.FenceToken = 7 << 32
	sub.Origin = "g1"
	sub.LeaseTTL = ttl
	if _, err := g1.Call(context.Background(), l.ID(), sub); err != nil {
		t.Fatal(err)
	}
}
