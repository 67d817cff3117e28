package wire

// RainStorm pipeline messages. A pipeline's tasks are named by stage (0 is
// the source, 1.. the stages in job-file order) and index within the stage;
// a channel is one (upstream task, downstream task) pair, and every batch on
// it carries the next number of that channel's sequence. docs/rainstorm.md
// is the contract.

// RainstormTask names one task of one pipeline.
type RainstormTask struct {
	Job      string `cbor:"1,keyasint"`
	Workflow string `cbor:"2,keyasint"`
	Stage    int    `cbor:"3,keyasint,omitempty"`
	Index    int    `cbor:"4,keyasint,omitempty"`
}

// RainstormRecord is one tuple: the input id it descends from (the source's
// record index, stable across re-reads) and its fields.
type RainstormRecord struct {
	ID     uint64   `cbor:"1,keyasint,omitempty"`
	Fields []string `cbor:"2,keyasint"`
}

// RainstormBatch carries records on one channel. Seq numbers the channel's
// batches from 1; EOS marks the channel's last batch (end of stream), which
// may hold records too. Incarnation is the sender's: a receiver refuses
// batches from an incarnation older than one it has seen on the channel.
// It is encoded in a flat layout of its own, not as the map its tags
// describe (which older nodes sent, and which is still read): see
// rainstorm_flat.go.
type RainstormBatch struct {
	From        RainstormTask     `cbor:"1,keyasint"`
	To          int               `cbor:"2,keyasint,omitempty"` // index in the next stage
	Incarnation uint64            `cbor:"3,keyasint"`
	Seq         uint64            `cbor:"4,keyasint"`
	Records     []RainstormRecord `cbor:"5,keyasint,omitempty"`
	EOS         bool              `cbor:"6,keyasint,omitempty"`
	// Epoch is the resize epoch the batch belongs to: a channel is (epoch,
	// sender, receiver), numbered from 1 in each epoch.
	Epoch uint64 `cbor:"50,keyasint,omitempty"`
	// Next, on an EOS batch, says the stream goes on in this epoch rather
	// than ending: the epoch marker, which every task forwards on its own
	// last batches of the epoch.
	Next *RainstormEpoch `cbor:"51,keyasint,omitempty"`
	// Base, under at-least-once, is the channel's first number this
	// sender incarnation cut itself: below it are its predecessors'
	// durable batches, resent as they were; from it on, numbers a
	// predecessor may have sent with other records before they were
	// durable. Zero when numbers never change hands (exactly-once, the
	// source).
	Base uint64 `cbor:"52,keyasint,omitempty"`

	// flat is the batch's encoding as Freeze kept it (rainstorm_flat.go:
	// a batch travels in a flat layout of its own, not as this map).
	flat []byte
}

// RainstormBatchAck tells one sender that the receiver's durable state
// covers the channel's batches up to UpTo. Both modes process a channel in
// order, so a prefix is all an ack names. (Key 5, single batches acked out
// of order, was never sent and is retired.)
type RainstormBatchAck struct {
	From        RainstormTask `cbor:"1,keyasint"` // the receiver
	To          int           `cbor:"2,keyasint,omitempty"`
	Incarnation uint64        `cbor:"3,keyasint"`
	UpTo        uint64        `cbor:"4,keyasint,omitempty"`
	Epoch       uint64        `cbor:"50,keyasint,omitempty"` // the channel's epoch
	// Sender is the sender incarnation whose batches the receiver took
	// last: under at-least-once an incarnation's numbers from its Base on
	// are its own, so an ack naming a predecessor says nothing of them.
	Sender uint64 `cbor:"51,keyasint,omitempty"`
}

// RainstormInput is a task's position on one input channel: the next
// sequence number it expects, whether the channel ended, and the newest
// sender incarnation it has accepted.
type RainstormInput struct {
	From        int    `cbor:"1,keyasint,omitempty"` // upstream index
	Next        uint64 `cbor:"2,keyasint"`
	EOS         bool   `cbor:"3,keyasint,omitempty"`
	Incarnation uint64 `cbor:"4,keyasint,omitempty"`
}

// RainstormOutput is a task's position on one output channel: the next
// sequence number it will assign and the highest one the receiver has
// acknowledged as durable.
type RainstormOutput struct {
	To    int    `cbor:"1,keyasint,omitempty"` // downstream index
	Next  uint64 `cbor:"2,keyasint"`
	Acked uint64 `cbor:"3,keyasint,omitempty"`
	EOS   bool   `cbor:"4,keyasint,omitempty"` // end of stream is cut
}

// RainstormAggregate is one key's running value in a count or sum stage.
// Sum is exact decimal text, so that the order in which records arrive
// cannot change the result.
type RainstormAggregate struct {
	Key   string `cbor:"1,keyasint"`
	Count int64  `cbor:"2,keyasint,omitempty"`
	Sum   string `cbor:"3,keyasint,omitempty"`
}

