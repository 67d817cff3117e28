// Package manager is the manager role (docs/datacenter.md): one of
// the 1, 3 or 5 managers of a datacenter. Every manager keeps a table of
// the datacenter's workers and a durable copy of its jobs; the elected
// leader places workflows on workers with quorum confirmation, tracks their
// progress, retries failures elsewhere and serves the client API
// (api.Backend).
//
// # Placement
//
// For each PENDING workflow the leader picks a worker (crypto-random,
// weighted by spare cores, DEGRADED halved, workers that failed the workflow
// excluded), reserves its cores, and asks every peer to confirm the
// placement (ProvisionRequest). With confirmations from a majority of the
// configured managers, itself included, it persists the placement, commits
// it to the peers (ProvisionCommit, persisted there) and dispatches it with
// a fence token term<<32|seq. Without a majority the submission fails fast
// with wire.ErrNoQuorum and nothing is dispatched. Peers refuse requests from
// a deposed leader (an older term), so a leader cut off in a minority cannot
// place anything even before check-quorum deposes it.
//
// # Failure
//
// A worker SWIM declares dead has its workflows retried elsewhere: the kept
// dispatch bytes are re-sent with a new fence token and the next attempt
// number, and the dead worker is excluded; after MaxWorkflowRetries retries
// the workflow is FAILED. A report from a superseded attempt is answered
// with ProgressAck{Cancel: true}. A new leader first runs state sync: peers
// send their ManagerStateSnapshot (jobs, commits, attempt counts, workers),
// workers their WorkerStateSnapshot (the truth about what runs); running
// work is adopted, not restarted, and placed work that no worker runs is
// retried.
//
// # Replication beyond the contract
//
// Commits alone cannot rebuild a job on a successor, so the leader also
// replicates the job when it is accepted (ReplicateJob) and its status on
// every change (ReplicateJobStatus), and managers relay worker
// registrations to their peers (RelayWorkerRegistration). Each is a message
// type of its own, taken only from a configured peer manager; see
// replicate.go and wire/replicate.go.
//
// # Files
//
//	manager.go          wiring, lifecycle, handler registration, kick
//	doc.go              this overview
//	config.go           Config, DefaultConfig, Validate
//	clock.go            Clock, the source of time tests control
//	jobs.go             job table, state machine, submit, the update/txn helper
//	intake.go           a submission stored on a majority before its answer
//	shards.go           shard groups, splitting oversized workflows
//	schedule.go         placing queued and retried work when capacity appears
//	provision.go        quorum confirmation, commit, dispatch; peers' side
//	leader.go           establishing and revoking a leadership.Term
//	retry.go            kept dispatch bytes, retries, worker death
//	progress.go         WorkflowProgress from workers
//	thresholds.go       threshold verdicts and abort_on_fail
//	series.go           fitting per-second series into one message
//	cancel.go           cancel and per-job timeout
//	statesync.go        state sync on election, resume, snapshots for peers
//	replicate.go        JobSubmission from gates; job and status replication to peers
//	register.go         WorkerRegistration, direct and relayed
//	workers.go          worker table (and the peer-manager table)
//	select.go           weighted random worker choice
//	heartbeat.go        swim.StateEmbedder: ManagerHeartbeat out, heartbeats in
//	membership.go       SWIM events, node meta (API URL), secret reload, joining
//	gates.go            the gates' SWIM cluster, fence tokens, leases, reports to gates
//	gatestatus.go       answering a gate's ManagerStatusRequest
//	leaselapse.go       stopping a gate's job once its lease lapses here
//	blobs.go            jobs' data files on a majority of managers
//	backend.go          api.Backend
//	watch.go            Watch streams
//	results.go          what only results carry: series, latency distributions
//	persist.go          loading from the store, retention
//	metrics.go          RegisterMetrics: the manager's Prometheus series
//	rainstorm.go        RainStorm checkpoint store and its committer, routes
//	rainstorm_push.go   route-change hints to a pipeline's workers
//	rainstorm_gate.go   pipeline output pages for gates, waiting summaries
//	rainstorm_output.go PipelineOutput, from this manager's store
package manager
