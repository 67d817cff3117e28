package rainstorm

import "tempest/wire"

// Compose folds checkpoint c (whose Pending is a delta) into the stored
// state prev, as the CheckpointStore contract asks of every store: the
// runtime's replicated store composes on the leader and replicates the
// result, so a peer that missed a group still holds a whole state.
func Compose(prev, c *wire.RainstormCheckpoint) *wire.RainstormCheckpoint { return compose(prev, c) }
