package manager

import (
	"fmt"

	"tempest/wire"
)

// queueFullLocked refuses a new job when MaxQueuedJobs jobs already wait
// for capacity. The refusal comes before the job is stored anywhere, so a
// refused job was never accepted: the client retries after RetryAfter, or
// elsewhere. Jobs already accepted are never dropped to make room.
//
// A queued job's timeout runs while it waits: `timeout` bounds how long a
// submitter waits for an outcome, from submission, and the bound on the
// queue is what keeps the wait itself bounded.
func (m *Manager) queueFullLocked() *wire.Error {
	limit := m.cfg.MaxQueuedJobs
	if limit <= 0 {
		return nil
	}
	queued := 0
	for _, j := range m.jobs {
		if s := j.rec.Status; s == wire.JobSubmitted || s == wire.JobQueued {
			queued++
		}
	}
	if queued < limit {
		return nil
	}
	return &wire.Error{Code: wire.CodeUnavailable, RetryAfter: m.cfg.HeartbeatInterval * 4,
		Message: fmt.Sprintf("capacity exceeded: %d jobs are already waiting for cores in %s (max_queued_jobs %d); submit again later",
			queued, m.cfg.Datacenter, limit)}
}
