package gate

import (
	"slices"
	"time"

	"tempest/jobs"
	"tempest/wire"
)

// jobEntry is a job in memory; guarded by Gate.mu. rec is replaced, never
// modified in place, once handed to the store or a peer: slices inside it
// are shared with those copies.
type jobEntry struct {
	rec wire.GateJobRecord
	// changed is closed (and replaced) on every visible change; watchers
	// wait on it.
	changed chan struct{}
	// send lists datacenters that have not yet taken the job (or the
	// current lease): the leader's tick retries them. inFlight guards
	// against two sends to one datacenter at once.
	send     map[string]bool
	inFlight map[string]bool
	// cancelled: a client cancelled the job (as opposed to a datacenter
	// failing); the job ends CANCELLED. aborted: an abort_on_fail
	// threshold failed on the merged results; the job ends FAILED with it.
	cancelled string
	aborted   string
	// nextAbortCheck throttles the mid-run threshold checks, each of which
	// merges every datacenter's histograms.
	nextAbortCheck time.Time
	// placing is set while a new job's record is being stored on a
	// majority of gates, and closed once that is decided: a submission of
	// the same id meanwhile waits for it rather than answer too early.
	placing chan struct{}
	// storedVersion is the newest version of rec known to be on a
	// majority of gates (0 when this gate does not know: a record read
	// from its disk or another gate). storing is closed when the change
	// being stored on the other gates has its answer (update); reads wait
	// for it (awaitStored).
	storedVersion uint64
	storing       chan struct{}
	// statuses is the job's workflows merged as of a change (keyed by
	// changed), built once for all its watchers; set by watchRecord.
	statuses *jobs.Memo[<-chan struct{}, []jobs.WorkflowStatus]
	// model is the job's groups and parsed thresholds (Gate.modelOf).
	model jobs.Memo[*wire.WorkflowSpec, *jobs.Model]
}

func newJobEntry(rec wire.GateJobRecord) *jobEntry {
	return &jobEntry{rec: rec, changed: make(chan struct{}), send: map[string]bool{}, inFlight: map[string]bool{}}
}

func (j *jobEntry) id() string { return j.rec.Submission.JobID }

// wakeLocked tells watchers something changed.
func (j *jobEntry) wakeLocked() {
	close(j.changed)
	j.changed = make(chan struct{})
}

func (j *jobEntry) leaseIndex(dc string) int {
	return slices.IndexFunc(j.rec.Leases, func(l wire.DatacenterLease) bool { return l.Datacenter == dc })
}

func (j *jobEntry) progressIndex(dc string) int {
	return slices.IndexFunc(j.rec.Datacenters, func(p wire.JobProgress) bool { return p.Datacenter == dc })
}

// mutateLocked replaces the record's slices so copies already handed out
// stay as they were, then applies f.
func (j *jobEntry) mutateLocked(f func(rec *wire.GateJobRecord)) {
	j.rec.Leases = slices.Clone(j.rec.Leases)
	j.rec.Datacenters = slices.Clone(j.rec.Datacenters)
	f(&j.rec)
}

func (g *Gate) load() error {
	recs, err := g.store.load()
	if err != nil {
		return err
	}
	now := g.now()
	if err := g.update(func(tx *txn) {
		for _, r := range recs {
			g.version = max(g.version, r.Version)
			if g.expired(r, now) {
				tx.forget(r.Submission.JobID)
				continue
			}
			g.jobs[r.Submission.JobID] = newJobEntry(*r)
		}
	}); err != nil {
		g.log.Warn("retention: delete expired job records", "err", err)
	}
	return nil
}

// commitLocked bumps j's version and returns the copy to persist and
// replicate.
func (g *Gate) commitLocked(j *jobEntry) *wire.GateJobRecord {
	g.version++
	j.rec.Version = g.version
	j.wakeLocked()
	rec := j.rec
	return &rec
}

func (j *jobEntry) datacentersLocked() []string {
	out := make([]string, 0, len(j.rec.Leases))
	for _, l := range j.rec.Leases {
		out = append(out, l.Datacenter)
	}
	return out
}

func (g *Gate) forget(id string) {
	if err := g.update(func(tx *txn) { tx.forget(id) }); err != nil {
		g.log.Warn("forget job", "job_id", id, "err", err)
	}
}
