package wire

// Requests a node holding only a lower tier's key may send to a node of a
// higher tier (security.Tier): a receiver that learns from a connection's
// hello that its peer holds no more than a worker's key (or a manager's)
// refuses every other request type from it. Between nodes of one tier
// nothing is refused: they cannot tell each other's roles apart.
var (
	workerRequests = map[MsgType]bool{
		TypePing:                  true,
		TypeWorkerRegistration:    true,
		TypeWorkflowProgress:      true,
		TypeWorkflowProgressBatch: true,
		TypeWorkerHeartbeat:       true,
		// RainStorm tasks run on workers: they send tuples to other tasks
		// and checkpoints to the store on the managers.
		TypeRainstormBatch:      true,
		TypeRainstormCheckpoint: true,
		// A task opens with the leader (fencing older incarnations) and
		// asks it where its downstream tasks run.
		TypeRainstormOpen:          true,
		TypeRainstormRoutesRequest: true,
		// A worker reads a dispatch's data blobs from the manager.
		TypeBlobStat:     true,
		TypeBlobChunkGet: true,
	}
	managerRequests = map[MsgType]bool{
		TypePing:             true,
		TypeJobProgress:      true,
		TypeManagerHeartbeat: true,
		// A manager fetches a job's blobs from the gate that sent it.
		TypeBlobStat:     true,
		TypeBlobChunkGet: true,
	}
)

// The replicated operations (replicate.go) are in neither list: they go
// between peers of one role (manager to manager, gate to gate), so a lower
// tier never sends them. A higher tier passes every type here (a gate's key
// can open a manager's link, and a manager given the whole secret is of the
// gates' tier), so each handler also checks that the authenticated sender
// is a configured peer of its own role.

// MaySend reports whether a peer whose key is of tier peer (1 worker,
// 2 manager, 3 cluster) may send request t to a node whose key is of tier
// own.
func MaySend(peer, own uint8, t MsgType) bool {
	switch {
	case peer >= own:
		return true
	case peer == 1:
		return workerRequests[t]
	case peer == 2:
		return managerRequests[t]
	}
	return false
}
