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
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// Registry is a node's metrics, in two parts: the node's own series, whose
// cost is the same at every scrape, and the live jobs' series, whose cost
// grows with the jobs running (a latency histogram per job, workflow and
// step: megabytes of text with a few hundred jobs). Keeping the two apart
// lets a scrape that names only node families (name[]) skip building the
// job series, not just their encoding. Register adds to the node's part;
// Role.Register puts the live job series in the other; Gather reads both.
type Registry struct {
	prometheus.Gatherers // both parts: the Gatherer a scrape of everything reads
	node, jobs           *prometheus.Registry
}

// NewRegistry returns a node's registry holding the Go runtime and process
// collectors. Each node (and each in-process test node) has its own, so two
// roles in one process never collide on a name.
func NewRegistry() *Registry {
	node := prometheus.NewRegistry()
	node.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	jobs := prometheus.NewRegistry()
	return &Registry{Gatherers: prometheus.Gatherers{node, jobs}, node: node, jobs: jobs}
}

// Register implements prometheus.Registerer, in the node's part.
func (r *Registry) Register(c prometheus.Collector) error { return r.node.Register(c) }

// MustRegister implements prometheus.Registerer, in the node's part.
func (r *Registry) MustRegister(cs ...prometheus.Collector) { r.node.MustRegister(cs...) }

// Unregister implements prometheus.Registerer, in the node's part.
func (r *Registry) Unregister(c prometheus.Collector) bool { return r.node.Unregister(c) }

// jobsRegisterer is where the live job series of a role registering in
// reg go: a Registry's job part, or reg itself.
func jobsRegisterer(reg prometheus.Registerer) prometheus.Registerer {
	if r, ok := reg.(*Registry); ok {
		return r.jobs
	}
	return reg
}

// JobFamilyPrefix starts the name of every live job family, which a
// scrape's name[] filter must name for the job series to be built.
const JobFamilyPrefix = "tempest_job_"

// JobLabels are the labels whose values name a job or a workflow: what a
// client chose and may not want every scraper of a node to read.
var JobLabels = []string{"job_id", "workflow", "workflow_id"}

// ServeJobSeries says whether /metrics serves the series labelled with job ids
// and workflow names: always when a token guards it (whoever holds the
// token may read them), else only when the operator opted in
// (metrics_job_series).
func ServeJobSeries(token string, optIn bool) bool { return token != "" || optIn }

// withoutJobs gathers g's series less every one labelled with a JobLabels
// label; a family left with none is left out.
type withoutJobs struct{ g prometheus.Gatherer }

func (w withoutJobs) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := w.g.Gather()
	out := mfs[:0]
	for _, mf := range mfs {
		kept := mf.Metric[:0]
		for _, m := range mf.Metric {
			if !namesJob(m) {
				kept = append(kept, m)
			}
		}
		if mf.Metric = kept; len(kept) > 0 {
			out = append(out, mf)
		}
	}
	return out, err
}

func namesJob(m *dto.Metric) bool {
	for _, l := range m.GetLabel() {
		if slices.Contains(JobLabels, l.GetName()) {
			return true
		}
	}
	return false
}

// Handler serves g's metrics in whatever exposition format the scraper
// asks for (text 0.0.4 when it does not say; protobuf, which carries native
// histograms, when Prometheus asks for it). A scrape may name the families
// it wants with name[] parameters; from a Registry, a scrape naming no job
// family (JobFamilyPrefix) gathers the node's part alone. A non-empty token
// is the bearer token a scrape must carry. jobs false leaves out every
// series labelled with a job id or workflow name (JobLabels), the live job
// part of a Registry whole (ServeJobSeries decides).
func Handler(g prometheus.Gatherer, token string, jobs bool) http.Handler {
	opts := promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}
	if !jobs {
		if r, ok := g.(*Registry); ok {
			g = r.node
		}
		g = withoutJobs{g}
	}
	h := promhttp.HandlerFor(g, opts)
	if r, ok := g.(*Registry); ok {
		all, node := h, promhttp.HandlerFor(r.node, opts)
		h = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if wantsJobs(req) {
				all.ServeHTTP(w, req)
			} else {
				node.ServeHTTP(w, req)
			}
		})
	}
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

// wantsJobs reports whether a scrape may show job families: it names no
// family, or names one of them.
func wantsJobs(r *http.Request) bool {
	names := r.URL.Query()["name[]"]
	if len(names) == 0 {
		return true
	}
	for _, n := range names {
		if strings.HasPrefix(n, JobFamilyPrefix) {
			return true
		}
	}
	return false
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
