package gate

import "tempest/jobs"

// refreshLocked re-derives the job's status from its datacenters and
// reports whether it changed.
func (g *Gate) refreshLocked(j *jobEntry) bool {
	old, oldErr := j.rec.Status, j.rec.Error
	if old.Terminal() {
		return false
	}
	st, msg := jobs.GlobalStatusOf(j.rec.Datacenters, j.cancelled, j.aborted)
	j.rec.Status, j.rec.Error = st, msg
	if st.Terminal() && j.rec.FinishedAt == 0 {
		j.rec.FinishedAt = g.now().UnixNano()
		g.log.Info("job ended", "job_id", j.id(), "status", st, "error", msg)
	}
	return st != old || msg != oldErr
}
