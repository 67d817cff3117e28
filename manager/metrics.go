package manager

import (
	"fmt"
	"io"
	"maps"
	"slices"

	"tempest/transport"
)

// WriteMetrics implements api.MetricsSource: the manager's own gauges and
// its transport's counters, in Prometheus text exposition format.
func (m *Manager) WriteMetrics(w io.Writer) {
	gauge := func(name, help string, v float64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %g\n", name, help, name, name, v)
	}
	labelled := func(name, help, label string, vals map[string]int) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
		for _, k := range slices.Sorted(maps.Keys(vals)) {
			fmt.Fprintf(w, "%s{%s=%q} %d\n", name, label, k, vals[k])
		}
	}
	leader := 0.0
	if m.leading() != nil {
		leader = 1
	}
	gauge("tempest_manager_is_leader", "1 if this manager leads its datacenter.", leader)
	gauge("tempest_manager_term", "Election term this manager is in.", float64(m.elector.Status().Term))

	jobs := make(map[string]int)
	wfs := make(map[string]int)
	m.mu.Lock()
	for _, j := range m.jobs {
		jobs[string(j.rec.Status)]++
		for _, w := range j.wfs {
			wfs[string(w.rec.Status)]++
		}
	}
	m.mu.Unlock()
	labelled("tempest_manager_jobs", "Jobs known to this manager by status.", "status", jobs)
	labelled("tempest_manager_workflows", "Workflows known to this manager by status.", "status", wfs)

	workers := make(map[string]int)
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
	labelled("tempest_manager_workers", "Workers by state.", "state", workers)
	gauge("tempest_manager_available_cores", "Free cores on alive workers, as this manager counts them.", float64(free))

	src, ok := m.tr.(transport.StatsSource)
	if !ok {
		return
	}
	st := src.Stats()
	counter := func(name, help string, v uint64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", name, help, name, name, v)
	}
	counter("tempest_transport_messages_in_total", "Messages received.", st.MessagesIn)
	counter("tempest_transport_messages_out_total", "Messages sent.", st.MessagesOut)
	counter("tempest_transport_auth_failures_total", "Envelopes that opened with no accepted key.", st.AuthFailures)
	counter("tempest_transport_replays_dropped_total", "Replayed or stale envelopes dropped.", st.ReplaysDropped)
	counter("tempest_transport_rate_limited_total", "Messages refused by rate limits.", st.RateLimited)
	counter("tempest_transport_malformed_total", "Undecodable frames, envelopes or bodies.", st.Malformed)
	counter("tempest_transport_call_errors_total", "Calls that ended in an error.", st.CallErrors)
	open := make(map[string]int)
	for _, b := range st.Breakers {
		open[b.Peer+"/"+b.Class]++
	}
	labelled("tempest_transport_breakers_not_closed", "Circuit breakers open or half-open, by peer and class.", "breaker", open)
}
