package main

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"tempest/bench/internal/stats"
)

// dist and summarize are the shared benchmark summaries.
type dist = stats.Dist

func summarize(xs []time.Duration) dist { return stats.Summarize(xs) }

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// msf formats a duration as milliseconds with one decimal.
func msf(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64)
}

// usf formats a duration as microseconds.
func usf(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 0, 64)
}

// loadAvg returns the 1-minute load average, or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// hostCPU is the host's busy, stolen and total jiffies from /proc/stat.
// Busy is user+nice+system+irq+softirq; steal is time the hypervisor gave
// this VM's vCPUs to others while they had work, which is how other tenants
// of a shared machine show up.
type hostCPU struct{ busy, steal, total uint64 }

func readHostCPU() hostCPU {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return hostCPU{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var h hostCPU
	// user nice system idle iowait irq softirq steal [guest guest_nice,
	// already counted in user and nice].
	for i, v := range f[1:min(len(f), 9)] {
		n, _ := strconv.ParseUint(v, 10, 64)
		h.total += n
		switch i {
		case 3, 4: // idle, iowait
		case 7:
			h.steal += n
		default:
			h.busy += n
		}
	}
	return h
}

// busyPct is the share of host CPU that was busy between a and b, and the
// share stolen.
func busyPct(a, b hostCPU) (busy, steal float64) {
	if b.total <= a.total {
		return math.NaN(), math.NaN()
	}
	d := float64(b.total - a.total)
	return 100 * float64(b.busy-a.busy) / d, 100 * float64(b.steal-a.steal) / d
}

// clkTck is USER_HZ; Linux has used 100 on every architecture Go supports
// for decades, and /proc reports in it.
const clkTck = 100

// procCPU returns a process's user+system CPU time so far, or 0 when it
// cannot be read (the process ended).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces; fields restart after its ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clkTck
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty list")
	}
	return out, nil
}
