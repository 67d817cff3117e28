// Package rainstorm is the transport-independent core of RainStorm stream
// pipelines: the `type: rainstorm` workflow spec and its parser, a record
// reader for CSV and line inputs that can resume at a recorded record
// boundary, the operators (filter, project, replace, count, sum and exec),
// key-group partitioning, and the exactly-once machinery as pure state
// machines — SourceMachine and TaskMachine — that take inputs and return
// actions, with no goroutines, clock or I/O of their own.
//
// The distributed runtime places tasks, moves the wire messages these
// machines produce (wire.RainstormBatch, wire.RainstormBatchAck,
// wire.RainstormCheckpoint, wire.RainstormCheckpointAck) and stores
// checkpoints behind the CheckpointStore contract. Reference runs the same
// operators in one sequential pass: the definition of a correct output.
// docs/rainstorm.md holds the design and the argument that it is
// exactly-once.
package rainstorm
