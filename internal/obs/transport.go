package obs

import (
	"github.com/prometheus/client_golang/prometheus"

	"tempest/transport"
)

// transportCounters names the transport's counters; the names are what
// dashboards and the integration tests read, so they do not change.
var transportCounters = []struct {
	name, help string
	get        func(*transport.Stats) uint64
}{
	{"tempest_transport_messages_in_total", "Messages received.", func(s *transport.Stats) uint64 { return s.MessagesIn }},
	{"tempest_transport_messages_out_total", "Messages sent.", func(s *transport.Stats) uint64 { return s.MessagesOut }},
	{"tempest_transport_bytes_in_total", "Frame bytes received.", func(s *transport.Stats) uint64 { return s.BytesIn }},
	{"tempest_transport_bytes_out_total", "Frame bytes sent.", func(s *transport.Stats) uint64 { return s.BytesOut }},
	{"tempest_transport_auth_failures_total", "Connection hellos and envelopes that did not verify with any accepted key, or named another sender.", func(s *transport.Stats) uint64 { return s.AuthFailures }},
	{"tempest_transport_conns_refused_total", "Inbound connections refused by a connection limit (per source IP or in total).", func(s *transport.Stats) uint64 { return s.ConnsRefused }},
	{"tempest_transport_hello_timeouts_total", "Inbound connections closed for not completing their hello in time.", func(s *transport.Stats) uint64 { return s.HelloTimeouts }},
	{"tempest_transport_too_large_total", "Frames announced over the size cap.", func(s *transport.Stats) uint64 { return s.TooLarge }},
	{"tempest_transport_role_refused_total", "Requests of a type the sender's key tier may not send (a worker key sending a vote).", func(s *transport.Stats) uint64 { return s.RoleRefused }},
	{"tempest_transport_replays_dropped_total", "Replayed or stale envelopes dropped.", func(s *transport.Stats) uint64 { return s.ReplaysDropped }},
	{"tempest_transport_rate_limited_total", "Messages refused by rate limits.", func(s *transport.Stats) uint64 { return s.RateLimited }},
	{"tempest_transport_malformed_total", "Undecodable frames, envelopes or bodies.", func(s *transport.Stats) uint64 { return s.Malformed }},
	{"tempest_transport_call_errors_total", "Calls that ended in an error.", func(s *transport.Stats) uint64 { return s.CallErrors }},
	{"tempest_transport_left_write_queue_total", "Calls whose context ended while their frame waited behind another write on its stream (the frame still went out with its batch).", func(s *transport.Stats) uint64 { return s.LeftWriteQueue }},
	{"tempest_transport_replies_stalled_total", "Replies not written within the reply timeout to a caller that stopped reading; its stream was reset.", func(s *transport.Stats) uint64 { return s.RepliesStalled }},
	{"tempest_transport_breaker_changes_total", "Circuit breaker state transitions.", func(s *transport.Stats) uint64 { return s.BreakerChanges }},
}

// NewTransportCollector exposes the counters of the transport current()
// returns (nil, or one that keeps none, exposes nothing): a role's
// transport may be built after its registry, or replaced.
func NewTransportCollector(current func() transport.Transport) prometheus.Collector {
	descs := make([]*prometheus.Desc, len(transportCounters))
	for i, c := range transportCounters {
		descs[i] = prometheus.NewDesc(c.name, c.help, nil, nil)
	}
	breakers := prometheus.NewDesc("tempest_transport_breakers_not_closed",
		"Circuit breakers open or half-open, by peer and class.", []string{"breaker"}, nil)
	return NewCollector(func(ch chan<- prometheus.Metric) {
		src, ok := current().(transport.StatsSource)
		if !ok {
			return
		}
		st := src.Stats()
		for i, c := range transportCounters {
			Counter(ch, descs[i], float64(c.get(&st)))
		}
		open := make(map[string]float64)
		for _, b := range st.Breakers {
			open[b.Peer+"/"+b.Class]++
		}
		for k, v := range open {
			Gauge(ch, breakers, v, k)
		}
	}, append(descs, breakers)...)
}
