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
type RainstormHandoverWant struct {
	Stage int    `cbor:"1,keyasint,omitempty"`
	Index int    `cbor:"2,keyasint,omitempty"`
	Epoch uint64 `cbor:"3,keyasint,omitempty"`
}

// RainstormHandover is the answer to one RainstormHandoverWant, given only
// once the old owner's closing checkpoint of Epoch is durable: its key
// groups as the store holds them (the asking task takes the ones it gains).
type RainstormHandover struct {
	Stage  int                   `cbor:"1,keyasint,omitempty"`
	Index  int                   `cbor:"2,keyasint,omitempty"`
	Epoch  uint64                `cbor:"3,keyasint,omitempty"`
	Groups []RainstormGroupState `cbor:"4,keyasint,omitempty"`
}
