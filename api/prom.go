package api

import (
	"fmt"
	"io"
	"maps"
	"slices"

	"tempest/transport"
)

// Prom writes Prometheus text exposition (format 0.0.4) for a role's
// MetricsSource, so every role names and formats its series the same way.
type Prom struct{ W io.Writer }

// Gauge writes one unlabelled gauge.
func (p Prom) Gauge(name, help string, v float64) {
	fmt.Fprintf(p.W, "# HELP %s %s\n# TYPE %s gauge\n%s %g\n", name, help, name, name, v)
}

// Counter writes one unlabelled counter.
func (p Prom) Counter(name, help string, v uint64) {
	fmt.Fprintf(p.W, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", name, help, name, name, v)
}

// Labelled writes a gauge with one label, values in label order.
func (p Prom) Labelled(name, help, label string, vals map[string]float64) {
	fmt.Fprintf(p.W, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		fmt.Fprintf(p.W, "%s{%s=%q} %g\n", name, label, k, vals[k])
	}
}

// Transport writes a transport's counters, if it keeps any.
func (p Prom) Transport(tr transport.Transport) {
	src, ok := tr.(transport.StatsSource)
	if !ok {
		return
	}
	st := src.Stats()
	p.Counter("tempest_transport_messages_in_total", "Messages received.", st.MessagesIn)
	p.Counter("tempest_transport_messages_out_total", "Messages sent.", st.MessagesOut)
	p.Counter("tempest_transport_auth_failures_total", "Connection hellos and envelopes that did not verify with any accepted key, or named another sender.", st.AuthFailures)
	p.Counter("tempest_transport_conns_refused_total", "Inbound connections refused by a connection limit (per source IP or in total).", st.ConnsRefused)
	p.Counter("tempest_transport_hello_timeouts_total", "Inbound connections closed for not completing their hello in time.", st.HelloTimeouts)
	p.Counter("tempest_transport_too_large_total", "Frames announced over the size cap.", st.TooLarge)
	p.Counter("tempest_transport_role_refused_total", "Requests of a type the sender's key tier may not send (a worker key sending a vote).", st.RoleRefused)
	p.Counter("tempest_transport_replays_dropped_total", "Replayed or stale envelopes dropped.", st.ReplaysDropped)
	p.Counter("tempest_transport_rate_limited_total", "Messages refused by rate limits.", st.RateLimited)
	p.Counter("tempest_transport_malformed_total", "Undecodable frames, envelopes or bodies.", st.Malformed)
	p.Counter("tempest_transport_call_errors_total", "Calls that ended in an error.", st.CallErrors)
	open := make(map[string]float64)
	for _, b := range st.Breakers {
		open[b.Peer+"/"+b.Class]++
	}
	p.Labelled("tempest_transport_breakers_not_closed", "Circuit breakers open or half-open, by peer and class.", "breaker", open)
}

// JobSeries are a running job's live numbers, as /metrics shows them.
type JobSeries struct {
	JobID             string
	Completed, Failed int64
	Rate              float64
	P99Ms             float64
}

// SeriesOf is a running job's numbers for /metrics: its counts, its rate
// (the datacenters' current rates added up when a gate answers, else the
// run's average so far) and the highest p99 of its steps.
func SeriesOf(st JobStatus) JobSeries {
	s := JobSeries{JobID: st.JobID, Completed: st.TotalCompleted, Failed: st.TotalFailed}
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

// Jobs writes live per-job series: iterations completed and failed, the
// current rate and the p99 of the merged histograms.
func (p Prom) Jobs(jobs []JobSeries) {
	write := func(name, help, typ string, v func(JobSeries) float64) {
		fmt.Fprintf(p.W, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
		for _, j := range jobs {
			fmt.Fprintf(p.W, "%s{job_id=%q} %g\n", name, j.JobID, v(j))
		}
	}
	write("tempest_job_completed_total", "Iterations completed by a running job.", "counter", func(j JobSeries) float64 { return float64(j.Completed) })
	write("tempest_job_failed_total", "Iterations failed by a running job.", "counter", func(j JobSeries) float64 { return float64(j.Failed) })
	write("tempest_job_rate", "Current iterations per second of a running job.", "gauge", func(j JobSeries) float64 { return j.Rate })
	write("tempest_job_p99_ms", "p99 latency of a running job's first step, from merged histograms (milliseconds).", "gauge", func(j JobSeries) float64 { return j.P99Ms })
}
