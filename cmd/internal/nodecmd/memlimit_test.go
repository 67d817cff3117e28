package nodecmd

import (
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"testing"

	"tempest/internal/nodeconfig"
)

// Every node sets a memory limit: the configured one, else a share of the
// host's memory; a GOMEMLIMIT in the environment is left as it is.
func TestLimitMemory(t *testing.T) {
	if os.Getenv("GOMEMLIMIT") != "" || os.Getenv("AUTOMEMLIMIT") != "" {
		t.Skip("GOMEMLIMIT or AUTOMEMLIMIT is set for this test process")
	}
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	log := slog.New(slog.DiscardHandler)
	noEnv := func(string) string { return "" }

	if got := LimitMemory(512<<20, noEnv, log); got != 512<<20 || debug.SetMemoryLimit(-1) != 512<<20 {
		t.Fatalf("configured 512 MiB: LimitMemory = %d, runtime limit %d", got, debug.SetMemoryLimit(-1))
	}
	got := LimitMemory(0, noEnv, log)
	if got <= 0 || got == math.MaxInt64 || debug.SetMemoryLimit(-1) != got {
		t.Fatalf("derived from the host: LimitMemory = %d, runtime limit %d; want a finite limit in force", got, debug.SetMemoryLimit(-1))
	}
	debug.SetMemoryLimit(123 << 20)
	env := func(k string) string {
		if k == "GOMEMLIMIT" {
			return "123MiB"
		}
		return ""
	}
	if got := LimitMemory(nodeconfig.Bytes(1<<30), env, log); got != 123<<20 || debug.SetMemoryLimit(-1) != 123<<20 {
		t.Fatalf("with GOMEMLIMIT set: LimitMemory = %d, runtime limit %d, want the runtime's own 123 MiB left", got, debug.SetMemoryLimit(-1))
	}
}

// A plain-HTTP API on an address other than loopback refuses to start
// unless the config says api_insecure_http, or the API has TLS.
func TestCheckPlainAPI(t *testing.T) {
	for _, tc := range []struct {
		listen   string
		tls, opt bool
		refused  bool
	}{
		{"127.0.0.1:7411", false, false, false},
		{"[::1]:7411", false, false, false},
		{"localhost:7411", false, false, false},
		{"0.0.0.0:7411", false, false, true},
		{":7411", false, false, true},
		{"10.1.0.11:7411", false, false, true},
		{"10.1.0.11:7411", true, false, false},
		{"0.0.0.0:7411", false, true, false},
	} {
		s := nodeconfig.Server{APIListen: tc.listen, APIInsecureHTTP: tc.opt}
		err := CheckPlainAPI(s, tc.tls)
		if (err != nil) != tc.refused {
			t.Errorf("%s tls=%v api_insecure_http=%v: err %v, refused want %v", tc.listen, tc.tls, tc.opt, err, tc.refused)
		}
		if err != nil && !strings.Contains(err.Error(), "api_insecure_http") {
			t.Errorf("the refusal does not name the setting: %v", err)
		}
	}
}
