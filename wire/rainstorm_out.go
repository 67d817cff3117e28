package wire

// RainStorm output through a gate: the gate asks the datacenter's manager
// leader for a pipeline's output one page at a time, so a large output never
// has to fit in one message. Rows only ever join an output (a row is
// published once, with the durable checkpoint that produced it), so pages
// read at the same Total are pages of one output; a reader that sees Total
// change starts again.

// RainstormOutputRequest asks for a pipeline's output from row Offset on.
// Rows false asks for the summary alone (status, tasks, counters), which is
// what a live display polls.
type RainstormOutputRequest struct {
	Job      string `cbor:"1,keyasint"`
	Workflow string `cbor:"2,keyasint"`
	Offset   uint64 `cbor:"3,keyasint,omitempty"`
	Rows     bool   `cbor:"4,keyasint,omitempty"`
	// Resume asks the manager to return, with a page that is not the
	// last, a Cursor to continue from; Cursor, from the page before,
	// continues the read there instead of at Offset, so a page costs its
	// own rows rather than every row before it. A manager that does not
	// know these fields answers by Offset, as it always did; one that
	// cannot honour the cursor (the rows it names are not the ones it
	// holds) refuses it with CodeStaleFence, and the reader asks again by
	// Offset.
	Resume bool   `cbor:"5,keyasint,omitempty"`
	Cursor []byte `cbor:"6,keyasint,omitempty"`
}

// RainstormOutputPage is one page of a pipeline's output: the summary, and
// the rows from Offset on, as many as fit the answering manager's page
// budget. Total is the number of rows in the whole output when the page was
// cut; the reader is done when Offset plus the page's rows reach Total.
type RainstormOutputPage struct {
	Status     JobStatus             `cbor:"1,keyasint,omitempty"`
	Complete   bool                  `cbor:"2,keyasint,omitempty"`
	Header     []string              `cbor:"3,keyasint,omitempty"`
	BadRecords uint64                `cbor:"4,keyasint,omitempty"`
	BadFirst   []uint64              `cbor:"5,keyasint,omitempty"`
	Restarts   int                   `cbor:"6,keyasint,omitempty"`
	Tasks      []RainstormOutputTask `cbor:"7,keyasint,omitempty"`
	Total      uint64                `cbor:"8,keyasint,omitempty"`
	Offset     uint64                `cbor:"9,keyasint,omitempty"`
	Rows       [][]string            `cbor:"10,keyasint,omitempty"`
	// StageTasks and Resizes: see api.PipelineOutput.
	StageTasks []int             `cbor:"11,keyasint,omitempty"`
	Resizes    []RainstormResize `cbor:"12,keyasint,omitempty"`
	// Cursor is where the next page starts, opaque to the reader; empty
	// on the last page, and from a manager that does not know it.
	Cursor []byte `cbor:"13,keyasint,omitempty"`
}

// RainstormResize is one autoscaling decision (api.PipelineResize); At is
// in Unix nanoseconds.
type RainstormResize struct {
	At       int64  `cbor:"1,keyasint,omitempty"`
	Stage    string `cbor:"2,keyasint,omitempty"`
	From     int    `cbor:"3,keyasint,omitempty"`
	To       int    `cbor:"4,keyasint,omitempty"`
	Decision string `cbor:"5,keyasint,omitempty"`
	// The resize's figures: see api.PipelineResize. Durations in
	// nanoseconds.
	Epoch       uint64 `cbor:"6,keyasint,omitempty"`
	InForce     int64  `cbor:"7,keyasint,omitempty"`
	GroupsMoved int    `cbor:"8,keyasint,omitempty"`
	KeysMoved   int    `cbor:"9,keyasint,omitempty"`
	BytesMoved  int64  `cbor:"10,keyasint,omitempty"`
	Handover    int64  `cbor:"11,keyasint,omitempty"`
}

// RainstormOutputTask is one task of a pipeline as its manager leader sees
// it. Waiting says why a task that is not placed waits (no free core, no
// quorum of managers).
type RainstormOutputTask struct {
	Stage    int            `cbor:"1,keyasint,omitempty"`
	Index    int            `cbor:"2,keyasint,omitempty"`
	Name     string         `cbor:"3,keyasint,omitempty"`
	Status   WorkflowStatus `cbor:"4,keyasint,omitempty"`
	Worker   string         `cbor:"5,keyasint,omitempty"`
	Attempts int            `cbor:"6,keyasint,omitempty"`
	Records  int64          `cbor:"7,keyasint,omitempty"`
	Bad      int64          `cbor:"8,keyasint,omitempty"`
	Waiting  string         `cbor:"9,keyasint,omitempty"`
	// RecordsOut: see api.PipelineTask.
	RecordsOut int64 `cbor:"10,keyasint,omitempty"`
}

func (*RainstormOutputRequest) Type() MsgType { return TypeRainstormOutputRequest }
func (*RainstormOutputPage) Type() MsgType    { return TypeRainstormOutputPage }

// RainstormRoutesChanged tells a worker that tasks of a pipeline opened
// (Opened: a replacement, or a first start), so that its tasks ask the
// leader for the routes now instead of at their next poll, and resend to an
// opened downstream task without waiting for their resend timer. It is only
// a hint: the routes themselves come from the leader, and a resend is of
// batches the receiver de-duplicates.
type RainstormRoutesChanged struct {
	Job      string          `cbor:"1,keyasint"`
	Workflow string          `cbor:"2,keyasint"`
	Opened   []RainstormTask `cbor:"3,keyasint,omitempty"`
}

func (*RainstormRoutesChanged) Type() MsgType { return TypeRainstormRoutesChanged }
