package gate

import (
	"context"
	"fmt"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/transport"
	"tempest/wire"
)

// A follower passes a datacenter's report to the leader as a
// ForwardJobProgress, and the gates take their replicated operations only
// from one another: a manager's key may open a gate's link, but a node that
// is not a configured gate can neither forward a report nor write a record.
func TestGateOperationsOnlyFromGates(t *testing.T) {
	hub := transport.NewHub()
	ids := []string{"g1", "g2", "g3"}
	hg := startHubGates(t, hub, ids, time.Minute)
	hg.observe(1)
	leader := hg.leader(10*time.Second, ids...)
	ack, err := leader.Submit(context.Background(), sleepJob())
	if err != nil {
		t.Fatal(err)
	}
	id := ack.JobID
	lease := leader.leases(id)[0]
	follower := hg.gates[othersThan(ids, leader.ID())[0]]
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if l, _ := follower.elector.Leader(); l != leader.ID() {
			return fmt.Errorf("%s follows %q", follower.ID(), l)
		}
		return nil
	})

	east := hub.Node("east-1")
	defer east.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	report := wire.JobProgress{JobID: id, Datacenter: "east", Status: wire.JobRunning, TotalCompleted: 42, FenceToken: lease.FenceToken}
	reply, err := east.Call(ctx, follower.ID(), &report)
	if err != nil {
		t.Fatalf("report through a follower: %v", err)
	}
	if a := reply.(*wire.ProgressAck); a.Leader != leader.ID() {
		t.Fatalf("report through a follower answered by %q, want the leader %s", a.Leader, leader.ID())
	}
	if st, err := leader.Job(ctx, id); err != nil || st.Status != wire.JobRunning {
		t.Fatalf("the leader after a forwarded report: %+v %v, want RUNNING", st, err)
	}

	if _, err := east.Call(ctx, leader.ID(), &wire.ForwardJobProgress{Report: report}); wire.CodeOf(err) != wire.CodeRejected {
		t.Errorf("a forwarded report from a manager: %v, want rejected", err)
	}
	stray := &wire.ReplicateGateRecord{Record: wire.GateJobRecord{Submission: wire.JobSubmission{JobID: "j-stray"}, Version: 1 << 40}}
	if _, err := east.Call(ctx, follower.ID(), stray); wire.CodeOf(err) != wire.CodeRejected {
		t.Errorf("a job record from a manager: %v, want rejected", err)
	}
	if holds(follower, "j-stray") {
		t.Errorf("a follower took a job record from a manager")
	}
}

// A manager the gate knows speaks for its own datacenter only: east's
// manager cannot renew or end west's part of a job.
func TestReportOnlyForTheSendersDatacenter(t *testing.T) {
	_, g, east, west := oneGate(t, time.Minute)
	id := twoDCJob(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	forged := &wire.JobProgress{JobID: id, Datacenter: "west", Status: wire.JobCompleted, FenceToken: lease(g, id, "west").FenceToken}
	if _, err := east.tr.Call(ctx, g.ID(), forged); wire.CodeOf(err) != wire.CodeRejected {
		t.Fatalf("east's manager reporting for west: %v, want rejected", err)
	}
	if p := dcStatus(g, id, "west"); p.Status.Terminal() {
		t.Fatalf("west's part %s after east spoke for it", p.Status)
	}
	if _, err := west.report(g, id, wire.JobRunning); err != nil {
		t.Fatalf("west's own report: %v", err)
	}
	if p := dcStatus(g, id, "west"); p.Status != wire.JobRunning {
		t.Fatalf("west's part %s after its own report, want RUNNING", p.Status)
	}
}
