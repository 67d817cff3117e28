package wire

// RainStorm runtime messages: a task asking the manager leader for its
// checkpoint and the route table, and the leader replicating checkpoints to
// its peers. docs/rainstorm.md describes the runtime.

// RainstormOpen is a task's first call to the manager leader, and the
// fence: the leader answers only when Incarnation is the fence token of the
// task's current dispatch, so that from then on no older incarnation can
// write a checkpoint. A source sends its input's column names (Header), which
// every stage task needs to compile its operator.
type RainstormOpen struct {
	Task        RainstormTask `cbor:"1,keyasint"`
	Incarnation uint64        `cbor:"2,keyasint"`
	Header      []string      `cbor:"3,keyasint,omitempty"`
	HasHeader   bool          `cbor:"4,keyasint,omitempty"`
	// Part asks for that part of the checkpoint (0 first): a state too
	// large for one message comes in parts, each asked for in turn.
	Part int `cbor:"11,keyasint,omitempty"`
}

// RainstormOpenReply carries the task's latest durable checkpoint (nil for a
// fresh start), the input's column names and the current route table. A
// stage task whose stages need the header opens again until HasHeader (the
// source reports it in its own open); a leader still syncing answers with
// an error, never a partial reply. (Key 5, a "wait" reason no leader ever
// set, is retired.)
type RainstormOpenReply struct {
	Checkpoint *RainstormCheckpoint `cbor:"1,keyasint,omitempty"`
	Header     []string             `cbor:"2,keyasint,omitempty"`
	HasHeader  bool                 `cbor:"3,keyasint,omitempty"`
	Routes     []RainstormRoute     `cbor:"4,keyasint,omitempty"`
	// Epochs is the pipeline's resize epochs as the source's durable
	// checkpoint records them (at least epoch 0), for a pipeline that can
	// resize: a task with no checkpoint of its own starts in the first of
	// them it exists in.
	Epochs []RainstormEpoch `cbor:"50,keyasint,omitempty"`
}

// RainstormRoute is where one task of a pipeline runs now: its worker's QUIC
// address and the incarnation (fence token) of its current dispatch. Addr is
// empty while the task is not placed.
type RainstormRoute struct {
	Stage       int    `cbor:"1,keyasint,omitempty"`
	Index       int    `cbor:"2,keyasint,omitempty"`
	Addr        string `cbor:"3,keyasint,omitempty"`
	Incarnation uint64 `cbor:"4,keyasint,omitempty"`
	// Done: the task completed (its final checkpoint is durable and every
	// batch it takes is in it).
	Done bool `cbor:"5,keyasint,omitempty"`
	// Node is the node id of the worker the task is dispatched to (or that
	// completed it): a worker takes a batch or an ack only from the node
	// its routes show hosting the sending task. Absent from leaders that
	// predate it; the worker then compares Addr with the sender's address.
	Node string `cbor:"6,keyasint,omitempty"`
	// Epoch, for a Done task, is the epoch of its final checkpoint: its
	// completion acknowledges every batch of that epoch's channel to it
	// (a task retired by a resize is done after its last epoch).
	Epoch uint64 `cbor:"50,keyasint,omitempty"`
}

// RainstormRoutesRequest asks the manager leader for a pipeline's routes.
type RainstormRoutesRequest struct {
	Job      string `cbor:"1,keyasint"`
	Workflow string `cbor:"2,keyasint"`
	// Handovers asks for the key groups tasks of the pipeline handed over
	// when they closed an epoch (a task entering a resized epoch).
	Handovers []RainstormHandoverWant `cbor:"50,keyasint,omitempty"`
}

// RainstormRoutes answers RainstormRoutesRequest.
type RainstormRoutes struct {
	Routes []RainstormRoute `cbor:"1,keyasint,omitempty"`
	// Handovers answers the request's Handovers that are durable.
	Handovers []RainstormHandover `cbor:"50,keyasint,omitempty"`
	// Resize is the task counts per stage the leader wants the pipeline
	// to run at, until the source's durable checkpoint records them: the
	// source asks its machine to start an epoch with them.
	Resize []int `cbor:"51,keyasint,omitempty"`
}

// RainstormReplicate carries checkpoints the leader accepted (one group
// commit) to a peer manager, which stores them before it answers with
// RainstormReplicateAck. Headers are pipelines' column names, keyed by
// job and workflow, sent once with the first group that needs them.
//
// Checkpoints hold whole states (the task's unacknowledged batches all in
// Pending); Deltas hold checkpoints as the tasks wrote them, for a peer the
// leader believes holds each one's base: the peer composes them with its
// own state, and names in RainstormReplicateAck.Missing the tasks whose
// base it does not hold, which the leader then sends whole.
type RainstormReplicate struct {
	Term        uint64                `cbor:"1,keyasint"`
	Checkpoints []RainstormCheckpoint `cbor:"2,keyasint,omitempty"`
	Headers     []RainstormHeader     `cbor:"3,keyasint,omitempty"`
	Deltas      []RainstormDelta      `cbor:"13,keyasint,omitempty"`
}

// RainstormDelta is a checkpoint whose Pending holds only the batches cut
// since its base, the stored checkpoint (BaseVersion, BaseIncarnation) it
// follows; BaseVersion 0 is the empty state.
type RainstormDelta struct {
	BaseVersion     uint64              `cbor:"1,keyasint,omitempty"`
	BaseIncarnation uint64              `cbor:"2,keyasint,omitempty"`
	Checkpoint      RainstormCheckpoint `cbor:"3,keyasint"`
}

