package worker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"tempest/wire"
)

// clockRetention is how long a manager's heartbeat version is remembered
// after it last moved; a manager silent for that long has left or restarted.
const clockRetention = 10 * time.Minute

// errUnsupported: this system has no /proc to sample; health then rests on
// the queue and Lifeguard alone.
var errUnsupported = errors.New("host metrics not supported on " + runtime.GOOS)

// CPUSample is a reading of the host's cumulative CPU time (in clock ticks):
// the busy share of the time between two readings is the CPU percentage.
type CPUSample struct {
	Busy, Total uint64
}

// ReadProcStat reads the host's CPU counters from /proc/stat.
func ReadProcStat() (CPUSample, error) {
	if runtime.GOOS != "linux" {
		return CPUSample{}, errUnsupported
	}
	f, err := os.Open("/proc/stat")
	if err != nil {
		return CPUSample{}, err
	}
	defer f.Close()
	return parseProcStat(f)
}

// ReadProcMeminfo returns the host's memory use in percent from
// /proc/meminfo: memory not available to new work (MemAvailable, the
// kernel's own estimate including reclaimable cache) over the total.
func ReadProcMeminfo() (float64, error) {
	if runtime.GOOS != "linux" {
		return 0, errUnsupported
	}
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseMeminfo(f)
}

// parseProcStat reads the aggregate "cpu" line: user nice system idle iowait
// irq softirq steal [guest guest_nice]. guest time is already counted in
// user, so only the first eight fields add up to the total; idle and iowait
// are the idle share.
func parseProcStat(r io.Reader) (CPUSample, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || fields[0] != "cpu" {
			continue
		}
		if len(fields) < 5 {
			return CPUSample{}, fmt.Errorf("/proc/stat: cpu line has %d fields", len(fields))
		}
		var total, idle uint64
		for i, f := range fields[1:min(len(fields), 9)] {
			v, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return CPUSample{}, fmt.Errorf("/proc/stat: cpu field %d: %w", i+1, err)
			}
			total += v
			if i == 3 || i == 4 { // idle, iowait
				idle += v
			}
		}
		return CPUSample{Busy: total - idle, Total: total}, nil
	}
	if err := sc.Err(); err != nil {
		return CPUSample{}, fmt.Errorf("/proc/stat: %w", err)
	}
	return CPUSample{}, errors.New("/proc/stat: no cpu line")
}

func parseMeminfo(r io.Reader) (float64, error) {
	vals := map[string]uint64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch key {
		case "MemTotal", "MemAvailable", "MemFree", "Buffers", "Cached":
			f := strings.Fields(rest)
			if len(f) == 0 {
				continue
			}
			v, err := strconv.ParseUint(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/meminfo: %s: %w", key, err)
			}
			vals[key] = v
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("/proc/meminfo: %w", err)
	}
	total := vals["MemTotal"]
	if total == 0 {
		return 0, errors.New("/proc/meminfo: no MemTotal")
	}
	avail, ok := vals["MemAvailable"]
	if !ok { // kernels before 3.14
		avail = vals["MemFree"] + vals["Buffers"] + vals["Cached"]
	}
	avail = min(avail, total)
	return 100 * float64(total-avail) / float64(total), nil
}

// cpuPercent turns two samples into the busy percentage between them.
func cpuPercent(prev, cur CPUSample) (float64, bool) {
	if cur.Total <= prev.Total || cur.Busy < prev.Busy {
		return 0, false
	}
	return 100 * float64(cur.Busy-prev.Busy) / float64(cur.Total-prev.Total), true
}

// pressure is one reading of everything health depends on.
type pressure struct {
	cpu, mem float64
	queue    int
	lhm      int
	lag      time.Duration
}

