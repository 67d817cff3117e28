// Package worker is Tempest's worker role (docs/datacenter.md
// "Worker life"): it runs the workflows managers dispatch to it, on the cores
// it offers, and reports on them.
//
// # Life of a worker
//
// Run opens the data plane (QUIC, or a test transport), starts SWIM with a
// WorkerHeartbeat in every ack, and registers with the configured managers in
// turn until one accepts; the RegistrationAck names the leader. From then on
// the worker's notion of the leader follows whatever says more recently who
// leads: progress acks, not-leader replies, manager heartbeats probed over
// SWIM, a state-sync request of a newer term. When the leader stops answering
// (three failed progress calls) or SWIM declares it dead, the worker
// registers with another manager, listing its active workflows so the new
// leader adopts them without interrupting them.
//
// # A workflow on the worker
//
// A WorkflowDispatch is checked (fence token, room, registry) and either
// refused with WorkflowDispatchAck{Accepted: false} and a reason, or given
// cores from the CoreSet and started. The runner reports snapshots; the
// worker forwards at most one WorkflowProgress per ProgressInterval per
// workflow to the leader, newest snapshot first, and when the runner returns
// frees the cores and sends a final progress (Final, terminal status), retried
// with backoff until a manager acknowledges it. Until then the workflow stays
// in Snapshot, so a leader elected meanwhile learns its outcome by state
// sync.
//
// Outcomes: COMPLETED when the runner ends by itself; CANCELLED by CancelJob
// or ProgressAck.Cancel, or when a manager answers progress with a stale
// fence (a newer dispatch of the workflow exists elsewhere); FAILED on the
// runner's error, a panic, the workflow's timeout, a hard stop, or a drain
// that ran out of time ("handed back: ..."), which a manager should retry
// elsewhere.
//
// # Fencing
//
// Every dispatch and cancel carries the leader's fence token (term<<32|seq).
// The FenceTable refuses tokens older than the newest seen for a workflow
// with wire.ErrStaleFence, and refuses token 0 (an unfenced sender) as
// rejected. A cancel that overtakes its dispatch leaves a tombstone, so the
// late dispatch is refused.
//
// # Health
//
// HEALTHY, DEGRADED (CPU, memory, queue or Lifeguard score past a
// threshold), DRAINING (critical memory pressure, or Drain) and OFFLINE
// (stopped). Pressure changes take HealthSamples agreeing samples. A DRAINING
// worker refuses dispatches; a DEGRADED one still takes them, and managers
// rank it lower.
package worker