// RainstormSourcePos is where a source resumes: the first record (index and
// byte offset) of its oldest unacknowledged segment, the field count a
// headerless CSV's records must have (learnt from the input's first record;
// 0 when not yet known), and the malformed records seen before it.
type RainstormSourcePos struct {
	Segment    uint64   `cbor:"1,keyasint,omitempty"`
	Record     uint64   `cbor:"2,keyasint,omitempty"`
	Offset     int64    `cbor:"3,keyasint,omitempty"`
	BadRecords uint64   `cbor:"4,keyasint,omitempty"`
	BadFirst   []uint64 `cbor:"5,keyasint,omitempty"` // first few bad record indexes
	// Fields is the field count a headerless CSV's records have, learnt
	// from the input's first record, so a resumed reader judges records by
	// it rather than by the first record after the resume point.
	Fields int `cbor:"6,keyasint,omitempty"`
	// File identifies a `path:` source's file as the source first opened
	// it, so a re-placed source that finds another file there fails
	// instead of producing other records under the same ids.
	File *RainstormFileID `cbor:"7,keyasint,omitempty"`
	// Epochs is every resize epoch the source recorded, oldest first (the
	// first, epoch 0, is the start), and Epoch the one it sends in: a
	// segment's routing is a function of the segment and the epoch list,
	// so a regenerated batch is the one first sent.
	Epochs []RainstormEpoch `cbor:"50,keyasint,omitempty"`
	Epoch  uint64           `cbor:"51,keyasint,omitempty"`
	// Reserve bounds the segments the source may read before its next
	// durable checkpoint: none at or past it. A resize starts no earlier
	// than the Reserve of the checkpoint the source opened from, so no
	// earlier incarnation can have sent a segment of the new epoch under
	// the old routing.
	Reserve uint64 `cbor:"52,keyasint,omitempty"`
}

// RainstormFileID identifies a source's input file: its size and SHA-256,
// for one range of a split input the SHA-256 of what that range reads.
type RainstormFileID struct {
	Size   int64  `cbor:"1,keyasint"`
	SHA256 []byte `cbor:"2,keyasint"`
	// Range: SHA256 covers one range of a split input (the bytes before
	// the input's first record, and the range's records), not the whole
	// file. Nil: the whole file.
	Range *RainstormFileRange `cbor:"3,keyasint,omitempty"`
}

// RainstormFileRange is the bytes [From, To) of an input that one range
// of it reads: from its first record's start to its last record's end.
type RainstormFileRange struct {
	From int64 `cbor:"1,keyasint"`
	To   int64 `cbor:"2,keyasint"`
}