// classify maps a reading to the state it calls for, and why.
func (c Config) classify(p pressure) (wire.WorkerState, string) {
	switch {
	case c.CriticalMem > 0 && p.mem >= c.CriticalMem:
		return wire.WorkerDraining, fmt.Sprintf("memory %.0f%% ≥ %.0f%%", p.mem, c.CriticalMem)
	case c.CriticalCPU > 0 && p.cpu >= c.CriticalCPU:
		return wire.WorkerDraining, fmt.Sprintf("cpu %.0f%% ≥ %.0f%%", p.cpu, c.CriticalCPU)
	case c.CriticalLag > 0 && p.lag >= c.CriticalLag:
		return wire.WorkerDraining, fmt.Sprintf("scheduler lag %s ≥ %s", p.lag.Round(time.Millisecond), c.CriticalLag)
	case p.cpu >= c.DegradedCPU:
		return wire.WorkerDegraded, fmt.Sprintf("cpu %.0f%% ≥ %.0f%%", p.cpu, c.DegradedCPU)
	case p.mem >= c.DegradedMem:
		return wire.WorkerDegraded, fmt.Sprintf("memory %.0f%% ≥ %.0f%%", p.mem, c.DegradedMem)
	case c.QueueSoftLimit > 0 && p.queue >= c.QueueSoftLimit:
		return wire.WorkerDegraded, fmt.Sprintf("queue %d at soft limit %d", p.queue, c.QueueSoftLimit)
	case c.DegradedLHM > 0 && p.lhm >= c.DegradedLHM:
		return wire.WorkerDegraded, fmt.Sprintf("local health score %d ≥ %d", p.lhm, c.DegradedLHM)
	case c.DegradedLag > 0 && p.lag >= c.DegradedLag:
		return wire.WorkerDegraded, fmt.Sprintf("scheduler lag %s ≥ %s", p.lag.Round(time.Millisecond), c.DegradedLag)
	}
	return wire.WorkerHealthy, ""
}

// healthMachine debounces classifications: the state moves only when the
// same new verdict comes in `need` samples in a row, so one busy second (a
// GC, a compile next door) does not flap a worker between states and send
// managers chasing it.
type healthMachine struct {
	state  wire.WorkerState
	reason string
	cand   wire.WorkerState
	count  int
	need   int
}

func newHealthMachine(need int) healthMachine {
	return healthMachine{state: wire.WorkerHealthy, need: need}
}

// observe feeds one verdict and reports whether the state changed.
func (m *healthMachine) observe(s wire.WorkerState, reason string) bool {
	if s == m.state {
		m.reason, m.cand, m.count = reason, "", 0
		return false
	}
	if s != m.cand {
		m.cand, m.count = s, 0
	}
	m.count++
	if m.count < m.need {
		return false
	}
	m.state, m.reason, m.cand, m.count = s, reason, "", 0
	return true
}

// monitorLoop samples host health every HealthInterval and does the
// periodic housekeeping (fence and heartbeat-clock expiry).
func (w *Worker) monitorLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.HealthInterval)
	defer t.Stop()
	var prev CPUSample
	var havePrev, warned bool
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var p pressure
		var errs []error
		cur, err := w.deps.CPU()
		if err != nil {
			errs = append(errs, err)
		} else {
			if pct, ok := cpuPercent(prev, cur); ok && havePrev {
				p.cpu = pct
			}
			prev, havePrev = cur, true
		}
		if p.mem, err = w.deps.Memory(); err != nil {
			errs = append(errs, err)
		}
		if len(errs) > 0 && !warned {
			w.log.Warn("host metrics unavailable; health uses the queue and SWIM only", "err", errors.Join(errs...))
			warned = true
		}
		w.mu.Lock()
		members := w.members
		w.mu.Unlock()
		if members != nil {
			p.lhm = members.LocalHealth()
		}
		p.lag = w.lag.Lag()
		w.sampleHealth(p)
		w.mu.Lock()
		w.fences.Sweep(w.now())
		w.mu.Unlock()
		w.managerClock.CleanupOlderThan(clockRetention)
	}
}

// sampleHealth applies one reading.
func (w *Worker) sampleHealth(p pressure) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p.queue = len(w.execs)
	from := w.health.state
	if w.health.observe(w.cfg.classify(p)) {
		w.log.Info("health changed", "from", from, "to", w.health.state, "reason", w.health.reason,
			"cpu_percent", p.cpu, "memory_percent", p.mem, "queue", p.queue, "lhm", p.lhm)
	}
	w.cpuPct, w.memPct = p.cpu, p.mem
	w.bumpLocked()
}
