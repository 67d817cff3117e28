package gate

import (
	"context"
	"time"

	"tempest/jobs"
	"tempest/wire"
)

// abortCheckInterval is the least time between two mid-run checks of a
// job's abort_on_fail thresholds on the merged results.
const abortCheckInterval = time.Second

func hasAbortThresholds(specs []wire.WorkflowSpec) bool {
	for _, s := range specs {
		for _, th := range s.Thresholds {
			if th.AbortOnFail {
				return true
			}
		}
	}
	return false
}

// abortReason judges a running job's abort_on_fail thresholds on the
// results merged across datacenters (and shards); a threshold with no data
// yet is not judged. It returns the failure, or "".
func (g *Gate) abortReason(rec *wire.GateJobRecord) string {
	model := g.modelOf(rec)
	for k, grp := range model.Groups() {
		spec := rec.Submission.Workflows[grp.Start]
		abort := model.AbortOnFail(k)
		if abort.Len() == 0 {
			continue
		}
		var steps []wire.StepStats
		var completed, failed int64
		var elapsed time.Duration
		for _, p := range rec.Datacenters {
			for _, w := range p.Workflows {
				if w.WorkflowName == spec.Name {
					steps = append(steps, w.StepStats...)
					completed, failed, elapsed = completed+w.CompletedCount, failed+w.FailedCount, max(elapsed, w.Elapsed)
				}
			}
		}
		if reason, _, hit := jobs.AbortReason(spec.Name, abort.Evaluate(steps, completed, failed, elapsed)); hit {
			return reason
		}
	}
	return ""
}

// abort ends a job everywhere because an abort_on_fail threshold failed.
func (g *Gate) abort(ctx context.Context, id, reason string) {
	first := false
	g.update(func(*txn) {
		j, ok := g.jobs[id]
		if !ok || j.aborted != "" || j.rec.Status.Terminal() {
			return
		}
		j.aborted, first = reason, true
	})
	if !first {
		return
	}
	g.log.Warn("abort_on_fail threshold failed on the merged results; ending the job", "job_id", id, "reason", reason)
	if _, err := g.stopEverywhere(ctx, id, reason); err != nil {
		g.log.Warn("abort", "job_id", id, "err", err)
	}
}
