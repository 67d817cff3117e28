package manager

import (
	"context"
	"fmt"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
)

// forgedTransfer is a LeaseTransfer as an old or hostile gate could still
// encode it: naming a gate (key 4, retired) other than its sender.
type forgedTransfer struct {
	JobID         string `cbor:"1,keyasint"`
	Datacenter    string `cbor:"2,keyasint"`
	ToGate        string `cbor:"4,keyasint"`
	NewFenceToken uint64 `cbor:"5,keyasint"`
}

func (*forgedTransfer) Type() wire.MsgType { return wire.TypeLeaseTransfer }

func leaseHolder(m *Manager, id string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if j, ok := m.jobs[id]; ok {
		return j.rec.Submission.Origin
	}
	return "(unknown job)"
}

// The gate holding a job's lease is whoever sealed the submission or the
// transfer, never a name in the body: no gate can hand a lease to another,
// and a submission without a fence token (a client's) has no holder.
func TestLeaseHolderIsTheAuthenticatedSender(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	c.addWorker("w1", 2)
	l := c.leader()
	ctx := context.Background()

	sub := sleepJob(t, "leased", 1, 1, time.Minute)
	sub.JobID = "j-leased"
	sub.FenceToken = 7 << 32
	sub.Origin = "g-forged"
	if _, err := c.hub.Node("g1").Call(ctx, l.ID(), sub); err != nil {
		t.Fatal(err)
	}
	if got := leaseHolder(l, sub.JobID); got != "g1" {
		t.Fatalf("lease holder after g1's submission = %q, want g1", got)
	}
	forged := &forgedTransfer{JobID: sub.JobID, ToGate: "g-forged", NewFenceToken: 8 << 32}
	if _, err := c.hub.Node("g2").Call(ctx, l.ID(), forged); err != nil {
		t.Fatal(err)
	}
	if got := leaseHolder(l, sub.JobID); got != "g2" {
		t.Fatalf("lease holder after g2's transfer naming another gate = %q, want g2", got)
	}

	plain := sleepJob(t, "plain", 1, 1, time.Minute)
	plain.JobID = "j-plain"
	plain.Origin = "g-forged"
	if _, err := c.hub.Node("c1").Call(ctx, l.ID(), plain); err != nil {
		t.Fatal(err)
	}
	if got := leaseHolder(l, plain.JobID); got != "" {
		t.Fatalf("lease holder of a submission without a fence token = %q, want none", got)
	}
}

// Each replicated operation is taken only from a configured peer manager,
// and a catalogue message from a peer means what it means from anyone: a
// JobSubmission is a new job (a follower redirects it, it does not store
// it), a WorkerRegistration must come from the worker it names.
func TestReplicatedOperationsOnlyFromPeers(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.leader()
	f := c.manager(others(c, l.ID())[0])
	ctx := context.Background()
	gate := c.hub.Node("g1")

	sub := sleepJob(t, "smuggled", 1, 1, time.Minute)
	sub.JobID = "j-smuggled"
	reg := wire.WorkerRegistration{NodeID: "w-ghost", Addr: "w-ghost", Datacenter: "dc1", TotalCores: 4}
	for _, op := range []wire.Message{
		&wire.ReplicateJob{Job: *sub},
		&wire.ReplicateJobStatus{Status: wire.JobProgress{JobID: sub.JobID, Status: wire.JobCompleted}},
		&wire.RelayWorkerRegistration{Registration: reg},
	} {
		if _, err := gate.Call(ctx, f.ID(), op); wire.CodeOf(err) != wire.CodeRejected {
			t.Errorf("%s from a gate: %v, want rejected", op.Type(), err)
		}
	}

	peer := c.hub.Node(l.ID())
	if _, err := peer.Call(ctx, f.ID(), sub); wire.CodeOf(err) != wire.CodeNotLeader {
		t.Errorf("a JobSubmission from a peer manager to a follower: %v, want not_leader", err)
	}
	if got := leaseHolder(f, sub.JobID); got != "(unknown job)" {
		t.Errorf("the follower stored a submission sent to it as a new job")
	}
	reply, err := peer.Call(ctx, f.ID(), &reg)
	if ack, ok := reply.(*wire.RegistrationAck); err != nil || !ok || ack.Accepted {
		t.Errorf("a WorkerRegistration from a peer manager naming a worker: %v %v, want refused", reply, err)
	}
	for _, wv := range f.workers.list() {
		if wv.ID == "w-ghost" {
			t.Fatalf("a worker registered by a message neither it nor a relay sent")
		}
	}

	// The relay itself, from a peer, is recorded.
	if reply, err := peer.Call(ctx, f.ID(), &wire.RelayWorkerRegistration{Registration: reg}); err != nil || !reply.(*wire.RegistrationAck).Accepted {
		t.Fatalf("a relayed registration from a peer: %v %v", reply, err)
	}
}

// TestPeersCountOnlyAttemptsThatRan: a dispatch the worker refuses never
// ran, so the leader takes its attempt back. Its peers had counted the
// attempt from the placement's commit and never took it back, so after a
// failover the job showed attempts that never happened (one shard COMPLETED
// "after 3 attempts" in TestLeaderKilledRightAfterAck under load). Every
// manager must show the leader's count.
func TestPeersCountOnlyAttemptsThatRan(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	w := c.addWorker("w1", 2)
	w.mu.Lock()
	w.refuseFirst = true
	w.mu.Unlock()
	l := c.leader()
	ack, err := l.Submit(context.Background(), sleepJob(t, "refused-once", 1, 1, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, l, ack.JobID, wire.JobCompleted, 10*time.Second)
	for _, m := range c.running() {
		testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
			st, err := m.Job(context.Background(), ack.JobID)
			if err != nil {
				return err
			}
			if len(st.Workflows) != 1 || st.Workflows[0].Status != wire.WorkflowCompleted || st.Workflows[0].Attempts != 1 {
				return fmt.Errorf("%s shows %+v, want the workflow COMPLETED after 1 attempt", m.ID(), st.Workflows)
			}
			return nil
		})
	}
}
