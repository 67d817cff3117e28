package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"tempest/api"
	"tempest/cmd/internal/cmdtest"
	"tempest/gate"
	"tempest/internal/testutil"
	"tempest/security/securitytest"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

func TestLoadConfigFlagsOverrideFile(t *testing.T) {
	file := testutil.WriteFile(t, "gate.yaml", `
id: from-file
quic_listen: 127.0.0.1:9001
swim_bind: 127.0.0.1:9002
peers:
  - {id: from-file, quic: 127.0.0.1:9001}
  - {id: g2, quic: 127.0.0.1:9011}
lease_ttl: 20s
`)
	var stderr bytes.Buffer
	cfg, _, err := loadConfig([]string{"--config", file, "--lease-ttl", "9s", "--swim-profile", "test"}, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if cfg.ID != "from-file" || cfg.LeaseTTL != 9*time.Second || cfg.SwimProfile != "test" || len(cfg.Peers) != 2 {
		t.Fatalf("config = %+v", cfg)
	}
	if cfg.Retention != gate.DefaultConfig().Retention {
		t.Fatalf("retention = %s; defaults must survive for keys the file does not set", cfg.Retention)
	}
}

func TestLoadConfigRefusals(t *testing.T) {
	typo := testutil.WriteFile(t, "typo.yaml", "lease_tll: 3s\n")
	cmdtest.RefusesToLoad(t, loadConfig, append(cmdtest.FlagRefusals("gate"),
		cmdtest.LoadRefusal{Name: "unknown key", Args: []string{"--config", typo}, Want: "lease_tll"},
		cmdtest.LoadRefusal{Name: "lease shorter than ticks", Args: []string{"--id", "g", "--lease-ttl", "100ms"}, Want: "LeaseTTL"},
	))
}

// The sample deployment's gate config loads with the real loader and
// validates, so it cannot drift from gate.Config.
func TestSampleConfig(t *testing.T) {
	var stderr bytes.Buffer
	cfg, opts, err := loadConfig([]string{"--config", "../../configs/gates/gate.yaml"}, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if cfg.ID != "gate-1" || len(cfg.Peers) != 3 || len(cfg.Join) != 3 || !strings.HasPrefix(cfg.DataDir, "/var/lib/tempest/") {
		t.Fatalf("config = %+v", cfg)
	}
	if opts.TLSCert == "" || opts.TLSKey == "" {
		t.Fatalf("sample has no API TLS files: %+v", opts)
	}
}

func TestRefusesToStart(t *testing.T) {
	cmdtest.RefusesToStart(t, run, []string{"--data-dir", t.TempDir()}, cmdtest.SecretRefusals(securitytest.Secret(t)))
}

// A gate of one runs as main would on loopback: it becomes leader, serves
// the API (a job with no datacenter to go to is refused with a clear
// reason), reloads secrets on SIGHUP and stops cleanly on SIGTERM.
func TestServesAndStops(t *testing.T) {
	env := map[string]string{"AUTH_SECRET": securitytest.Secret(t), "TEMPEST_TOKEN": "test-token"}
	args, _, _ := cmdtest.ServerArgs(t, "g1")
	gate := cmdtest.Start(t, run, args, env)
	url := gate.Serving(10 * time.Second)
	client, ctx := cmdtest.Client(t, url, "test-token")
	cmdtest.WaitCluster(t, ctx, client, func(view *api.ClusterView) error {
		if len(view.Nodes) == 0 || view.Nodes[0].Role != "gate" || !view.Nodes[0].IsLeader {
			return fmt.Errorf("gate not leading yet: %+v", view.Nodes)
		}
		return nil
	})
	_, err := client.Submit(ctx, []byte("name: nowhere\nworkflows:\n  - {name: nap, type: sleep, cores: 1, duration: 1s}\n"), "j.yaml")
	if err == nil || !strings.Contains(err.Error(), "0 are healthy") {
		t.Fatalf("submit with no datacenter = %v, want a refusal naming the healthy count", err)
	}

	gate.ReloadsSecrets("secrets reloaded")
	gate.Stop()
}
