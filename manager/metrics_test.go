package manager

import (
	"testing"
	"time"

	"tempest/internal/obs/obstest"
)

// The manager's series join the node's registry beside the runtime's: the
// leader and its workers show, the output passes promtool, and registering
// a second time is refused.
func TestManagerMetrics(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	c.addWorker("w1", 2)
	l := c.leader()
	obstest.Registered(t, "manager", 10*time.Second, l.RegisterMetrics,
		"tempest_manager_is_leader 1\n", `tempest_manager_workers{state="HEALTHY"} 1`+"\n",
		"tempest_manager_available_cores 2\n", "process_cpu_seconds_total ")
}
