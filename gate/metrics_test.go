package gate

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"tempest/internal/obs"
	"tempest/internal/obs/obstest"
	"tempest/internal/testutil"
	"tempest/transport"
)

// The gate's series join the node's registry beside the runtime's: the
// leader says so, the output passes promtool, and registering a second
// time is refused (a registry checks names once, at registration).
func TestGateMetrics(t *testing.T) {
	hub := transport.NewHub()
	ids := []string{"g1", "g2", "g3"}
	hg := startHubGates(t, hub, ids, time.Minute)
	lead := hg.leader(10*time.Second, ids...)
	reg := obs.NewRegistry()
	if err := lead.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	var text string
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		text = string(obstest.Text(t, reg))
		for _, want := range []string{"tempest_gate_is_leader 1\n", "tempest_gate_ready 1\n", "tempest_gate_term ", "tempest_gate_active_leases 0\n", "go_goroutines "} {
			if !strings.Contains(text, want) {
				return fmt.Errorf("gate metrics lack %q:\n%s", want, text)
			}
		}
		return nil
	})
	if err := lead.RegisterMetrics(reg); err == nil {
		t.Error("registering the gate's metrics twice succeeded")
	}
	obstest.Promtool(t, []byte(text))
}
