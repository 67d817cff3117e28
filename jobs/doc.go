// Package jobs is the job model the roles share: what a job is allowed to be
// (Job.Validate), what it becomes when a field is left out
// (Job.Canonicalize), how its workflows group into the units the user wrote
// (Groups: a workflow alone, or every shard of a split one), and how a job's
// parts come back together: a workflow's shards and datacenters merged into
// one status (MergeWorkflow), and the three state machines that turn parts'
// states into a whole's (WorkflowStatusOf, JobStatusOf, GlobalStatusOf).
//
// The gate and the manager hold jobs in different shapes (a gate record per
// job, a manager record per workflow) but judge them by these rules, so a
// job reads the same whichever role answers. The package depends on wire and
// workflow only; api re-exports its status shapes for the HTTP layer.
package jobs
