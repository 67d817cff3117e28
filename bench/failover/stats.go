package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"tempest/bench/internal/stats"
)

// dist and summarize are the shared benchmark summaries.
type dist = stats.Dist

func summarize(xs []time.Duration) dist { return stats.Summarize(xs) }

// ms formats a duration as milliseconds for the tables.
func ms(d time.Duration) string {
	return strconv.FormatInt(d.Round(time.Millisecond).Milliseconds(), 10)
}

// loadAvg returns the 1, 5 and 15 minute load averages as printed by the
// kernel, or an explanation if they cannot be read.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return fmt.Sprintf("unknown (%v)", err)
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// cpuSample is the host's aggregate CPU time from /proc/stat, in ticks.
type cpuSample struct {
	busy, total uint64
	ok          bool
}

func readCPU() cpuSample {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuSample{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return cpuSample{}
	}
	var s cpuSample
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return cpuSample{}
		}
		// guest and guest_nice (fields 9 and 10) are already counted in
		// user and nice.
		if i >= 8 {
			break
		}
		s.total += n
		if i != 3 && i != 4 { // idle, iowait
			s.busy += n
		}
	}
	s.ok = true
	return s
}

// busyPercent is the share of all CPUs' time spent busy between a and b.
func busyPercent(a, b cpuSample) float64 {
	if !a.ok || !b.ok || b.total <= a.total {
		return math.NaN()
	}
	return 100 * float64(b.busy-a.busy) / float64(b.total-a.total)
}
