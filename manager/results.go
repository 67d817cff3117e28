package manager

import (
	"tempest/api"
	"tempest/store"
	"tempest/wire"
	"tempest/workflow"
)

// resultDetail adds what only results carry to a workflow's status: the
// per-second series of its final progress and each step's latency
// distribution. Status queries skip it: the distribution decodes every
// histogram again and the series can be an hour of points.
func (m *Manager) resultDetail(rec *store.WorkflowRecord, ws *api.WorkflowStatus) {
	ws.Series = seriesPoints(rec.Series)
	if len(ws.Steps) == 0 {
		return
	}
	steps, err := workflow.MergeStepStats(nil, rec.LastProgress.StepStats)
	if err != nil {
		m.log.Warn("undecodable step statistics", "job_id", rec.JobID, "workflow_id", rec.WorkflowID, "err", err)
		return
	}
	pcts := api.DistributionPercentiles()
	byName := make(map[string][]byte, len(steps))
	for _, s := range steps {
		byName[s.StepName] = s.Histogram
	}
	for i := range ws.Steps {
		h, ok := byName[ws.Steps[i].Name]
		if !ok || len(h) == 0 {
			continue
		}
		ds, err := workflow.Percentiles(h, pcts...)
		if err != nil {
			m.log.Warn("step latency distribution", "job_id", rec.JobID, "workflow_id", rec.WorkflowID,
				"step", ws.Steps[i].Name, "err", err)
			continue
		}
		dist := make([]api.PercentilePoint, len(ds))
		for j, d := range ds {
			dist[j] = api.PercentilePoint{Percentile: pcts[j], Ms: ms(d)}
		}
		ws.Steps[i].Distribution = dist
	}
}

func seriesPoints(series []wire.SecondStats) []api.SeriesPoint {
	series = wire.ClipSeries(series, 0)
	if len(series) == 0 {
		return nil
	}
	out := make([]api.SeriesPoint, len(series))
	for i, p := range series {
		out[i] = api.SeriesPoint{Second: p.Second, Completed: p.Completed, Failed: p.Failed,
			Dropped: p.Dropped, VUs: p.VUs, P50Ms: ms(p.P50), P99Ms: ms(p.P99)}
	}
	return out
}
