package wire

// Requests a node holding only a lower tier's key may send to a node of a
// higher tier (security.Tier): a receiver that learns from a connection's
// hello that its peer holds no more than a worker's key (or a manager's)
// refuses every other request type from it. Between nodes of one tier
// nothing is refused: they cannot tell each other's roles apart.
//
// This is the one table of who may send what; docs/security.md shows it,
// and TestSecurityDocMatchesMaySend keeps the two the same. Each entry is
// what a role's code really sends upwards, and no more: a type a lower
// tier never sends is one a stolen key of that tier cannot use.

// upward is a set of (sender tier, receiver tier) pairs, sender below.
type upward uint8

const (
	workerToManager upward = 1 << iota
	workerToGate
	managerToGate
)

// upwardSenders is who below a receiver may send it request t.
func upwardSenders(t MsgType) upward {
	switch t {
	case TypePing:
		// A liveness probe any node may make; it changes nothing.
		return workerToManager | workerToGate | managerToGate
	case TypeWorkerRegistration, TypeWorkerHeartbeat, TypeWorkflowProgress, TypeWorkflowProgressBatch:
		// A worker joins, reports its health, and reports the work it
		// was dispatched (the manager takes a report only from the
		// worker the work went to).
		return workerToManager
	case TypeRainstormOpen, TypeRainstormCheckpoint, TypeRainstormRoutesRequest:
		// A pipeline task opens with the leader (the fence), checkpoints
		// to it and asks where its neighbours run; each served only to
		// the worker the task is dispatched to. Batches and their acks
		// go worker to worker, at one tier.
		return workerToManager
	case TypeBlobChunkGet:
		// A worker reads its dispatch's data and source blobs (only
		// those) from a manager; a manager fetches a job's blobs from
		// the gate that sent it.
		return workerToManager | managerToGate
	case TypeBlobStat:
		// A manager asks the sending gate whether it holds a blob.
		return managerToGate
	case TypeJobProgress:
		// A datacenter's manager leader reports a gate's job to it.
		return managerToGate
	}
	return 0
}

// The replicated operations (replicate.go) are in no entry: they go
// between peers of one role (manager to manager, gate to gate), so a lower
// tier never sends them. A higher tier passes every type here (a gate's key
// can open a manager's link, and a manager given the whole secret is of the
// gates' tier), so each handler also checks that the authenticated sender
// is a configured peer of its own role.

// MaySend reports whether a peer whose key is of tier peer (1 worker,
// 2 manager, 3 cluster) may send request t to a node whose key is of tier
// own.
func MaySend(peer, own uint8, t MsgType) bool {
	var pair upward
	switch {
	case peer >= own:
		return true
	case peer == 1 && own == 2:
		pair = workerToManager
	case peer == 1:
		pair = workerToGate
	case peer == 2:
		pair = managerToGate
	default:
		return false
	}
	return upwardSenders(t)&pair != 0
}
