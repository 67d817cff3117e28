// Package obs is what every role shares to expose its metrics through the
// Prometheus client library: a per-node registry with the Go runtime and
// process collectors, the transport's counters, live job series with
// latency histograms built from the merged HDR histograms, and the /metrics
// handler with its optional bearer token. Nothing here is global: each node
// builds its own registry and passes it to whoever registers into it.
package obs

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry returns a node's registry holding the Go runtime and process
// collectors. Each node (and each in-process test node) has its own, so two
// roles in one process never collide on a name.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// Handler serves g's metrics in whatever exposition format the scraper
// asks for (text 0.0.4 when it does not say; protobuf, which carries native
// histograms, when Prometheus asks for it). A non-empty token is the bearer
// token a scrape must carry: /metrics names running jobs.
func Handler(g prometheus.Gatherer, token string) http.Handler {
	h := promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	if token == "" {
		return h
	}
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !BearerMatches(r, want) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tempest metrics"`)
			http.Error(w, "/metrics needs the metrics token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// BearerMatches reports whether r carries the bearer token whose SHA-256 is
// want, comparing in constant time.
func BearerMatches(r *http.Request, want [sha256.Size]byte) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	sum := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(sum[:], want[:]) == 1
}

// Collector adapts a role's collect function to prometheus.Collector. The
// descriptions are fixed when it is built, so a registry checks the role's
// names and labels once, at registration, and a scrape cannot produce a
// series the role did not declare.
type Collector struct {
	descs   []*prometheus.Desc
	collect func(ch chan<- prometheus.Metric)
}

// NewCollector declares descs and collects with fn.
func NewCollector(fn func(ch chan<- prometheus.Metric), descs ...*prometheus.Desc) *Collector {
	return &Collector{descs: descs, collect: fn}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

// Gauge sends one gauge sample.
func Gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

// Counter sends one counter sample.
func Counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

// Bool is 1 for true, 0 for false: how the gauges say yes and no.
func Bool(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Register registers every collector in reg, naming the first that fails.
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	return nil
}
