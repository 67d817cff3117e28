package api

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// apiMetrics counts what the HTTP layer does, in the node's Prometheus
// registry. Every label takes values from a closed set (known methods,
// registered routes, statuses this server writes), so no client can grow a
// metric's cardinality.
type apiMetrics struct {
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	forwarded prometheus.Counter
	badClient prometheus.Counter // forwarded-client headers that did not verify
	streams   prometheus.Gauge   // event streams open now
	opened    prometheus.Counter
	unserved  prometheus.Counter

	// served: open connections, and whether one of their requests reached
	// a handler; one closed before that is counted in unserved (a slow
	// client cut by the header timeout, or one that connected and left).
	// net/http's StateActive comes with the first byte, so it cannot tell.
	mu     sync.Mutex
	served map[net.Conn]bool
}

// connKey carries a request's connection in its context, for servedOn.
type connKey struct{}

func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// newAPIMetrics declares the API's series; limiterSize reports how many
// client IPs hold a rate-limit bucket at scrape time.
func newAPIMetrics(limiterSize func() int) (*apiMetrics, []prometheus.Collector) {
	m := &apiMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tempest_api_requests_total", Help: "HTTP API requests by method, route and status code.",
		}, []string{"method", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tempest_api_request_duration_seconds",
			Help: "Time from a request's arrival to the end of its answer, by method and route (event streams last as long as they are watched).",
			// Classic buckets for the text format and promtool, plus a
			// native histogram for a scraper that asks for protobuf.
			Buckets:                         prometheus.ExponentialBuckets(0.0005, 4, 10),
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  100,
			NativeHistogramMinResetDuration: time.Hour,
		}, []string{"method", "route"}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tempest_api_forwarded_requests_total", Help: "API requests this follower forwarded to the leader.",
		}),
		badClient: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tempest_api_untrusted_client_headers_total",
			Help: "Forwarded-client headers that did not verify (the request was limited by its remote address).",
		}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tempest_api_event_streams", Help: "Job event streams open now.",
		}),
		opened: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tempest_api_event_streams_total", Help: "Job event streams opened.",
		}),
		unserved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tempest_api_conns_closed_without_request_total",
			Help: "Connections closed before a whole request arrived: slow clients cut by the header timeout, or clients that connected and left.",
		}),
		served: make(map[net.Conn]bool),
	}
	clients := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tempest_api_rate_limit_clients", Help: "Client IPs holding a rate-limit bucket.",
	}, func() float64 { return float64(limiterSize()) })
	return m, []prometheus.Collector{m.requests, m.duration, m.forwarded, m.badClient, m.streams, m.opened, m.unserved, clients}
}

// servedOn marks the connection of a request that reached a handler.
func (m *apiMetrics) servedOn(ctx context.Context) {
	c, ok := ctx.Value(connKey{}).(net.Conn)
	if !ok {
		return
	}
	m.mu.Lock()
	if _, open := m.served[c]; open {
		m.served[c] = true
	}
	m.mu.Unlock()
}

// connState is the server's ConnState hook; the map holds only open
// connections, so it is bounded by them.
func (m *apiMetrics) connState(c net.Conn, st http.ConnState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch st {
	case http.StateNew:
		m.served[c] = false
	case http.StateClosed, http.StateHijacked:
		if served, ok := m.served[c]; ok && !served {
			m.unserved.Inc()
		}
		delete(m.served, c)
	}
}

func (m *apiMetrics) request(method, route string, code int, took time.Duration) {
	switch method {
	case "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS":
	default:
		method = "other"
	}
	m.requests.WithLabelValues(method, route, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(method, route).Observe(took.Seconds())
}

func (m *apiMetrics) forward()         { m.forwarded.Inc() }
func (m *apiMetrics) badClientHeader() { m.badClient.Inc() }

func (m *apiMetrics) streamOpened() {
	m.streams.Inc()
	m.opened.Inc()
}

func (m *apiMetrics) streamClosed() { m.streams.Dec() }
