package gate

import (
	"io"

	"tempest/api"
	"tempest/wire"
)

// WriteMetrics implements api.MetricsSource: the gate's election state,
// jobs by status, datacenter health, live numbers of running jobs (merged
// across datacenters) and the transport's counters.
func (g *Gate) WriteMetrics(w io.Writer) {
	p := api.Prom{W: w}
	leader, ready := 0.0, 0.0
	if g.lead.Leading() != nil {
		leader = 1
	}
	if g.ready.Load() {
		ready = 1
	}
	p.Gauge("tempest_gate_is_leader", "1 if this gate leads the gates.", leader)
	p.Gauge("tempest_gate_ready", "1 once this gate has synced state and may lead.", ready)
	p.Gauge("tempest_gate_term", "Election term this gate is in.", float64(g.elector.Status().Term))

	jobs := make(map[string]float64)
	leases := 0.0
	var running []wire.GateJobRecord
	g.view(func() {
		for _, j := range g.jobs {
			jobs[string(j.rec.Status)]++
			if !j.rec.Status.Terminal() {
				running = append(running, j.rec)
				for _, d := range j.rec.Datacenters {
					if !d.Status.Terminal() {
						leases++
					}
				}
			}
		}
	})
	p.Labelled("tempest_gate_jobs", "Jobs known to this gate by status.", "status", jobs)
	p.Gauge("tempest_gate_active_leases", "Datacenter leases of unfinished jobs.", leases)
	healthy := make(map[string]float64)
	for _, h := range g.dcs.health(g.cfg.HealthTimeout) {
		v := 0.0
		if h.Healthy {
			v = 1
		}
		healthy[h.Name] = v
	}
	p.Labelled("tempest_gate_datacenter_healthy", "1 if the datacenter has a leader heard from recently.", "dc", healthy)
	if leader == 1 {
		series := make([]api.JobSeries, 0, len(running))
		for i := range running {
			series = append(series, api.SeriesOf(g.jobStatus(&running[i], false)))
		}
		p.Jobs(series)
	}
	p.Transport(g.tr)
}
