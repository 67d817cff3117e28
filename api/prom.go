package api

import "tempest/internal/obs"

// SeriesOf is a running job's numbers for /metrics: its counts, its rate
// (the datacenters' current rates added up when a gate answers, else the
// run's average so far) and the highest p99 of its steps. The role adds the
// steps' latency histograms, which a JobStatus does not carry.
func SeriesOf(st JobStatus) obs.JobSeries {
	s := obs.JobSeries{JobID: st.JobID, Completed: st.TotalCompleted, Failed: st.TotalFailed}
	for _, d := range st.Datacenters {
		s.Rate += d.Rate
	}
	for _, w := range st.Workflows {
		if len(st.Datacenters) == 0 && st.ElapsedSeconds > 0 {
			s.Rate += float64(w.CompletedCount+w.FailedCount) / st.ElapsedSeconds
		}
		for _, step := range w.Steps {
			s.P99Ms = max(s.P99Ms, step.P99Ms)
		}
	}
	return s
}