// RainstormHeader is one pipeline's record in the store, beside its
// tasks' checkpoints: its input column names (HasHeader: the source
// recorded them) and its autoscaling as the leaders decided it.
type RainstormHeader struct {
	Job       string          `cbor:"1,keyasint"`
	Workflow  string          `cbor:"2,keyasint"`
	Header    []string        `cbor:"3,keyasint,omitempty"`
	HasHeader bool            `cbor:"4,keyasint,omitempty"`
	Scale     *RainstormScale `cbor:"5,keyasint,omitempty"`
}

// RainstormScale is a pipeline's autoscaling as durable as its
// checkpoints: a leader stores a decision on a majority before it asks the
// source for it, so a new leader goes on asking. (Term, Seq) orders the
// versions: a newer term wins, then the later write of one term.
type RainstormScale struct {
	Term uint64 `cbor:"1,keyasint,omitempty"`
	Seq  uint64 `cbor:"2,keyasint,omitempty"`
	// Want is the sizes per stage asked of the source and not yet
	// recorded in its checkpoint (empty: none).
	Want []int `cbor:"3,keyasint,omitempty"`
	// Resizes is the decisions, oldest first, bounded by the leader.
	Resizes []RainstormResize `cbor:"4,keyasint,omitempty"`
}

// Newer reports whether s is a later version than o (a nil one is the
// oldest).
func (s *RainstormScale) Newer(o *RainstormScale) bool {
	switch {
	case s == nil:
		return false
	case o == nil:
		return true
	case s.Term != o.Term:
		return s.Term > o.Term
	}
	return s.Seq > o.Seq
}

// RainstormReplicateAck answers RainstormReplicate once stored.
type RainstormReplicateAck struct {
	Stored  int             `cbor:"1,keyasint"`
	Missing []RainstormTask `cbor:"11,keyasint,omitempty"` // deltas whose base this peer does not hold; not stored
}

// RainstormSyncRequest asks a peer manager for everything it stores of the
// pipelines of the listed jobs (all jobs when empty): a new leader reads a
// majority before it answers any task.
//
// Term is the asking leader's: a peer that answered it stores no group of
// an older term afterwards, so nothing a deposed leader still gets
// acknowledged can be missing from what the new leader read. Term 0 is a
// learner's copy of the leader's store (a learner leads no term): the
// leader answers it only to a learner of its group, and promises nothing.
//
// The answer comes in pages (a store outgrows one message): After is the
// Next of the previous page, empty for the first.
//
// Have names the version of each task's latest checkpoint the leader holds:
// a peer holding the same version answers that task in Same instead of
// sending its state, which the leader has (a new leader after a clean
// change holds what its peers hold, and a million-key state is 30 pages).
//
// Deltas says the reader takes a task's latest checkpoint as a delta on
// the version Have names (the peer answers in the response's Deltas when
// it kept the deltas from that version on), and names in Older the tasks
// whose latest checkpoint the reader holds newer. A peer that does not
// know the field sends whole states, as before.
type RainstormSyncRequest struct {
	Jobs   []string        `cbor:"1,keyasint,omitempty"`
	Term   uint64          `cbor:"11,keyasint,omitempty"`
	After  []byte          `cbor:"12,keyasint,omitempty"`
	Have   []RainstormHave `cbor:"13,keyasint,omitempty"`
	Deltas bool            `cbor:"14,keyasint,omitempty"`
}

// RainstormHave names a task's stored latest checkpoint by its version and
// incarnation.
type RainstormHave struct {
	Task        RainstormTask `cbor:"1,keyasint"`
	Version     uint64        `cbor:"2,keyasint,omitempty"`
	Incarnation uint64        `cbor:"3,keyasint,omitempty"`
}

// RainstormSyncResponse holds, per task, every checkpoint version the peer
// stores output rows for plus its latest checkpoint, and the headers.
// More says another page follows, asked for with After: Next.
// Same names the tasks whose latest checkpoint is the version the
// request's Have named, in place of the checkpoint. Only when the request
// asked for them (Deltas): Deltas holds a task's latest checkpoint as a
// delta on the version Have named (a RainstormReplicate delta: its Groups
// every key changed since, with its latest value; its PendingBlobs the
// batches cut since), in parts like a checkpoint; Older names the tasks
// whose latest checkpoint is older than the one Have named, with the
// version the peer holds, in place of the checkpoint.
type RainstormSyncResponse struct {
	Checkpoints []RainstormCheckpoint `cbor:"1,keyasint,omitempty"`
	Headers     []RainstormHeader     `cbor:"2,keyasint,omitempty"`
	More        bool                  `cbor:"11,keyasint,omitempty"`
	Next        []byte                `cbor:"12,keyasint,omitempty"`
	Same        []RainstormHave       `cbor:"13,keyasint,omitempty"`
	Deltas      []RainstormDelta      `cbor:"14,keyasint,omitempty"`
	Older       []RainstormHave       `cbor:"15,keyasint,omitempty"`
}

func (*RainstormOpen) Type() MsgType          { return TypeRainstormOpen }
func (*RainstormOpenReply) Type() MsgType     { return TypeRainstormOpenReply }
func (*RainstormRoutesRequest) Type() MsgType { return TypeRainstormRoutesRequest }
func (*RainstormRoutes) Type() MsgType        { return TypeRainstormRoutes }
func (*RainstormReplicate) Type() MsgType     { return TypeRainstormReplicate }
func (*RainstormReplicateAck) Type() MsgType  { return TypeRainstormReplicateAck }
func (*RainstormSyncRequest) Type() MsgType   { return TypeRainstormSyncRequest }
func (*RainstormSyncResponse) Type() MsgType  { return TypeRainstormSyncResponse }
