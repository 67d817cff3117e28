package worker

import (
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
)

func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    CPUSample
		wantErr bool
	}{
		{"modern kernel", "cpu  100 5 50 800 20 3 2 10 7 0\ncpu0 50 2 25 400 10 1 1 5 3 0\nintr 1 2 3\n",
			CPUSample{Busy: 100 + 5 + 50 + 3 + 2 + 10, Total: 100 + 5 + 50 + 800 + 20 + 3 + 2 + 10}, false},
		{"old kernel, four fields", "cpu 10 0 10 80\n", CPUSample{Busy: 20, Total: 100}, false},
		{"no cpu line", "intr 1 2\n", CPUSample{}, true},
		{"garbage number", "cpu 1 x 3 4 5\n", CPUSample{}, true},
		{"too short", "cpu 1 2\n", CPUSample{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStat(strings.NewReader(tc.in))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("parseProcStat = %+v, %v; want %+v, err %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestParseMeminfo(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    float64
		wantErr bool
	}{
		{"MemAvailable", "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    250 kB\nCached: 10 kB\n", 75, false},
		{"old kernel", "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 50 kB\nCached: 350 kB\n", 50, false},
		{"available above total", "MemTotal: 100 kB\nMemAvailable: 200 kB\n", 0, false},
		{"no total", "MemFree: 1 kB\n", 0, true},
		{"garbage", "MemTotal: lots kB\n", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMeminfo(strings.NewReader(tc.in))
			if (err != nil) != tc.wantErr || math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("parseMeminfo = %v, %v; want %v, err %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestReadProcOnThisHost(t *testing.T) {
	a, err := ReadProcStat()
	if err != nil {
		t.Skipf("no /proc/stat here: %v", err)
	}
	if a.Total == 0 || a.Busy > a.Total {
		t.Fatalf("implausible cpu sample %+v", a)
	}
	m, err := ReadProcMeminfo()
	if err != nil || m <= 0 || m > 100 {
		t.Fatalf("memory %v%%, %v", m, err)
	}
}

func TestCPUPercent(t *testing.T) {
	for _, tc := range []struct {
		prev, cur CPUSample
		want      float64
		ok        bool
	}{
		{CPUSample{10, 100}, CPUSample{60, 200}, 50, true},
		{CPUSample{10, 100}, CPUSample{10, 100}, 0, false}, // no time passed
		{CPUSample{50, 100}, CPUSample{40, 200}, 0, false}, // counter reset
	} {
		if got, ok := cpuPercent(tc.prev, tc.cur); got != tc.want || ok != tc.ok {
			t.Errorf("cpuPercent(%v, %v) = %v, %v; want %v, %v", tc.prev, tc.cur, got, ok, tc.want, tc.ok)
		}
	}
}

func TestClassify(t *testing.T) {
	c := DefaultConfig()
	c.QueueSoftLimit = 8
	for _, tc := range []struct {
		p      pressure
		want   wire.WorkerState
		reason string
	}{
		{pressure{}, wire.WorkerHealthy, ""},
		{pressure{cpu: 79.9, mem: 84.9, queue: 7, lhm: 3}, wire.WorkerHealthy, ""},
		{pressure{cpu: 80}, wire.WorkerDegraded, "cpu"},
		{pressure{mem: 85}, wire.WorkerDegraded, "memory"},
		{pressure{queue: 8}, wire.WorkerDegraded, "queue"},
		{pressure{lhm: 4}, wire.WorkerDegraded, "local health"},
		{pressure{mem: 95}, wire.WorkerDraining, "memory"},
		{pressure{cpu: 100}, wire.WorkerDegraded, "cpu"}, // CriticalCPU is off by default
		{pressure{lag: 900 * time.Millisecond}, wire.WorkerHealthy, ""},
		{pressure{lag: 1500 * time.Millisecond}, wire.WorkerDegraded, "scheduler lag"},
		{pressure{lag: 6 * time.Second, cpu: 85}, wire.WorkerDraining, "scheduler lag"},
	} {
		got, reason := c.classify(tc.p)
		if got != tc.want || !strings.Contains(reason, tc.reason) {
			t.Errorf("classify(%+v) = %s %q; want %s mentioning %q", tc.p, got, reason, tc.want, tc.reason)
		}
	}
	c.CriticalCPU = 95
	if got, _ := c.classify(pressure{cpu: 96}); got != wire.WorkerDraining {
		t.Errorf("with CriticalCPU 95, cpu 96%% is %s", got)
	}
}

func TestHealthMachineDebounces(t *testing.T) {
	const H, D, X = wire.WorkerHealthy, wire.WorkerDegraded, wire.WorkerDraining
	for _, tc := range []struct {
		need   int
		inputs []wire.WorkerState
		states []wire.WorkerState // state after each input
	}{
		{1, []wire.WorkerState{D, H, X}, []wire.WorkerState{D, H, X}},
		{3, []wire.WorkerState{D, D, D, H}, []wire.WorkerState{H, H, D, D}},
		{3, []wire.WorkerState{D, D, H, D, D, D}, []wire.WorkerState{H, H, H, H, H, D}}, // a healthy sample resets
		{2, []wire.WorkerState{D, X, X}, []wire.WorkerState{H, H, X}},                   // a different verdict restarts the count
	} {
		m := newHealthMachine(tc.need)
		for i, in := range tc.inputs {
			m.observe(in, "")
			if m.state != tc.states[i] {
				t.Errorf("need %d, inputs %v: after #%d state %s, want %s", tc.need, tc.inputs, i, m.state, tc.states[i])
				break
			}
		}
	}
}

// Critical memory pressure makes the worker refuse work until it passes.
func TestCriticalPressureRefusesWork(t *testing.T) {
	var mem atomic.Uint64
	mem.Store(math.Float64bits(97))
	h := startHarness(t, harnessOption{memory: func() (float64, error) { return math.Float64frombits(mem.Load()), nil }})
	testutil.Eventually(t, waitFor, pollStep, func() error {
		if s := h.w.Heartbeat(); s.State != wire.WorkerDraining || s.MemoryPercent != 97 {
			return fmt.Errorf("heartbeat %s, memory %v%%", s.State, s.MemoryPercent)
		}
		return nil
	})
	ack, err := h.m.dispatch(t, "w1", dispatchOf("j", "wf", sleepSpec(t, time.Millisecond, 1), 1))
	if err != nil || ack.Accepted || !strings.Contains(ack.Error, "critical pressure (memory 97%") {
		t.Fatalf("dispatch under pressure: %+v, %v", ack, err)
	}

	mem.Store(math.Float64bits(86))
	testutil.Eventually(t, waitFor, pollStep, func() error {
		if s := h.w.Heartbeat().State; s != wire.WorkerDegraded {
			return fmt.Errorf("state %s", s)
		}
		return nil
	})
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", sleepSpec(t, time.Millisecond, 1), 1)) // DEGRADED still takes work
}
