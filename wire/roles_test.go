package wire

import (
	"slices"
	"testing"
)

// The replicated operations are sent only between peers of one role: no
// lower tier may send them to a higher one, and within a tier they pass.
func TestMaySendReplicatedOperations(t *testing.T) {
	const worker, manager, cluster = 1, 2, 3
	managerOps := []MsgType{TypeReplicateJob, TypeReplicateJobStatus, TypeRelayWorkerRegistration}
	// The batched rounds (provision_batch.go) go between managers alone too.
	batchOps := []MsgType{TypeProvisionBatch, TypeProvisionCommitBatch, TypeReplicateJobStatusBatch}
	gateOps := []MsgType{TypeReplicateGateRecord, TypeForwardJobProgress}
	for _, op := range append(slices.Clone(managerOps), batchOps...) {
		if !MaySend(manager, manager, op) {
			t.Errorf("%s refused between managers", op)
		}
		if MaySend(worker, manager, op) {
			t.Errorf("%s allowed from a worker key to a manager", op)
		}
		if MaySend(manager, cluster, op) {
			t.Errorf("%s allowed from a manager key to a gate", op)
		}
	}
	for _, op := range gateOps {
		if !MaySend(cluster, cluster, op) {
			t.Errorf("%s refused between gates", op)
		}
		if MaySend(manager, cluster, op) || MaySend(worker, cluster, op) {
			t.Errorf("%s allowed from a lower key to a gate", op)
		}
	}
	for _, op := range append(managerOps, gateOps...) {
		if n := op.String(); n == "" || !op.Known() || op < 150 || op > 169 {
			t.Errorf("replicated operation %d (%s) outside 150..169 or not in the catalogue", op, n)
		}
	}
}
