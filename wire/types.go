package wire

import (
	"errors"
	"fmt"
)

// MsgType identifies a message in the catalogue. Values are part of the wire
// contract: never renumber, only append.
type MsgType uint16

const (
	TypeInvalid MsgType = 0

	// Diagnostics.
	TypePing MsgType = 1
	TypePong MsgType = 2

	// Typed error reply to any request.
	TypeError MsgType = 9

	// Job lifecycle.
	TypeJobSubmission MsgType = 10
	TypeJobAck        MsgType = 11
	TypeCancelJob     MsgType = 12
	TypeCancelAck     MsgType = 13

	// Workflow dispatch.
	TypeWorkflowDispatch    MsgType = 20
	TypeWorkflowDispatchAck MsgType = 21

	// Progress and status.
	TypeWorkflowProgress MsgType = 30
	TypeJobProgress      MsgType = 31
	// 32 was GlobalJobStatus, never sent: retired, not reused.
	TypeProgressAck MsgType = 33

	// Quorum provisioning.
	TypeProvisionRequest MsgType = 40
	TypeProvisionConfirm MsgType = 41
	TypeProvisionCommit  MsgType = 42
	TypeCommitAck        MsgType = 43

	// State sync.
	TypeStateSyncRequest  MsgType = 50
	TypeStateSyncResponse MsgType = 51

	// Gate leases. 60 was DatacenterLease as a message of its own, never
	// sent (leases travel inside GateJobRecord): retired, not reused.
	TypeLeaseTransfer MsgType = 61
	TypeLeaseAck      MsgType = 62
	TypeGateJobRecord MsgType = 63

	// Registration and heartbeats (heartbeats normally ride in SWIM acks).
	TypeWorkerRegistration MsgType = 70
	TypeRegistrationAck    MsgType = 71
	TypeWorkerHeartbeat    MsgType = 72
	TypeManagerHeartbeat   MsgType = 73

	// Leader election.
	TypePreVoteRequest     MsgType = 80
	TypePreVoteResponse    MsgType = 81
	TypeVoteRequest        MsgType = 82
	TypeVoteResponse       MsgType = 83
	TypeLeaderHeartbeat    MsgType = 84
	TypeLeaderHeartbeatAck MsgType = 85
	TypeTimeoutNow         MsgType = 86

	// Connection hello: the first frame each way on a new connection, before
	// any envelope (transport/handshake.go). Never sent inside an envelope.
	TypeHello    MsgType = 90
	TypeHelloAck MsgType = 91

	// Gate durability: a gate asking the others for one job's record, and
	// asking a manager for its heartbeat.
	TypeGateRecordRequest    MsgType = 110
	TypeManagerStatusRequest MsgType = 111
	// A leader telling its peers its API URL (api.Addresses).
	TypeLeaderAPI MsgType = 112

	// RainStorm pipelines: tuples between tasks, checkpoints to the store.
	TypeRainstormBatch         MsgType = 120
	TypeRainstormBatchAck      MsgType = 121
	TypeRainstormCheckpoint    MsgType = 122
	TypeRainstormCheckpointAck MsgType = 123

	// Content-addressed blobs (blobs.go).
	TypeBlobChunkPut MsgType = 130
	TypeBlobCommit   MsgType = 131
	TypeBlobStat     MsgType = 132
	TypeBlobAck      MsgType = 133
	TypeBlobChunkGet MsgType = 134
	TypeBlobChunk    MsgType = 135
	// RainStorm runtime (rainstorm_rt.go): task fencing and routes, and the
	// checkpoint store's replication between managers.
	TypeRainstormOpen          MsgType = 140
	TypeRainstormOpenReply     MsgType = 141
	TypeRainstormRoutesRequest MsgType = 142
	TypeRainstormRoutes        MsgType = 143
	TypeRainstormReplicate     MsgType = 144
	TypeRainstormReplicateAck  MsgType = 145
	TypeRainstormSyncRequest   MsgType = 146
	TypeRainstormSyncResponse  MsgType = 147

	// Replicated operations (replicate.go), one type per operation.
	// Manager to manager:
	TypeReplicateJob            MsgType = 150
	TypeReplicateJobStatus      MsgType = 151
	TypeRelayWorkerRegistration MsgType = 152
	// Gate to gate:
	TypeReplicateGateRecord MsgType = 160
	TypeForwardJobProgress  MsgType = 161
	// RainStorm output through a gate (rainstorm_out.go), paged; and the
	// leader's hint to workers that a pipeline's routes changed.
	TypeRainstormOutputRequest MsgType = 170
	TypeRainstormOutputPage    MsgType = 171
	TypeRainstormRoutesChanged MsgType = 172
	// A datacenter's workers for a gate's cluster view (datacenter_nodes.go).
	TypeDatacenterNodesRequest MsgType = 176
	TypeDatacenterNodes        MsgType = 177

	// Batched provisioning and status replication (provision_batch.go).
	// Manager to manager:
	TypeProvisionBatch          MsgType = 190
	TypeProvisionBatchConfirm   MsgType = 191
	TypeProvisionCommitBatch    MsgType = 192
	TypeCommitBatchAck          MsgType = 193
	TypeReplicateJobStatusBatch MsgType = 194
	TypeStatusBatchAck          MsgType = 195
	// Batched dispatches and progress reports (worker_batch.go).
	// Manager leader to worker, and worker to manager leader:
	TypeWorkflowDispatchBatch    MsgType = 196
	TypeWorkflowDispatchBatchAck MsgType = 197
	TypeWorkflowProgressBatch    MsgType = 198
	TypeProgressBatchAck         MsgType = 199
)

