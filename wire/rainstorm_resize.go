package wire

// RainstormEpoch is one epoch of a pipeline's resizes: from source segment
// Segment on, stage s+1 runs Tasks[s] tasks, each owning the key groups of
// the stage's table at this epoch (the tables follow from the task counts
// of every epoch up to this one). Epoch 0 is the pipeline's start. The
// source records an epoch in its checkpoint before it sends anything of it,
// and the epoch travels in band, on the last batch of the epoch before.
type RainstormEpoch struct {
	Epoch   uint64 `cbor:"1,keyasint,omitempty"`
	Segment uint64 `cbor:"2,keyasint,omitempty"`
	Tasks   []int  `cbor:"3,keyasint"`
}

// RainstormHandoverWant asks for the key groups task (Stage, Index) handed
// over when it closed epoch Epoch.
//
// A handover too large for one route answer comes in pages: FromGroup and
// FromEntry name where the asked page starts (the first entry of the
// first group when both are zero), as the previous page's NextGroup and
// NextEntry gave it.
type RainstormHandoverWant struct {
	Stage     int    `cbor:"1,keyasint,omitempty"`
	Index     int    `cbor:"2,keyasint,omitempty"`
	Epoch     uint64 `cbor:"3,keyasint,omitempty"`
	FromGroup int    `cbor:"4,keyasint,omitempty"`
	FromEntry int    `cbor:"5,keyasint,omitempty"`
}

// RainstormHandover is the answer to one RainstormHandoverWant, given only
// once the old owner's closing checkpoint of Epoch is durable: the key
// groups it gave away to tasks the asking worker runs, as the store holds
// them (each task takes the ones it gains).
//
// One answer is one page: it starts where the want's FromGroup and
// FromEntry said (echoed, so a page answered twice is recognised) and,
// when More is set, the rest is asked from NextGroup and NextEntry (a
// group cut in two continues in the next page's first group).
type RainstormHandover struct {
	Stage     int                   `cbor:"1,keyasint,omitempty"`
	Index     int                   `cbor:"2,keyasint,omitempty"`
	Epoch     uint64                `cbor:"3,keyasint,omitempty"`
	Groups    []RainstormGroupState `cbor:"4,keyasint,omitempty"`
	More      bool                  `cbor:"5,keyasint,omitempty"`
	NextGroup int                   `cbor:"6,keyasint,omitempty"`
	NextEntry int                   `cbor:"7,keyasint,omitempty"`
	FromGroup int                   `cbor:"8,keyasint,omitempty"`
	FromEntry int                   `cbor:"9,keyasint,omitempty"`
}
