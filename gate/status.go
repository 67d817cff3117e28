package gate

import (
	"fmt"
	"strings"

	"tempest/wire"
)

// refreshLocked re-derives the job's status from its datacenters and
// reports whether it changed.
func (g *Gate) refreshLocked(j *jobEntry) bool {
	old, oldErr := j.rec.Status, j.rec.Error
	if old.Terminal() {
		return false
	}
	st, msg := deriveStatus(j.rec.Datacenters, j.cancelled, j.aborted)
	j.rec.Status, j.rec.Error = st, msg
	if st.Terminal() && j.rec.FinishedAt == 0 {
		j.rec.FinishedAt = g.now().UnixNano()
		g.log.Info("job ended", "job_id", j.id(), "status", st, "error", msg)
	}
	return st != old || msg != oldErr
}

// deriveStatus is the global job state machine: a job is done when every
// datacenter is; COMPLETED only if every datacenter completed, otherwise
// FAILED naming each datacenter that did not (a partial failure is a
// failure the client must see, never a silent retry elsewhere), or
// CANCELLED when a client cancelled it. While running, the most advanced
// datacenter's state shows.
func deriveStatus(dcs []wire.JobProgress, cancelled, aborted string) (wire.JobStatus, string) {
	if len(dcs) == 0 {
		return wire.JobSubmitted, ""
	}
	allDone, allCompleted, allTimeout := true, true, true
	var failed []string
	rank := map[wire.JobStatus]int{wire.JobSubmitted: 0, wire.JobQueued: 1, wire.JobDispatching: 2, wire.JobRunning: 3, wire.JobCompleting: 4}
	best := wire.JobSubmitted
	for _, p := range dcs {
		if !p.Status.Terminal() {
			allDone = false
			if rank[p.Status] > rank[best] {
				best = p.Status
			}
			continue
		}
		if p.Status != wire.JobCompleted {
			allCompleted = false
			reason := p.Error
			if reason == "" {
				reason = string(p.Status)
			}
			failed = append(failed, fmt.Sprintf("%s %s: %s", p.Datacenter, p.Status, reason))
		}
		allTimeout = allTimeout && p.Status == wire.JobTimeout
	}
	switch {
	case !allDone:
		return best, ""
	case aborted != "":
		return wire.JobFailed, aborted
	case cancelled != "":
		return wire.JobCancelled, cancelled
	case allCompleted:
		return wire.JobCompleted, ""
	case allTimeout:
		return wire.JobTimeout, strings.Join(failed, "; ")
	case len(failed) < len(dcs):
		return wire.JobFailed, fmt.Sprintf("partial failure: %d of %d datacenters did not complete: %s", len(failed), len(dcs), strings.Join(failed, "; "))
	default:
		return wire.JobFailed, strings.Join(failed, "; ")
	}
}
