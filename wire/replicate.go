package wire

// Replicated operations: every change a leader hands its peers, and every
// message a node relays for another, is a message of its own type named
// for what it does, never a catalogue message reused with a meaning that
// depends on who sent it. A receiver then checks one thing per type: that
// the sender (the envelope's authenticated id, never a body field) is a
// peer of the role that sends this operation. Like the rest of the
// catalogue, operations are only appended, never renumbered.

// ReplicateJob hands a manager's peers a job its leader accepted, before
// any workflow is provisioned. The job is acknowledged only once a majority
// of managers stored it, so the answer is a JobAck. Manager to manager.
type ReplicateJob struct {
	Job JobSubmission `cbor:"1,keyasint"`
}

// ReplicateJobStatus hands a manager's peers a job's status after a change
// (a job's or a workflow's status, a placement, a lease): each workflow's
// status, worker and fence token, and the final step statistics of ended
// workflows, so a successor neither re-runs finished work nor loses its
// results. Answered with a ProgressAck once stored. Manager to manager.
type ReplicateJobStatus struct {
	Status JobProgress `cbor:"1,keyasint"`
}

// RelayWorkerRegistration passes a worker's registration, heard by one
// manager from the worker itself, on to that manager's peers, so every
// manager can reach every worker (state sync after a leader change)
// without waiting for SWIM gossip. A relayed registration is recorded and
// not relayed again. Manager to manager.
type RelayWorkerRegistration struct {
	Registration WorkerRegistration `cbor:"1,keyasint"`
}

// ReplicateGateRecord hands the other gates a job record the gate leader
// changed (a new job, a lease, a datacenter's status, a withdrawal); of two
// copies the higher version wins. Answered with a JobAck. Gate to gate.
type ReplicateGateRecord struct {
	Record GateJobRecord `cbor:"1,keyasint"`
}

// ForwardJobProgress passes a datacenter's report, which a gate that does
// not lead received, on to the gate leader. Answered with the leader's
// ProgressAck. Gate to gate.
type ForwardJobProgress struct {
	Report JobProgress `cbor:"1,keyasint"`
}

func (*ReplicateJob) Type() MsgType            { return TypeReplicateJob }
func (*ReplicateJobStatus) Type() MsgType      { return TypeReplicateJobStatus }
func (*RelayWorkerRegistration) Type() MsgType { return TypeRelayWorkerRegistration }
func (*ReplicateGateRecord) Type() MsgType     { return TypeReplicateGateRecord }
func (*ForwardJobProgress) Type() MsgType      { return TypeForwardJobProgress }
