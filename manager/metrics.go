package manager

import (
	"github.com/prometheus/client_golang/prometheus"

	"tempest/api"
	"tempest/internal/obs"
	"tempest/transport"
	"tempest/wire"
)

// RegisterMetrics registers the manager's series in the node's registry:
// its election state, jobs, workflows and workers by status, free cores,
// live numbers and latency histograms of the jobs it leads, and its
// transport's counters. Every value is read at scrape time.
func (m *Manager) RegisterMetrics(reg prometheus.Registerer) error {
	leader := prometheus.NewDesc("tempest_manager_is_leader", "1 if this manager leads its datacenter.", nil, nil)
	term := prometheus.NewDesc("tempest_manager_term", "Election term this manager is in.", nil, nil)
	jobs := prometheus.NewDesc("tempest_manager_jobs", "Jobs known to this manager by status.", []string{"status"}, nil)
	wfs := prometheus.NewDesc("tempest_manager_workflows", "Workflows known to this manager by status.", []string{"status"}, nil)
	workers := prometheus.NewDesc("tempest_manager_workers", "Workers by state.", []string{"state"}, nil)
	cores := prometheus.NewDesc("tempest_manager_available_cores", "Free cores on alive workers, as this manager counts them.", nil, nil)
	live := obs.NewJobMetrics()
	own := obs.NewCollector(func(ch chan<- prometheus.Metric) {
		leading := m.leading() != nil
		obs.Gauge(ch, leader, obs.Bool(leading))
		obs.Gauge(ch, term, float64(m.elector.Status().Term))

		byJob := make(map[string]float64)
		byWf := make(map[string]float64)
		var running []jobView
		m.mu.Lock()
		for _, j := range m.jobs {
			byJob[string(j.rec.Status)]++
			for _, w := range j.wfs {
				byWf[string(w.rec.Status)]++
			}
			if !j.rec.Status.Terminal() {
				running = append(running, viewLocked(j))
			}
		}
		m.mu.Unlock()
		for k, v := range byJob {
			obs.Gauge(ch, jobs, v, k)
		}
		for k, v := range byWf {
			obs.Gauge(ch, wfs, v, k)
		}

		byState := make(map[string]float64)
		free := 0
		for _, wv := range m.workers.list() {
			state := string(wv.State)
			if !wv.Alive {
				state = "dead"
			} else {
				free += wv.AvailableCores
			}
			byState[state]++
		}
		for k, v := range byState {
			obs.Gauge(ch, workers, v, k)
		}
		obs.Gauge(ch, cores, float64(free))

		// Only the leader's numbers are live; a follower's would be stale.
		if leading {
			series := make([]obs.JobSeries, 0, len(running))
			for _, v := range running {
				s := api.SeriesOf(m.jobStatus(v, false))
				s.Steps = m.stepLatencies(v)
				series = append(series, s)
			}
			live.Collect(ch, series)
		}
	}, append([]*prometheus.Desc{leader, term, jobs, wfs, workers, cores}, live.Descs()...)...)
	return obs.Register(reg, own, obs.NewTransportCollector(func() transport.Transport { return m.tr }))
}

// stepLatencies merges each workflow's shards by step, as its status does.
func (m *Manager) stepLatencies(v jobView) []obs.StepLatency {
	var out []obs.StepLatency
	for _, g := range v.model.Groups() {
		group := v.wfs[g.Start:g.End]
		var stats []wire.StepStats
		for i := range group {
			stats = append(stats, group[i].LastProgress.StepStats...)
		}
		out = append(out, obs.StepLatencies(group[0].Spec.Name, stats)...)
	}
	return out
}
