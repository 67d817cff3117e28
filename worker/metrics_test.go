package worker

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"tempest/internal/obs"
	"tempest/internal/obs/obstest"
	"tempest/internal/testutil"
	"tempest/wire"
	"tempest/workflow"
)

// A running workflow's load shows on the worker's /metrics: its
// iterations, dropped iterations and step latency histogram, with the
// worker's cores and the runtime's series; the output passes promtool.
func TestWorkerMetrics(t *testing.T) {
	busy := funcType{name: "busy", fn: func(ctx context.Context, env workflow.Env) (workflow.Result, error) {
		h := workflow.NewHistogram()
		h.Record(3 * time.Millisecond)
		h.Record(40 * time.Millisecond)
		snap := workflow.Snapshot{Completed: 7, Failed: 1, DroppedIterations: 4, Elapsed: time.Second,
			Steps: []workflow.StepSnapshot{{Name: "root", Completed: 7, Failed: 1, Latency: h}}}
		env.Report(snap)
		<-ctx.Done()
		return workflow.Result{Snapshot: snap}, ctx.Err()
	}}
	h := startHarness(t, harnessOption{registry: registryWith(t, busy)})
	h.waitRegistered(t, h.m)
	reg := obs.NewRegistry()
	if err := h.w.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	h.m.mustStart(t, "w1", dispatchOf("j1", "wf1", wire.WorkflowSpec{Name: "load", Type: "busy", Cores: 2}, 1))

	var text string
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		text = string(obstest.Text(t, reg))
		for _, want := range []string{
			`tempest_worker_iterations_total{job_id="j1",result="completed",workflow="load",workflow_id="wf1"} 7`,
			`tempest_worker_iterations_total{job_id="j1",result="failed",workflow="load",workflow_id="wf1"} 1`,
			`tempest_worker_dropped_iterations_total{job_id="j1",workflow="load",workflow_id="wf1"} 4`,
			`tempest_worker_step_latency_seconds_bucket{job_id="j1",step="root",workflow="load",workflow_id="wf1",le="0.005"} 1`,
			`tempest_worker_step_latency_seconds_count{job_id="j1",step="root",workflow="load",workflow_id="wf1"} 2`,
			`tempest_worker_cores{state="used"} 2`,
			"tempest_worker_workflows_running 1",
			"go_goroutines ",
		} {
			if !strings.Contains(text, want+"\n") && !strings.Contains(text, want) {
				return fmt.Errorf("no %q yet in:\n%s", want, text)
			}
		}
		return nil
	})
	obstest.Promtool(t, []byte(text))
}

// establishedTCP counts this process's established TCP connections: both
// ends of a loopback connection count, and closing them takes them away.
func TestEstablishedTCP(t *testing.T) {
	before, err := establishedTCP()
	if err != nil {
		t.Skipf("no /proc connection tables here: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	// Other tests' connections may come and go in the same process, so the
	// counts are compared with what this test added, not exactly.
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		n, err := establishedTCP()
		if err != nil || n < before+2 {
			return fmt.Errorf("%d established (%v), want at least %d", n, err, before+2)
		}
		return nil
	})
	c.Close()
	s.Close()
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		n, err := establishedTCP()
		if err != nil || n > before {
			return fmt.Errorf("%d established (%v) after close, want at most %d", n, err, before)
		}
		return nil
	})
}
