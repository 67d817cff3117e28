package nodecmd

import (
	"log/slog"
	"math"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"tempest/internal/nodeconfig"
)

// DefaultMemoryRatio is the share of the cgroup's (or the host's) memory a
// node's Go runtime aims to stay under when the config sets no
// memory_limit: room is left for what the runtime does not count (thread
// stacks, the exec programs of a worker) before the kernel's OOM killer.
const DefaultMemoryRatio = 0.8

// LimitMemory sets the Go runtime's soft memory limit (GOMEMLIMIT) of the
// process: configured (memory_limit), or DefaultMemoryRatio of the
// cgroup's memory.max, or of the machine's memory when no cgroup limits
// it. A GOMEMLIMIT environment variable wins (the runtime read it at
// start). Under the limit the collector works harder instead of letting
// the heap grow past it, so a burst of work slows a node down rather than
// getting it killed. It returns the limit in force.
func LimitMemory(configured nodeconfig.Bytes, getenv func(string) string, log *slog.Logger) int64 {
	if v := getenv("GOMEMLIMIT"); v != "" {
		log.Info("memory limit from GOMEMLIMIT", "GOMEMLIMIT", v)
		return debug.SetMemoryLimit(-1)
	}
	if configured > 0 {
		debug.SetMemoryLimit(int64(configured))
		log.Info("memory limit", "limit", configured.String(), "from", "memory_limit")
		return int64(configured)
	}
	limit, err := memlimit.Set(memlimit.WithProvider(memlimit.ApplyFallback(memlimit.FromCgroup, memlimit.FromSystem)),
		memlimit.WithRatio(DefaultMemoryRatio), memlimit.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Warn("no memory limit set: the host's memory could not be read", "err", err)
		return limit
	}
	if limit == math.MaxInt64 {
		log.Info("no memory limit: neither the config nor the host sets one")
		return limit
	}
	log.Info("memory limit", "limit", nodeconfig.Bytes(limit).String(), "from", "host memory")
	return limit
}
