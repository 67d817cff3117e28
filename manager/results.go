package manager

import (
	"tempest/internal/store"
	"tempest/jobs"
)

// resultDetail adds what only results carry to a workflow's status: the
// per-second series of its final progress and each step's latency
// distribution. Status queries skip it: the distribution decodes every
// histogram again and the series can be an hour of points.
func (m *Manager) resultDetail(rec *store.WorkflowRecord, ws *jobs.WorkflowStatus) {
	ws.Series = jobs.SeriesPoints(rec.Series)
	if len(ws.Steps) == 0 {
		return
	}
	_, merged, err := jobs.StepSummaries(rec.LastProgress.StepStats)
	if err == nil {
		err = jobs.AddDistributions(ws.Steps, merged)
	}
	if err != nil {
		m.log.Warn("step latency distribution", "job_id", rec.JobID, "workflow_id", rec.WorkflowID, "err", err)
	}
}
