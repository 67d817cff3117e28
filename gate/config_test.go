package gate

import (
	"strings"
	"testing"
	"time"

	"tempest/swim"
)

// The gate's config is checked by the same rules as the manager's for the
// fields they share, so a gate refuses what a manager refuses: a host name
// where memberlist binds an IP, a seed or an API address without a numeric
// port, an API URL that is not http(s).
func TestConfigValidate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ID = "g1"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("default config with an id: %v", err)
	}
	// Datacenters default to fastlan; the gates' cluster spans them and
	// keeps lan, which rides out seconds of silence.
	if cfg.SwimProfile != swim.ProfileLAN {
		t.Fatalf("default gate swim profile %q, want lan", cfg.SwimProfile)
	}
	cfg.ID = "g 1"
	cfg.SwimBind = "localhost:7302"
	cfg.Join = []string{"10.0.0.22:7302", "10.0.0.23"}
	cfg.APIListen = "127.0.0.1:http"
	cfg.APIAdvertise = "ftp://x"
	cfg.QuorumTimeout = 0
	cfg.LeaseTTL = 100 * time.Millisecond
	cfg.SyncPageBytes = 0
	err := cfg.Validate()
	if err == nil {
		t.Fatal("Validate accepted a broken config")
	}
	for _, field := range []string{"ID:", "SwimBind:", "Join: entry 1", "APIListen:", "APIAdvertise:", "QuorumTimeout:", "LeaseTTL:", "SyncPageBytes:"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("Validate error lacks %q:\n%v", field, err)
		}
	}
}
