package manager

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"tempest/internal/obs"
	"tempest/internal/obs/obstest"
	"tempest/internal/testutil"
)

// The manager's series join the node's registry beside the runtime's: the
// leader and its workers show, the output passes promtool, and registering
// a second time is refused.
func TestManagerMetrics(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	c.addWorker("w1", 2)
	l := c.leader()
	reg := obs.NewRegistry()
	if err := l.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	var text string
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		text = string(obstest.Text(t, reg))
		for _, want := range []string{"tempest_manager_is_leader 1\n", `tempest_manager_workers{state="HEALTHY"} 1` + "\n",
			"tempest_manager_available_cores 2\n", "process_cpu_seconds_total "} {
			if !strings.Contains(text, want) {
				return fmt.Errorf("manager metrics lack %q:\n%s", want, text)
			}
		}
		return nil
	})
	if err := l.RegisterMetrics(reg); err == nil {
		t.Error("registering the manager's metrics twice succeeded")
	}
	obstest.Promtool(t, []byte(text))
}
