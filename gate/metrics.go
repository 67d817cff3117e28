package gate

import (
	"github.com/prometheus/client_golang/prometheus"

	"tempest/api"
	"tempest/internal/obs"
	"tempest/transport"
	"tempest/wire"
)

// RegisterMetrics registers the gate's series in the node's registry: its
// election state, jobs by status, datacenter health, live numbers and
// latency histograms of running jobs (merged across datacenters) while it
// leads, and the transport's counters. Every value is read at scrape time.
func (g *Gate) RegisterMetrics(reg prometheus.Registerer) error {
	leader := prometheus.NewDesc("tempest_gate_is_leader", "1 if this gate leads the gates.", nil, nil)
	ready := prometheus.NewDesc("tempest_gate_ready", "1 once this gate has synced state and may lead.", nil, nil)
	term := prometheus.NewDesc("tempest_gate_term", "Election term this gate is in.", nil, nil)
	jobs := prometheus.NewDesc("tempest_gate_jobs", "Jobs known to this gate by status.", []string{"status"}, nil)
	leases := prometheus.NewDesc("tempest_gate_active_leases", "Datacenter leases of unfinished jobs.", nil, nil)
	healthy := prometheus.NewDesc("tempest_gate_datacenter_healthy", "1 if the datacenter has a leader heard from recently.", []string{"dc"}, nil)
	live := obs.NewJobMetrics()
	own := obs.NewCollector(func(ch chan<- prometheus.Metric) {
		leading := g.lead.Leading() != nil
		obs.Gauge(ch, leader, obs.Bool(leading))
		obs.Gauge(ch, ready, obs.Bool(g.ready.Load()))
		obs.Gauge(ch, term, float64(g.elector.Status().Term))

		byStatus := make(map[string]float64)
		active := 0.0
		var running []wire.GateJobRecord
		g.view(func() {
			for _, j := range g.jobs {
				byStatus[string(j.rec.Status)]++
				if !j.rec.Status.Terminal() {
					running = append(running, j.rec)
					for _, d := range j.rec.Datacenters {
						if !d.Status.Terminal() {
							active++
						}
					}
				}
			}
		})
		for k, v := range byStatus {
			obs.Gauge(ch, jobs, v, k)
		}
		obs.Gauge(ch, leases, active)
		for _, h := range g.dcs.health(g.cfg.HealthTimeout) {
			obs.Gauge(ch, healthy, obs.Bool(h.Healthy), h.Name)
		}
		if leading {
			series := make([]obs.JobSeries, 0, len(running))
			for i := range running {
				s := api.SeriesOf(g.jobStatus(&running[i], false))
				s.Steps = stepLatencies(&running[i])
				series = append(series, s)
			}
			live.Collect(ch, series)
		}
	}, append([]*prometheus.Desc{leader, ready, term, jobs, leases, healthy}, live.Descs()...)...)
	return obs.Register(reg, own, obs.NewTransportCollector(func() transport.Transport { return g.tr }))
}

// stepLatencies merges each workflow's reports from every datacenter (and
// every shard within each) by step, as its status does.
func stepLatencies(rec *wire.GateJobRecord) []obs.StepLatency {
	var order []string
	byName := make(map[string][]wire.StepStats)
	for _, p := range rec.Datacenters {
		for _, w := range p.Workflows {
			if _, seen := byName[w.WorkflowName]; !seen {
				order = append(order, w.WorkflowName)
			}
			byName[w.WorkflowName] = append(byName[w.WorkflowName], w.StepStats...)
		}
	}
	var out []obs.StepLatency
	for _, name := range order {
		out = append(out, obs.StepLatencies(name, byName[name])...)
	}
	return out
}
