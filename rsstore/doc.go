// Package rsstore is the replicated checkpoint store of RainStorm
// pipelines (docs/rainstorm.md, "The replicated store").
//
// Every manager of a datacenter holds one Store: a bbolt file with each
// task's latest checkpoint (a small head, plus each unacknowledged batch
// once) and the output rows its checkpoints published. The leader runs the
// committer (Lead): a group of task requests is checked (compare-and-set
// on the task's version; the incarnation and the sender are the Host's to
// check), written here in one transaction, replicated to the peers in one
// message (a delta to a peer known to hold its base), and answered only
// once a majority of the managers stored it; a group that missed a
// majority is undone. A new leader reads a majority's stores (Sync) before
// it answers any task, and a peer that answered that read refuses groups
// of older terms, so nothing a deposed leader writes afterwards can be
// taken for acknowledged. A store keeps each task's last few deltas
// (history.go), so a store a few versions behind another, read by or
// caught up from a new leader, moves the keys changed since, not the
// whole state.
//
// The store knows nothing of jobs or workers: the manager that runs it
// says through Host who its peers are, how to reach one, and whether a
// request comes from the task's running incarnation.
package rsstore
