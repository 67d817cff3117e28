package wire

import "testing"

// The output request comes from gates (the cluster key) to managers; a
// worker's key may not ask for a pipeline's output. The route-change hint
// goes from managers to workers.
func TestRainstormOutputRoles(t *testing.T) {
	const worker, manager, cluster = 1, 2, 3
	if !MaySend(cluster, manager, TypeRainstormOutputRequest) {
		t.Error("a gate may not ask a manager for a pipeline's output")
	}
	if MaySend(worker, manager, TypeRainstormOutputRequest) {
		t.Error("a worker key may ask a manager for a pipeline's output")
	}
	if !MaySend(manager, worker, TypeRainstormRoutesChanged) {
		t.Error("a manager may not tell a worker that routes changed")
	}
}