// RainstormCheckpoint is one task's durable state, written atomically with
// compare-and-set on (Incarnation, Version): the store refuses it unless
// Incarnation is the task's current one and Version is one past the stored
// version. Pending and Rows are deltas: the batches cut and the output
// rows produced since the previous checkpoint. The store keeps pending
// batches until Outputs' acknowledged positions drop them, and publishes
// Rows (the pipeline's output is every durable checkpoint's rows, in
// version order).
type RainstormCheckpoint struct {
	Task        RainstormTask        `cbor:"1,keyasint"`
	Incarnation uint64               `cbor:"2,keyasint"`
	Version     uint64               `cbor:"3,keyasint"`
	Inputs      []RainstormInput     `cbor:"4,keyasint,omitempty"`
	Outputs     []RainstormOutput    `cbor:"5,keyasint,omitempty"`
	Pending     []RainstormBatch     `cbor:"6,keyasint,omitempty"` // cut since the previous checkpoint
	State       []RainstormAggregate `cbor:"7,keyasint,omitempty"` // retired: see Groups
	Rows        RainstormRows        `cbor:"8,keyasint,omitzero"`  // flat: see RainstormRows
	Source      *RainstormSourcePos  `cbor:"9,keyasint,omitempty"`
	// Done: every input ended and every output (or final row) is in this
	// checkpoint. A sink's Done checkpoint completes its part of the output.
	Done bool `cbor:"10,keyasint,omitempty"`
	// BadRecords counts records the task refused (malformed for its op).
	BadRecords uint64 `cbor:"11,keyasint,omitempty"`
	// RecordsIn and RecordsOut count, over the task's chain of checkpoints,
	// the records of the batches it processed and the records it emitted
	// (in output batches, or as rows), so they count what the output holds:
	// each once in exactly-once mode, whatever restarts and resends did.
	RecordsIn  uint64 `cbor:"12,keyasint,omitempty"`
	RecordsOut uint64 `cbor:"13,keyasint,omitempty"`
	// PendingBlobs is Pending as the runtime carries it between a task and
	// the managers: each batch encoded once by the task, so the managers
	// store, compose and replicate it without decoding its records.
	PendingBlobs []RainstormBatchBlob `cbor:"21,keyasint,omitempty"`
	// Groups is an aggregate's state, key group by key group. A task's
	// checkpoint carries only the groups changed since its previous one,
	// and in each only the keys changed (their new values); the store
	// composes them, so what it stores and returns holds every key. Group
	// boundaries stay explicit because groups are the unit that moves
	// between tasks. (State, key 7, held the whole state in one list and
	// is no longer written.)
	Groups []RainstormGroupState `cbor:"22,keyasint,omitempty"`
	// Flushed counts the key groups, from 0, whose final values an
	// aggregate has emitted: after its inputs end it emits them over
	// several checkpoints, a few groups each, so that no checkpoint
	// outgrows a message.
	Flushed int `cbor:"23,keyasint,omitempty"`
	// Part and More split one checkpoint too large for a message into
	// parts sent one after another (an open reply's pages, a replicated
	// group, a sync page): part 0 holds everything but the Groups,
	// PendingBlobs and Rows that did not fit, each later part more of
	// those; More says another part follows. A receiver joins the parts
	// before it uses the checkpoint.
	Part int  `cbor:"24,keyasint,omitempty"`
	More bool `cbor:"25,keyasint,omitempty"`
	// Opened is the managers' record of the task's incarnations, oldest
	// first: each one's token and the version it opened at. The store
	// keeps it with the task's state (a task never sets it), so it knows
	// which incarnation wrote each version, and joins only those rows.
	Opened []RainstormOpened `cbor:"40,keyasint,omitempty"`
	// RowsOf names, on a rows-only record (Incarnation 0) of a sync page,
	// the incarnation whose checkpoint published the rows.
	RowsOf uint64 `cbor:"41,keyasint,omitempty"`
	// Epoch is the resize epoch of the checkpoint's channels (Inputs,
	// Outputs, Pending); Epochs every epoch the task knows, oldest first,
	// from which it computes each stage's group table.
	Epoch  uint64           `cbor:"50,keyasint,omitempty"`
	Epochs []RainstormEpoch `cbor:"51,keyasint,omitempty"`
	// Retired: the task does not exist in the next epoch; with Done, its
	// part is complete once its outputs are acknowledged.
	Retired bool `cbor:"53,keyasint,omitempty"`
	// Closing marks the checkpoint that closes the task's epoch (Epoch):
	// every input ended with the epoch marker. Its state is final for
	// the key groups the task gives away at the next epoch (it never
	// touches them again), so their new owners take them from the
	// store's state of the task as of this checkpoint or any later one.
	Closing bool `cbor:"54,keyasint,omitempty"`
}

// RainstormGroupState is one key group's aggregate entries, sorted by key.
type RainstormGroupState struct {
	Group   int                  `cbor:"1,keyasint,omitempty"`
	Entries []RainstormAggregate `cbor:"2,keyasint,omitempty"`
}

// RainstormOpened is one incarnation of a task and the version it opened
// at: it wrote the versions after that one, up to where the next opened.
type RainstormOpened struct {
	Incarnation uint64 `cbor:"1,keyasint"`
	Version     uint64 `cbor:"2,keyasint,omitempty"`
}

// RainstormBatchBlob is one unacknowledged batch, encoded: its channel and
// sequence number in the clear (what the store needs to drop it once
// acknowledged), the RainstormBatch itself as CBOR bytes: since the flat
// layout, a byte string holding it, the very bytes the task sends.
type RainstormBatchBlob struct {
	From  RainstormTask `cbor:"1,keyasint"`
	To    int           `cbor:"2,keyasint,omitempty"`
	Seq   uint64        `cbor:"3,keyasint"`
	Batch []byte        `cbor:"4,keyasint"`
}

// RainstormCheckpointAck answers a RainstormCheckpoint. Refused says the
// compare-and-set failed; Current is then the store's incarnation for the
// task (newer than the writer's when it has been replaced).
type RainstormCheckpointAck struct {
	Task        RainstormTask `cbor:"1,keyasint"`
	Incarnation uint64        `cbor:"2,keyasint"`
	Version     uint64        `cbor:"3,keyasint"`
	Refused     bool          `cbor:"4,keyasint,omitempty"`
	Current     uint64        `cbor:"5,keyasint,omitempty"`
	Reason      string        `cbor:"6,keyasint,omitempty"`
}

func (*RainstormBatch) Type() MsgType         { return TypeRainstormBatch }
func (*RainstormBatchAck) Type() MsgType      { return TypeRainstormBatchAck }
func (*RainstormCheckpoint) Type() MsgType    { return TypeRainstormCheckpoint }
func (*RainstormCheckpointAck) Type() MsgType { return TypeRainstormCheckpointAck }