// Class groups message types for rate limiting and circuit breaking: a flood
// of progress updates must not starve elections, and a breaker tripped by slow
// dispatches must not block heartbeats.
type Class uint8

const (
	ClassControl  Class = iota // jobs, cancels, provisioning, state sync, leases, registration
	ClassElection              // votes and leader heartbeats
	ClassDispatch              // workflow dispatch to workers
	ClassProgress              // progress streams and heartbeats
	ClassDiag                  // ping/pong
	// ClassBulk carries blob chunks: megabyte messages whose slow calls must
	// not trip the control breaker to a peer nor use up its rate limit.
	ClassBulk
	numClasses
)

// NumClasses is the number of message classes, for sizing per-class tables.
const NumClasses = int(numClasses)

func (c Class) String() string {
	switch c {
	case ClassControl:
		return "control"
	case ClassElection:
		return "election"
	case ClassDispatch:
		return "dispatch"
	case ClassProgress:
		return "progress"
	case ClassDiag:
		return "diag"
	case ClassBulk:
		return "bulk"
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

type typeInfo struct {
	name  string
	class Class
	new   func() Message
}

// catalogue is an immutable table built once; it is the single place that
// maps a type number to its Go struct.
var catalogue = map[MsgType]typeInfo{
	TypePing:  {"Ping", ClassDiag, func() Message { return new(Ping) }},
	TypePong:  {"Pong", ClassDiag, func() Message { return new(Pong) }},
	TypeError: {"Error", ClassControl, func() Message { return new(Error) }},

	TypeJobSubmission: {"JobSubmission", ClassControl, func() Message { return new(JobSubmission) }},
	TypeJobAck:        {"JobAck", ClassControl, func() Message { return new(JobAck) }},
	TypeCancelJob:     {"CancelJob", ClassControl, func() Message { return new(CancelJob) }},
	TypeCancelAck:     {"CancelAck", ClassControl, func() Message { return new(CancelAck) }},

	TypeWorkflowDispatch:    {"WorkflowDispatch", ClassDispatch, func() Message { return new(WorkflowDispatch) }},
	TypeWorkflowDispatchAck: {"WorkflowDispatchAck", ClassDispatch, func() Message { return new(WorkflowDispatchAck) }},

	TypeWorkflowDispatchBatch:    {"WorkflowDispatchBatch", ClassDispatch, func() Message { return new(WorkflowDispatchBatch) }},
	TypeWorkflowDispatchBatchAck: {"WorkflowDispatchBatchAck", ClassDispatch, func() Message { return new(WorkflowDispatchBatchAck) }},

	TypeWorkflowProgress: {"WorkflowProgress", ClassProgress, func() Message { return new(WorkflowProgress) }},
	TypeJobProgress:      {"JobProgress", ClassProgress, func() Message { return new(JobProgress) }},
	TypeProgressAck:      {"ProgressAck", ClassProgress, func() Message { return new(ProgressAck) }},

	TypeWorkflowProgressBatch: {"WorkflowProgressBatch", ClassProgress, func() Message { return new(WorkflowProgressBatch) }},
	TypeProgressBatchAck:      {"ProgressBatchAck", ClassProgress, func() Message { return new(ProgressBatchAck) }},

	TypeProvisionRequest: {"ProvisionRequest", ClassControl, func() Message { return new(ProvisionRequest) }},
	TypeProvisionConfirm: {"ProvisionConfirm", ClassControl, func() Message { return new(ProvisionConfirm) }},
	TypeProvisionCommit:  {"ProvisionCommit", ClassControl, func() Message { return new(ProvisionCommit) }},
	TypeCommitAck:        {"CommitAck", ClassControl, func() Message { return new(CommitAck) }},

	TypeStateSyncRequest:  {"StateSyncRequest", ClassControl, func() Message { return new(StateSyncRequest) }},
	TypeStateSyncResponse: {"StateSyncResponse", ClassControl, func() Message { return new(StateSyncResponse) }},

	TypeLeaseTransfer: {"LeaseTransfer", ClassControl, func() Message { return new(LeaseTransfer) }},
	TypeLeaseAck:      {"LeaseAck", ClassControl, func() Message { return new(LeaseAck) }},
	TypeGateJobRecord: {"GateJobRecord", ClassControl, func() Message { return new(GateJobRecord) }},

	TypeGateRecordRequest:    {"GateRecordRequest", ClassControl, func() Message { return new(GateRecordRequest) }},
	TypeManagerStatusRequest: {"ManagerStatusRequest", ClassControl, func() Message { return new(ManagerStatusRequest) }},
	TypeLeaderAPI:            {"LeaderAPI", ClassControl, func() Message { return new(LeaderAPI) }},

	TypeWorkerRegistration: {"WorkerRegistration", ClassControl, func() Message { return new(WorkerRegistration) }},
	TypeRegistrationAck:    {"RegistrationAck", ClassControl, func() Message { return new(RegistrationAck) }},
	TypeWorkerHeartbeat:    {"WorkerHeartbeat", ClassProgress, func() Message { return new(WorkerHeartbeat) }},
	TypeManagerHeartbeat:   {"ManagerHeartbeat", ClassProgress, func() Message { return new(ManagerHeartbeat) }},

	TypePreVoteRequest:     {"PreVoteRequest", ClassElection, func() Message { return new(PreVoteRequest) }},
	TypePreVoteResponse:    {"PreVoteResponse", ClassElection, func() Message { return new(PreVoteResponse) }},
	TypeVoteRequest:        {"VoteRequest", ClassElection, func() Message { return new(VoteRequest) }},
	TypeVoteResponse:       {"VoteResponse", ClassElection, func() Message { return new(VoteResponse) }},
	TypeLeaderHeartbeat:    {"LeaderHeartbeat", ClassElection, func() Message { return new(LeaderHeartbeat) }},
	TypeLeaderHeartbeatAck: {"LeaderHeartbeatAck", ClassElection, func() Message { return new(LeaderHeartbeatAck) }},
	TypeTimeoutNow:         {"TimeoutNow", ClassElection, func() Message { return new(TimeoutNow) }},

	TypeHello:    {"Hello", ClassControl, func() Message { return new(Hello) }},
	TypeHelloAck: {"HelloAck", ClassControl, func() Message { return new(HelloAck) }},

	TypeRainstormBatch:         {"RainstormBatch", ClassDispatch, func() Message { return new(RainstormBatch) }},
	TypeRainstormBatchAck:      {"RainstormBatchAck", ClassDispatch, func() Message { return new(RainstormBatchAck) }},
	TypeRainstormCheckpoint:    {"RainstormCheckpoint", ClassControl, func() Message { return new(RainstormCheckpoint) }},
	TypeRainstormCheckpointAck: {"RainstormCheckpointAck", ClassControl, func() Message { return new(RainstormCheckpointAck) }},

	TypeBlobChunkPut: {"BlobChunkPut", ClassBulk, func() Message { return new(BlobChunkPut) }},
	TypeBlobCommit:   {"BlobCommit", ClassBulk, func() Message { return new(BlobCommit) }},
	TypeBlobStat:     {"BlobStat", ClassBulk, func() Message { return new(BlobStat) }},
	TypeBlobAck:      {"BlobAck", ClassBulk, func() Message { return new(BlobAck) }},
	TypeBlobChunkGet: {"BlobChunkGet", ClassBulk, func() Message { return new(BlobChunkGet) }},
	TypeBlobChunk:    {"BlobChunk", ClassBulk, func() Message { return new(BlobChunk) }},

	TypeRainstormOpen:          {"RainstormOpen", ClassControl, func() Message { return new(RainstormOpen) }},
	TypeRainstormOpenReply:     {"RainstormOpenReply", ClassControl, func() Message { return new(RainstormOpenReply) }},
	TypeRainstormRoutesRequest: {"RainstormRoutesRequest", ClassControl, func() Message { return new(RainstormRoutesRequest) }},
	TypeRainstormRoutes:        {"RainstormRoutes", ClassControl, func() Message { return new(RainstormRoutes) }},
	TypeRainstormReplicate:     {"RainstormReplicate", ClassBulk, func() Message { return new(RainstormReplicate) }},
	TypeRainstormReplicateAck:  {"RainstormReplicateAck", ClassBulk, func() Message { return new(RainstormReplicateAck) }},
	TypeRainstormSyncRequest:   {"RainstormSyncRequest", ClassBulk, func() Message { return new(RainstormSyncRequest) }},
	TypeRainstormSyncResponse:  {"RainstormSyncResponse", ClassBulk, func() Message { return new(RainstormSyncResponse) }},

	// Replicated operations keep the class of what they carry.
	TypeReplicateJob:            {"ReplicateJob", ClassControl, func() Message { return new(ReplicateJob) }},
	TypeReplicateJobStatus:      {"ReplicateJobStatus", ClassProgress, func() Message { return new(ReplicateJobStatus) }},
	TypeRelayWorkerRegistration: {"RelayWorkerRegistration", ClassControl, func() Message { return new(RelayWorkerRegistration) }},
	TypeReplicateGateRecord:     {"ReplicateGateRecord", ClassControl, func() Message { return new(ReplicateGateRecord) }},
	TypeForwardJobProgress:      {"ForwardJobProgress", ClassProgress, func() Message { return new(ForwardJobProgress) }},
	TypeProvisionBatch:          {"ProvisionBatch", ClassControl, func() Message { return new(ProvisionBatch) }},
	TypeProvisionBatchConfirm:   {"ProvisionBatchConfirm", ClassControl, func() Message { return new(ProvisionBatchConfirm) }},
	TypeProvisionCommitBatch:    {"ProvisionCommitBatch", ClassControl, func() Message { return new(ProvisionCommitBatch) }},
	TypeCommitBatchAck:          {"CommitBatchAck", ClassControl, func() Message { return new(CommitBatchAck) }},
	TypeReplicateJobStatusBatch: {"ReplicateJobStatusBatch", ClassProgress, func() Message { return new(ReplicateJobStatusBatch) }},
	TypeStatusBatchAck:          {"StatusBatchAck", ClassProgress, func() Message { return new(StatusBatchAck) }},
	TypeRainstormOutputRequest:  {"RainstormOutputRequest", ClassBulk, func() Message { return new(RainstormOutputRequest) }},
	TypeRainstormOutputPage:     {"RainstormOutputPage", ClassBulk, func() Message { return new(RainstormOutputPage) }},
	TypeRainstormRoutesChanged:  {"RainstormRoutesChanged", ClassControl, func() Message { return new(RainstormRoutesChanged) }},
	TypeDatacenterNodesRequest:  {"DatacenterNodesRequest", ClassControl, func() Message { return new(DatacenterNodesRequest) }},
	TypeDatacenterNodes:         {"DatacenterNodes", ClassControl, func() Message { return new(DatacenterNodes) }},
}

func (t MsgType) String() string {
	if ti, ok := catalogue[t]; ok {
		return ti.name
	}
	return fmt.Sprintf("MsgType(%d)", uint16(t))
}

// Class reports the rate-limit and breaker class of t. Unknown types are
// control class so they share the strictest bucket.
func (t MsgType) Class() Class {
	if ti, ok := catalogue[t]; ok {
		return ti.class
	}
	return ClassControl
}

// Known reports whether t is in the catalogue.
func (t MsgType) Known() bool {
	_, ok := catalogue[t]
	return ok
}

// Types lists every message type in the catalogue, for tests and fuzzers.
func Types() []MsgType {
	out := make([]MsgType, 0, len(catalogue))
	for t := range catalogue {
		out = append(out, t)
	}
	return out
}

// Message is implemented by every struct in the catalogue.
type Message interface {
	Type() MsgType
}

// New returns a zero message of type t, ready to decode into.
func New(t MsgType) (Message, error) {
	ti, ok := catalogue[t]
	if !ok {
		return nil, &Error{Code: CodeUnknownType, Message: fmt.Sprintf("unknown message type %d", uint16(t))}
	}
	return ti.new(), nil
}

// Decode decodes an untrusted body of type t.
func Decode(t MsgType, body []byte) (Message, error) {
	m, err := New(t)
	if err != nil {
		return nil, err
	}
	if err := Unmarshal(body, m); err != nil {
		code := CodeMalformed
		if errors.Is(err, ErrTooLarge) {
			code = CodeTooLarge
		}
		return nil, &Error{Code: code, Message: fmt.Sprintf("%s: %v", t, err)}
	}
	return m, nil
}
