package manager

import (
	"maps"

	"github.com/prometheus/client_golang/prometheus"

	"tempest/internal/obs"
	"tempest/transport"
	"tempest/wire"
)

// RegisterMetrics registers the manager's series in the node's registry:
// the ones every leading role has (obs.Role: election state, jobs by
// status, live numbers and latency histograms of the jobs it leads, the
// transport's counters) and its own: workflows and workers by status, free
// cores, RainStorm checkpoints refused as stale. Every value is read at scrape time.
func (m *Manager) RegisterMetrics(reg prometheus.Registerer) error {
	wfs := prometheus.NewDesc("tempest_manager_workflows", "Workflows known to this manager by status.", []string{"status"}, nil)
	workers := prometheus.NewDesc("tempest_manager_workers", "Workers by state.", []string{"state"}, nil)
	cores := prometheus.NewDesc("tempest_manager_available_cores", "Free cores on alive workers, as this manager counts them.", nil, nil)
	stale := prometheus.NewDesc("tempest_manager_rainstorm_stale_checkpoints_total",
		"RainStorm checkpoints this manager refused, leading, because their task runs under a newer incarnation (a replaced task that went on running).", nil, nil)
	refused := prometheus.NewDesc("tempest_manager_unauthorized_total",
		"Requests refused for their sender: a pipeline task's open, checkpoint or routes from a node it is not dispatched to, a blob read for work not dispatched to the reader, progress for an attempt this leader has no record of and no manager's placement proof for.",
		[]string{"type"}, nil)
	intakeCB := prometheus.NewDesc("tempest_manager_intake_breaker_state",
		"The intake breaker: 0 closed, 1 half-open (one submission probes for a majority), 2 open (new submissions refused at once with no_quorum after repeated intakes found no majority of managers).", nil, nil)
	load := prometheus.NewDesc("tempest_manager_load_level",
		"This manager's load level from scheduler lag and Lifeguard's health score: 0 NORMAL, 1 ELEVATED, 2 HIGH (a leader hands over to a less degraded peer), 3 CRITICAL (new jobs refused).", nil, nil)
	lag := prometheus.NewDesc("tempest_manager_scheduler_lag_seconds",
		"The worst lateness of this manager's own timers over the last few seconds.", nil, nil)
	fast := prometheus.NewDesc("tempest_manager_intake_fast_refusals_total",
		"Submissions refused at once with no_quorum because the intake breaker was open (or probing), instead of waiting out the quorum timeout.", nil, nil)
	return obs.Role{
		Name: "manager", Leads: "its datacenter",
		Own:       []*prometheus.Desc{wfs, workers, cores, stale, refused, intakeCB, fast, load, lag},
		Transport: func() transport.Transport { return m.tr },
		Scrape: func(ch chan<- prometheus.Metric) obs.RoleState {
			byJob := make(map[string]float64)
			m.mu.Lock()
			for _, j := range m.jobs {
				byJob[string(j.rec.Status)]++
			}
			byWf := maps.Clone(m.wfCounts)
			m.mu.Unlock()
			for k, v := range byWf {
				obs.Gauge(ch, wfs, float64(v), string(k))
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
			obs.Counter(ch, stale, float64(m.rsStale.Load()))
			obs.Gauge(ch, intakeCB, m.intakeCB.state())
			obs.Counter(ch, fast, float64(m.intakeCB.fastRefusals.Load()))
			r := m.loadReading()
			obs.Gauge(ch, load, float64(r.Level))
			obs.Gauge(ch, lag, m.lag.Lag().Seconds())
			for t, n := range m.refused.Snapshot() {
				obs.Counter(ch, refused, float64(n), t.String())
			}
			return obs.RoleState{Leading: m.leading() != nil, Term: m.elector.Status().Term, Jobs: byJob}
		},
		Live: m.liveSeries,
	}.Register(reg)
}

// liveSeries is the series of the running jobs while this manager leads.
// Each job's step histograms are decoded and merged once, and its p99 read
// from them, rather than building the job's whole API status as well.
func (m *Manager) liveSeries() []obs.JobSeries {
	if m.leading() == nil {
		return nil
	}
	var running []jobView
	m.mu.Lock()
	for _, j := range m.jobs {
		if !j.rec.Status.Terminal() {
			running = append(running, viewLocked(j))
		}
	}
	m.mu.Unlock()
	now := m.clock.Now()
	series := make([]obs.JobSeries, 0, len(running))
	for _, v := range running {
		s := obs.JobSeries{JobID: v.rec.ID(), Completed: v.rec.Progress.TotalCompleted, Failed: v.rec.Progress.TotalFailed,
			Steps: m.stepLatencies(v)}
		if elapsed := now.Sub(v.rec.Created()).Seconds(); elapsed > 0 {
			s.Rate = float64(s.Completed+s.Failed) / elapsed
		}
		s.P99Ms = obs.MaxP99Ms(s.Steps)
		series = append(series, s)
	}
	return series
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
