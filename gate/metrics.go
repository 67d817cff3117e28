package gate

import (
	"github.com/prometheus/client_golang/prometheus"

	"tempest/api"
	"tempest/internal/obs"
	"tempest/transport"
	"tempest/wire"
)

// RegisterMetrics registers the gate's series in the node's registry: the
// ones every leading role has (obs.Role: election state, jobs by status,
// live numbers and latency histograms of running jobs, merged across
// datacenters, while it leads, the transport's counters) and its own:
// whether it synced, the leases of unfinished jobs, datacenter health.
// Every value is read at scrape time.
func (g *Gate) RegisterMetrics(reg prometheus.Registerer) error {
	ready := prometheus.NewDesc("tempest_gate_ready", "1 once this gate has synced state and may lead.", nil, nil)
	leases := prometheus.NewDesc("tempest_gate_active_leases", "Datacenter leases of unfinished jobs.", nil, nil)
	healthy := prometheus.NewDesc("tempest_gate_datacenter_healthy", "1 if the datacenter has a leader heard from recently.", []string{"dc"}, nil)
	return obs.Role{
		Name: "gate", Leads: "the gates",
		Own:       []*prometheus.Desc{ready, leases, healthy},
		Transport: func() transport.Transport { return g.tr },
		Scrape: func(ch chan<- prometheus.Metric) obs.RoleState {
			obs.Gauge(ch, ready, obs.Bool(g.ready.Load()))
			byStatus := make(map[string]float64)
			active := 0.0
			g.view(func() {
				for _, j := range g.jobs {
					byStatus[string(j.rec.Status)]++
					if !j.rec.Status.Terminal() {
						for _, d := range j.rec.Datacenters {
							if !d.Status.Terminal() {
								active++
							}
						}
					}
				}
			})
			obs.Gauge(ch, leases, active)
			for _, h := range g.dcs.health(g.cfg.HealthTimeout) {
				obs.Gauge(ch, healthy, obs.Bool(h.Healthy), h.Name)
			}
			return obs.RoleState{Leading: g.lead.Leading() != nil, Term: g.elector.Status().Term, Jobs: byStatus}
		},
		Live: g.liveSeries,
	}.Register(reg)
}

// liveSeries is the series of the running jobs while this gate leads.
func (g *Gate) liveSeries() []obs.JobSeries {
	if g.lead.Leading() == nil {
		return nil
	}
	var running []wire.GateJobRecord
	g.view(func() {
		for _, j := range g.jobs {
			if !j.rec.Status.Terminal() {
				running = append(running, j.rec)
			}
		}
	})
	series := make([]obs.JobSeries, 0, len(running))
	for i := range running {
		s := api.SeriesOf(g.jobStatus(&running[i], false))
		s.Steps = stepLatencies(&running[i])
		series = append(series, s)
	}
	return series
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
