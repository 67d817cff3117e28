package transport

import (
	"context"
	"testing"

	"tempest/security"
	"tempest/wire"
)

func roleSecret(t *testing.T, secret string, role security.Tier) string {
	t.Helper()
	if secret == "" || role == security.TierCluster {
		return secret
	}
	s, err := security.DeriveRoleSecret(secret, role)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A node holding only the worker key may send a manager only what workers
// send; a manager key may send a gate only what managers send. Downwards,
// and between nodes of one tier, everything goes.
func TestKeyTiersLimitRequestTypes(t *testing.T) {
	worker := newNode(t, "w", nodeOpts{current: roleSecret(t, secretOld, security.TierWorker)})
	manager := newNode(t, "m", nodeOpts{current: roleSecret(t, secretOld, security.TierManager)})
	manager2 := newNode(t, "m2", nodeOpts{current: roleSecret(t, secretOld, security.TierManager)})
	gate := newNode(t, "g", nodeOpts{})
	for _, n := range []*QUIC{worker, manager, manager2, gate} {
		echo(n, nil)
	}
	ctx := context.Background()
	cases := []struct {
		from, to *QUIC
		msg      wire.Message
		ok       bool
	}{
		{worker, manager, &wire.Ping{}, true},
		{worker, manager, &wire.WorkflowProgress{}, true},
		{worker, manager, &wire.WorkerRegistration{}, true},
		{worker, manager, &wire.VoteRequest{}, false},
		{worker, manager, &wire.ProvisionCommit{}, false},
		{worker, manager, &wire.JobSubmission{}, false},
		{worker, gate, &wire.GateJobRecord{}, false},
		// What a worker never sends upwards is refused too: batches go
		// worker to worker, blob stats manager to gate, and a worker
		// speaks to managers only.
		{worker, manager, &wire.RainstormBatch{}, false},
		{worker, manager, &wire.BlobStat{}, false},
		{worker, manager, &wire.RainstormCheckpoint{}, true},
		{worker, manager, &wire.BlobChunkGet{}, true},
		{worker, gate, &wire.WorkerRegistration{}, false},
		{worker, gate, &wire.RainstormCheckpoint{}, false},
		{worker, gate, &wire.Ping{}, true},
		{manager, gate, &wire.ManagerHeartbeat{}, false},
		{manager, gate, &wire.BlobChunkGet{}, true},
		{manager, worker, &wire.WorkflowDispatch{}, true},
		{manager, worker, &wire.CancelJob{}, true},
		{manager, manager2, &wire.VoteRequest{}, true},
		{manager, manager2, &wire.ProvisionCommit{}, true},
		{manager, gate, &wire.JobProgress{}, true},
		{manager, gate, &wire.GateJobRecord{}, false},
		{manager, gate, &wire.VoteRequest{}, false},
		{gate, manager, &wire.JobSubmission{}, true},
		{gate, manager, &wire.LeaseTransfer{}, true},
		// Replicated operations go between peers of one role.
		{worker, manager, &wire.ReplicateJob{}, false},
		{worker, manager, &wire.RelayWorkerRegistration{}, false},
		{manager, manager2, &wire.ReplicateJob{}, true},
		{manager, manager2, &wire.ReplicateJobStatus{}, true},
		{manager, manager2, &wire.RelayWorkerRegistration{}, true},
		{manager, gate, &wire.ReplicateJobStatus{}, false},
		{manager, gate, &wire.ReplicateGateRecord{}, false},
		{manager, gate, &wire.ForwardJobProgress{}, false},
	}
	refused := uint64(0)
	for _, tc := range cases {
		_, err := tc.from.Call(ctx, tc.to.Addr(), tc.msg)
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s -> %s %s: %v, want served", tc.from.LocalID(), tc.to.LocalID(), tc.msg.Type(), err)
		case !tc.ok && wire.CodeOf(err) != wire.CodeRejected:
			t.Errorf("%s -> %s %s: %v, want rejected", tc.from.LocalID(), tc.to.LocalID(), tc.msg.Type(), err)
		case !tc.ok:
			refused++
		}
	}
	if n := manager.Stats().RoleRefused + gate.Stats().RoleRefused; n != refused {
		t.Fatalf("role refusals counted %d, want %d", n, refused)
	}
}

// Rotation in three passes works with role keys: each node holds its own
// role's key of the old and new secrets, derived from each.
func TestRotationThreePassesWithRoleKeys(t *testing.T) {
	type keys struct{ cur, prev string }
	steps := []struct {
		name string
		m, w keys
	}{
		{"start", keys{secretOld, ""}, keys{secretOld, ""}},
		{"install m", keys{secretOld, secretNew}, keys{secretOld, ""}},
		{"install w", keys{secretOld, secretNew}, keys{secretOld, secretNew}},
		{"use m", keys{secretNew, secretOld}, keys{secretOld, secretNew}},
		{"use w", keys{secretNew, secretOld}, keys{secretNew, secretOld}},
		{"remove m", keys{secretNew, ""}, keys{secretNew, secretOld}},
		{"remove w", keys{secretNew, ""}, keys{secretNew, ""}},
	}
	m := newNode(t, "m", nodeOpts{current: roleSecret(t, secretOld, security.TierManager)})
	w := newNode(t, "w", nodeOpts{current: roleSecret(t, secretOld, security.TierWorker)})
	echo(m, nil)
	echo(w, nil)
	ctx := context.Background()
	for _, st := range steps {
		if err := m.keys.Reload(roleSecret(t, st.m.cur, security.TierManager), roleSecret(t, st.m.prev, security.TierManager)); err != nil {
			t.Fatalf("%s: reload m: %v", st.name, err)
		}
		if err := w.keys.Reload(roleSecret(t, st.w.cur, security.TierWorker), roleSecret(t, st.w.prev, security.TierWorker)); err != nil {
			t.Fatalf("%s: reload w: %v", st.name, err)
		}
		if _, err := m.Call(ctx, w.Addr(), &wire.WorkflowDispatch{}); err != nil {
			t.Fatalf("%s: m -> w: %v", st.name, err)
		}
		if _, err := w.Call(ctx, m.Addr(), &wire.WorkflowProgress{}); err != nil {
			t.Fatalf("%s: w -> m: %v", st.name, err)
		}
		// A fresh connection each pass, so the hello runs under the new keys too.
		fresh := newNode(t, "w-"+st.name, nodeOpts{current: roleSecret(t, st.w.cur, security.TierWorker), previous: roleSecret(t, st.w.prev, security.TierWorker)})
		if err := ping(ctx, fresh, m.Addr()); err != nil {
			t.Fatalf("%s: new worker connection: %v", st.name, err)
		}
	}
}
