package wire

// Batched provisioning and status replication, manager to manager. A leader
// placing many workflows at once confirms and commits them in one round per
// peer instead of one round per workflow: each batch carries the same
// per-placement messages as the single-placement types, and every placement
// in it is judged on its own (its own fence token, its own worker). Like the
// replicated operations (replicate.go), these are in neither lower tier's
// list of requests: only a peer manager sends them, and each handler checks
// that the authenticated sender is one.

// ProvisionBatch asks a peer manager to confirm several placements.
// Answered with a ProvisionBatchConfirm holding one confirm per request, in
// the same order.
type ProvisionBatch struct {
	Requests []ProvisionRequest `cbor:"1,keyasint"`
}

// ProvisionBatchConfirm is a peer's answer to a ProvisionBatch.
type ProvisionBatchConfirm struct {
	Confirms []ProvisionConfirm `cbor:"1,keyasint"`
}

// ProvisionCommitBatch tells a peer several placements reached quorum.
// Answered with a CommitBatchAck once every commit it accepted is durable.
type ProvisionCommitBatch struct {
	Commits []ProvisionCommit `cbor:"1,keyasint"`
}

// CommitBatchAck acknowledges a ProvisionCommitBatch: Stored commits were
// made durable, Refused were not followed (stale leader or term).
type CommitBatchAck struct {
	NodeID  string `cbor:"1,keyasint"`
	Stored  int    `cbor:"2,keyasint,omitempty"`
	Refused int    `cbor:"3,keyasint,omitempty"`
}

// ReplicateJobStatusBatch hands a manager's peers the statuses of several
// jobs at once, each as a ReplicateJobStatus would carry it, stored in one
// commit. The leader folds the changes made while an earlier batch was on
// its way, so a job appears at most once. Answered with a StatusBatchAck
// once stored.
type ReplicateJobStatusBatch struct {
	Statuses []JobProgress `cbor:"1,keyasint"`
}

// StatusBatchAck answers a ReplicateJobStatusBatch once its statuses are
// durable. Unknown names the jobs the peer has no record of (it missed
// their submissions): their statuses were not stored, so a leader counting
// stores does not count this peer for them.
type StatusBatchAck struct {
	NodeID  string   `cbor:"1,keyasint"`
	Unknown []string `cbor:"2,keyasint,omitempty"`
}

func (*ProvisionBatch) Type() MsgType          { return TypeProvisionBatch }
func (*ProvisionBatchConfirm) Type() MsgType   { return TypeProvisionBatchConfirm }
func (*ProvisionCommitBatch) Type() MsgType    { return TypeProvisionCommitBatch }
func (*CommitBatchAck) Type() MsgType          { return TypeCommitBatchAck }
func (*ReplicateJobStatusBatch) Type() MsgType { return TypeReplicateJobStatusBatch }
func (*StatusBatchAck) Type() MsgType          { return TypeStatusBatchAck }
