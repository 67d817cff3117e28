package gate

import (
	"testing"
	"time"

	"tempest/internal/obs/obstest"
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
	obstest.Registered(t, "gate", 10*time.Second, lead.RegisterMetrics,
		"tempest_gate_is_leader 1\n", "tempest_gate_ready 1\n", "tempest_gate_term ", "tempest_gate_active_leases 0\n", "go_goroutines ")
}
