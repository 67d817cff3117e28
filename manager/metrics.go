package manager

import (
	"io"

	"tempest/api"
)

// WriteMetrics implements api.MetricsSource: the manager's own gauges, live
// numbers of its running jobs, and its transport's counters, in Prometheus
// text exposition format.
func (m *Manager) WriteMetrics(w io.Writer) {
	p := api.Prom{W: w}
	leader := 0.0
	if m.leading() != nil {
		leader = 1
	}
	p.Gauge("tempest_manager_is_leader", "1 if this manager leads its datacenter.", leader)
	p.Gauge("tempest_manager_term", "Election term this manager is in.", float64(m.elector.Status().Term))

	jobs := make(map[string]float64)
	wfs := make(map[string]float64)
	var running []jobView
	m.mu.Lock()
	for _, j := range m.jobs {
		jobs[string(j.rec.Status)]++
		for _, w := range j.wfs {
			wfs[string(w.rec.Status)]++
		}
		if !j.rec.Status.Terminal() {
			running = append(running, viewLocked(j))
		}
	}
	m.mu.Unlock()
	p.Labelled("tempest_manager_jobs", "Jobs known to this manager by status.", "status", jobs)
	p.Labelled("tempest_manager_workflows", "Workflows known to this manager by status.", "status", wfs)

	workers := make(map[string]float64)
	free := 0
	for _, wv := range m.workers.list() {
		state := string(wv.State)
		if !wv.Alive {
			state = "dead"
		} else {
			free += wv.AvailableCores
		}
		workers[state]++
	}
	p.Labelled("tempest_manager_workers", "Workers by state.", "state", workers)
	p.Gauge("tempest_manager_available_cores", "Free cores on alive workers, as this manager counts them.", float64(free))

	// Only the leader's numbers are live; a follower's would be stale.
	if leader == 1 {
		series := make([]api.JobSeries, 0, len(running))
		for _, v := range running {
			series = append(series, api.SeriesOf(m.jobStatus(v, false)))
		}
		p.Jobs(series)
	}
	p.Transport(m.tr)
}
