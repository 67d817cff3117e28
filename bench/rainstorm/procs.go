package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// userHZ is the unit of utime and stime in /proc/PID/stat: USER_HZ, which
// the kernel fixes at 100 for that interface whatever CONFIG_HZ is.
const userHZ = 100

// procCPU returns a process's user+system CPU time so far.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name is in parentheses and may hold spaces: fields are
	// counted after its closing one. utime, stime, cutime and cstime are
	// fields 14 to 17, so the 12th to 15th after the name. The children's
	// share is an exec stage's programs once the worker reaped them: the
	// pipeline's CPU includes them, as Miller's includes its own work.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 15 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var ticks int64
	for _, field := range f[11:15] {
		n, err := strconv.ParseInt(string(field), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: CPU field %q: %w", pid, field, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// rusageCPU is a finished child's user+system CPU time.
func rusageCPU(ru *syscall.Rusage) time.Duration {
	if ru == nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuSnap is the CPU time of named processes at one moment.
type cpuSnap map[string]time.Duration

func snapCPU(pids map[string]int) (cpuSnap, error) {
	s := cpuSnap{}
	for name, pid := range pids {
		d, err := procCPU(pid)
		if err != nil {
			return nil, fmt.Errorf("cpu of %s: %w", name, err)
		}
		s[name] = d
	}
	return s, nil
}

// since returns each process's CPU time from s0 to s.
func (s cpuSnap) since(s0 cpuSnap) map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, d := range s {
		out[name] = d - s0[name]
	}
	return out
}
