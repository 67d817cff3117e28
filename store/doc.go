// Package store is a manager's durable state: jobs, their workflows
// (placement, fence token, attempts, excluded workers, the original dispatch
// bytes kept for retries, last progress) and a small meta bucket, in one
// bbolt file.
//
// # Group commit
//
// Every write goes through bbolt's DB.Batch, which coalesces writers that
// arrive within a short window into one transaction and one fsync. A commit
// costs about half a millisecond here, so a leader provisioning many
// workflows at once pays for one fsync per batch rather than one per
// workflow. Batch may run a function more than once when another function in
// the same batch fails, so every write function here is idempotent.
//
// # Ordering: revisions
//
// Callers persist from many goroutines, and two writes of the same record can
// reach Batch in either order. Every record therefore carries a revision
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
