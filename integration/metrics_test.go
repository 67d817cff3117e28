package integration

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"tempest/internal/devcluster"
	"tempest/internal/obs/obstest"
	"tempest/internal/target"
	"tempest/internal/testutil"
)

// Every role's /metrics, scraped from real processes while an HTTP job and
// a RainStorm pipeline run: it passes promtool (when installed), it carries
// the live latency histograms and the worker's load-generator series, and
// every query of the Grafana dashboard in configs/ names a metric some role
// exports.
func TestMetricsEveryRole(t *testing.T) {
	c := startWith(t, devcluster.Options{Gates: 1, Datacenters: 1, Managers: 1, Workers: 1,
		CoresPerWorker: 4, LeaseTTL: 5 * time.Second})
	tgt := startTarget(t, target.DefaultConfig())
	c.submit(gatedJob("scraped", "http://"+tgt.Addr(), 2, "60s", 1))
	c.submit(`name: streamed
timeout: 120s
workflows:
  - name: stream
    type: rainstorm
    source: {generate: {records: 1000000, rate: 2000, keys: 17}}
    stages:
      - {name: count, op: count, tasks: 1, key: key}
`)

	urls := map[string]string{}
	for _, n := range c.Nodes() {
		switch n.Role {
		case "gate", "manager":
			urls[n.Role] = "http://" + n.API + "/metrics"
		case "worker":
			urls[n.Role] = "http://" + n.Metrics + "/metrics"
		}
	}
	// What each role must show while the jobs run: the live histograms,
	// the load generator's series and the runtime's.
	want := map[string][]string{
		"gate":    {"tempest_gate_is_leader", "tempest_job_step_latency_seconds_bucket", "tempest_api_requests_total", "go_goroutines", "process_cpu_seconds_total"},
		"manager": {"tempest_manager_is_leader", "tempest_job_step_latency_seconds_bucket", "tempest_job_p99_seconds", "tempest_transport_messages_in_total", "process_resident_memory_bytes"},
		"worker": {"tempest_worker_step_latency_seconds_bucket", "tempest_worker_open_connections", "tempest_worker_dropped_iterations_total",
			"tempest_worker_rainstorm_tuples_in_total", "tempest_worker_rainstorm_tuples_out_total", "tempest_transport_messages_out_total", "process_cpu_seconds_total"},
	}
	texts := map[string][]byte{}
	testutil.Eventually(t, 90*time.Second, 250*time.Millisecond, func() error {
		for role, url := range urls {
			text, err := get(url)
			if err != nil {
				return err
			}
			names, err := obstest.ExposedNames(text)
			if err != nil {
				return fmt.Errorf("%s: %w", role, err)
			}
			for _, n := range want[role] {
				if !names[n] {
					return fmt.Errorf("%s /metrics has no %s yet", role, n)
				}
			}
			texts[role] = text
		}
		return nil
	})
	if !strings.Contains(string(texts["worker"]), "tempest_worker_rainstorm_tuples_in_total{") ||
		strings.Contains(string(texts["worker"]), "tempest_worker_open_connections 0\n") {
		t.Errorf("worker shows no tuples or no open connections while both jobs run:\n%s", texts["worker"])
	}

	exported := map[string]bool{}
	for _, text := range texts {
		names, _ := obstest.ExposedNames(text)
		for n := range names {
			exported[n] = true
		}
	}
	exprs, err := obstest.DashboardQueries(filepath.Join("..", "configs", "grafana", "tempest.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range exprs {
		for _, n := range obstest.QueryMetrics(e) {
			if !exported[n] {
				t.Errorf("dashboard query %q names %s, which no role exports", e, n)
			}
		}
	}

	roles := slices.Sorted(func(yield func(string) bool) {
		for r := range texts {
			if !yield(r) {
				return
			}
		}
	})
	for _, role := range roles {
		t.Run("promtool/"+role, func(t *testing.T) { obstest.Promtool(t, texts[role]) })
	}
}

func get(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}
