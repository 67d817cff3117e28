// Package store is a manager's durable state: jobs, their workflows
// (placement, fence token, attempts, excluded workers, the original dispatch
// bytes kept for retries, last progress) and a small meta bucket, in one
// bbolt file.
//
// A job record leaves out the submission's workflow specs once the job's
// workflow records are stored (each holds its own spec), and reads rebuild
// them (storedJob in store.go): the record is rewritten on every workflow
// status change, and with the specs inside that cost O(n²) bytes per job.
//
// # Group commit
//
// Every write goes through the store's group committer (commit.go): one
// goroutine commits the first queued write together with everything that
// queued meanwhile, in one transaction and one fsync. There is no timer, so
// a lone write commits at once, and under load batches grow by themselves
// while the previous commit fsyncs (bbolt's DB.Batch waits a fixed delay
// first, which bench/provision measured as half the submit latency). A
// commit costs about half a millisecond here. A write function may run more
// than once when another in its batch fails, so every one is idempotent.
//
// # Ordering: revisions
//
// Callers persist from many goroutines, and two writes of the same record can
// reach the committer in either order. Every record therefore carries a revision
// (Rev) that the caller increases on every change, and a write whose revision
// is lower than the stored one is skipped: the newest state always wins,
// whatever order the writes commit in. The revision is stored in the first 8
// bytes of the value, so the check reads 8 bytes rather than decoding a record.
//
// # Crash safety
//
// bbolt commits by writing new pages and then a meta page, with fsync in
// between and after; a process killed at any point (kill -9, power loss)
// leaves either the old or the new state, never a mix. NoSync stays false.
// A write that returned nil is on disk.
package store
