package worker

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"tempest/internal/obs"
	"tempest/transport"
	"tempest/wire"
)

// RegisterMetrics registers the worker's series in the node's registry
// (served by the worker binary's optional metrics listener): the load it
// generates (iterations, dropped iterations and step latency histograms of
// each running workflow, TCP connections the process holds open), its cores
// and host load, RainStorm tuple counts per task, and the transport's
// counters. The CPU the load generator burns is the process collector's
// process_cpu_seconds_total: the worker process is the load generator.
// Every value is read at scrape time.
func (w *Worker) RegisterMetrics(reg prometheus.Registerer) error {
	wf := []string{"job_id", "workflow", "workflow_id"}
	running := prometheus.NewDesc("tempest_worker_workflows_running", "Workflows running on this worker (a RainStorm task is one).", nil, nil)
	cores := prometheus.NewDesc("tempest_worker_cores", "Cores this worker offers, by whether a workflow holds them.", []string{"state"}, nil)
	cpu := prometheus.NewDesc("tempest_worker_host_cpu_percent", "Host CPU use as the health monitor last sampled it (percent).", nil, nil)
	mem := prometheus.NewDesc("tempest_worker_host_memory_percent", "Host memory use as the health monitor last sampled it (percent).", nil, nil)
	conns := prometheus.NewDesc("tempest_worker_open_connections", "TCP connections this worker process holds established: the load generator's http1 and h2 connections (h3 runs over QUIC and is not counted).", nil, nil)
	iters := prometheus.NewDesc("tempest_worker_iterations_total", "Iterations of a running workflow on this worker, by result.", append(wf, "result"), nil)
	dropped := prometheus.NewDesc("tempest_worker_dropped_iterations_total", "Open-model iterations of a running workflow that fell due with every VU busy and never ran.", wf, nil)
	latency := prometheus.NewDesc("tempest_worker_step_latency_seconds", "Response latency of a running workflow's steps on this worker (send to last body byte).", append(wf, "step"), nil)
	task := []string{"job_id", "workflow", "stage", "task"}
	rsIn := prometheus.NewDesc("tempest_worker_rainstorm_tuples_in_total", "Tuples a RainStorm task took in: input records a source read, records of the batches a stage processed (since its first checkpoint; resends and redone work not counted again).", task, nil)
	rsOut := prometheus.NewDesc("tempest_worker_rainstorm_tuples_out_total", "Tuples a RainStorm task put out: records a source sent (after its chained stages and combiner), records a stage emitted in batches or as output rows.", task, nil)
	refused := prometheus.NewDesc("tempest_worker_unauthorized_total", "RainStorm batches and acks refused for their sender: the pipeline's routes show another node hosting the task that sent them.", []string{"type"}, nil)
	bounds := obs.LatencyBuckets()

	own := obs.NewCollector(func(ch chan<- prometheus.Metric) {
		type live struct {
			job, wf, id string
			p           wire.WorkflowProgress
		}
		var runs []live
		w.mu.Lock()
		for _, e := range w.execs {
			if !e.finished {
				runs = append(runs, live{e.jobID, e.name, e.workflowID, e.latest})
			}
		}
		total, free := w.cores.Total(), w.cores.Available()
		cpuPct, memPct := w.cpuPct, w.memPct
		w.mu.Unlock()

		obs.Gauge(ch, running, float64(len(runs)))
		obs.Gauge(ch, cores, float64(total-free), "used")
		obs.Gauge(ch, cores, float64(free), "free")
		obs.Gauge(ch, cpu, cpuPct)
		obs.Gauge(ch, mem, memPct)
		if n, err := establishedTCP(); err == nil {
			obs.Gauge(ch, conns, float64(n))
		}
		for _, r := range runs {
			obs.Counter(ch, iters, float64(r.p.CompletedCount), r.job, r.wf, r.id, "completed")
			obs.Counter(ch, iters, float64(r.p.FailedCount), r.job, r.wf, r.id, "failed")
			obs.Counter(ch, dropped, float64(r.p.DroppedIterations), r.job, r.wf, r.id)
			for _, s := range obs.StepLatencies(r.wf, r.p.StepStats) {
				ch <- obs.Histogram(latency, bounds, s.Latency, r.job, r.wf, r.id, s.Step)
			}
		}
		w.rs.each(func(t *rsTask) {
			labels := []string{t.key.job, t.key.wf, strconv.Itoa(t.key.stage), strconv.Itoa(t.key.index)}
			obs.Counter(ch, rsIn, float64(t.records.Load()), labels...)
			obs.Counter(ch, rsOut, float64(t.emitted.Load()), labels...)
		})
		for t, n := range w.refused.Snapshot() {
			obs.Counter(ch, refused, float64(n), t.String())
		}
	}, running, cores, cpu, mem, conns, iters, dropped, latency, rsIn, rsOut, refused)
	return obs.Register(reg, own, obs.NewTransportCollector(func() transport.Transport {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.tr
	}))
}
