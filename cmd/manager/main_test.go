package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"tempest/api"
	"tempest/cmd/internal/cmdtest"
	"tempest/cmd/internal/nodecmd"
	"tempest/internal/testutil"
	"tempest/manager"
	"tempest/security"
	"tempest/security/securitytest"
	"tempest/wire"
	"tempest/worker"
	"tempest/workflow"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

func TestLoadConfigFlagsOverrideFile(t *testing.T) {
	dir := t.TempDir()
	file := testutil.WriteFile(t, "manager.yaml", `
id: from-file
datacenter: east
quic_listen: 127.0.0.1:9001
swim_bind: 127.0.0.1:9002
peers:
  - {id: from-file, quic: 127.0.0.1:9001}
  - {id: other, quic: 127.0.0.1:9011}
quorum_timeout: 3s
max_workflow_retries: 5
api_tls_cert: /etc/tempest/api.crt
api_tls_key: /etc/tempest/api.key
`)
	var stderr bytes.Buffer
	cfg, opts, err := loadConfig([]string{"--config", file, "--dc", "west", "--swim", "127.0.0.1:9999", "--data-dir", dir}, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if cfg.ID != "from-file" || cfg.Datacenter != "west" || cfg.SwimBind != "127.0.0.1:9999" || cfg.QUICListen != "127.0.0.1:9001" ||
		cfg.QuorumTimeout != 3*time.Second || cfg.MaxWorkflowRetries != 5 || cfg.DataDir != dir || len(cfg.Peers) != 2 {
		t.Fatalf("config = %+v", cfg)
	}
	if opts.TLSCert != "/etc/tempest/api.crt" || opts.TLSKey != "/etc/tempest/api.key" {
		t.Fatalf("tls files = %q %q", opts.TLSCert, opts.TLSKey)
	}
	// Defaults survive for keys the file does not set.
	if cfg.Retention != manager.DefaultConfig().Retention {
		t.Fatalf("retention = %s", cfg.Retention)
	}
}

func TestLoadConfigRefusals(t *testing.T) {
	typo := testutil.WriteFile(t, "typo.yaml", "quorum_timeuot: 3s\n")
	plain := testutil.WriteFile(t, "plain.yaml", "api_listen: 0.0.0.0:7411\n")
	cmdtest.RefusesToLoad(t, loadConfig, append(cmdtest.FlagRefusals("manager"),
		cmdtest.LoadRefusal{Name: "unknown key", Args: []string{"--config", typo}, Want: "quorum_timeuot"},
		cmdtest.LoadRefusal{Name: "plain HTTP API on every address", Args: []string{"--config", plain}, Want: "api_insecure_http"},
		cmdtest.LoadRefusal{Name: "bad profile", Args: []string{"--election-profile", "warp"}, Want: "ElectionProfile"},
	))
}

func TestRefusesToStart(t *testing.T) {
	cmdtest.RefusesToStart(t, run, []string{"--data-dir", t.TempDir()}, cmdtest.SecretRefusals(securitytest.Secret(t)))
}

// TestServesAJobEndToEnd runs the command as main would, over real QUIC,
// SWIM and HTTP on loopback, with a real worker: a job file submitted
// through the API client completes, SIGHUP reloads the secrets, and SIGTERM
// stops the manager cleanly.
func TestServesAJobEndToEnd(t *testing.T) {
	secret := securitytest.Secret(t)
	env := map[string]string{"AUTH_SECRET": secret, "TEMPEST_TOKEN": "test-token"}
	args, quic, swimAddr := cmdtest.ServerArgs(t, "m1", "--dc", "dc1", "--log-level", "debug")
	manager := cmdtest.Start(t, run, args, env)
	url := manager.Serving(10 * time.Second)
	var wlog testutil.SyncBuffer
	defer func() {
		if t.Failed() {
			t.Logf("worker log:\n%s", wlog.String())
		}
	}()

	// A real worker joins over SWIM and registers over QUIC.
	keyring, err := security.NewKeyring(secret, "")
	if err != nil {
		t.Fatal(err)
	}
	wcfg := worker.DefaultConfig()
	wcfg.ID, wcfg.Datacenter, wcfg.Cores = "w1", "dc1", 2
	wcfg.SwimProfile, wcfg.Join, wcfg.Managers = "test", []string{swimAddr}, []string{quic}
	wcfg.Logger = slog.New(slog.NewTextHandler(&wlog, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w, err := worker.New(wcfg, worker.Deps{Keyring: keyring, Registry: workflow.DefaultRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWorker := context.WithCancel(context.Background())
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(wctx) }()
	defer func() {
		stopWorker()
		<-wdone
	}()

	client, ctx := cmdtest.Client(t, url, "test-token")
	cmdtest.WaitCluster(t, ctx, client, func(view *api.ClusterView) error {
		// Key ids: the manager's own from its keyring, the worker's from
		// its SWIM heartbeat.
		wantKey := fmt.Sprintf("%08x", security.KeyID(secret))
		for _, n := range view.Nodes {
			if n.Name == "w1" && n.State == string(wire.WorkerHealthy) && n.TotalCores == 2 && n.SendKey == wantKey &&
				slices.Equal(n.AcceptKeys, []string{wantKey}) && view.Nodes[0].SendKey == wantKey {
				return nil
			}
		}
		return fmt.Errorf("worker not in the cluster view yet: %+v", view.Nodes)
	})
	id, err := client.Submit(ctx, []byte("name: e2e\ntimeout: 30s\nworkflows:\n  - {name: nap, type: sleep, cores: 1, duration: 200ms}\n"), "e2e.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var final api.JobStatus
	if err := client.Watch(ctx, id, func(st api.JobStatus) { final = st }); err != nil {
		t.Fatal(err)
	}
	if final.Status != wire.JobCompleted || final.TotalCompleted != 1 {
		t.Fatalf("job ended %+v", final)
	}

	// SIGHUP with the same secret reloads it (a rotation pass that
	// changes nothing); the manager keeps serving.
	manager.ReloadsSecrets("secrets reloaded")
	if _, err := client.Job(ctx, id); err != nil {
		t.Fatalf("after SIGHUP: %v", err)
	}
	manager.Stop()
}

// The sample deployment in configs/ must load with the real loader (unknown
// keys refused) and validate, so the files cannot drift from manager.Config.
func TestSampleConfigs(t *testing.T) {
	cmdtest.Samples(t, "manager", loadConfig, func(t *testing.T, cfg manager.Config, opts nodecmd.Options, id, dc string) {
		if cfg.ID != id || cfg.Datacenter != dc || len(cfg.Peers) != 3 || len(cfg.Join) != 3 {
			t.Fatalf("config = %+v", cfg)
		}
		if cfg.SwimProfile != "fastlan" || cfg.GateSwimProfile != "lan" {
			t.Fatalf("swim profiles %q (datacenter) and %q (gates), want fastlan and lan", cfg.SwimProfile, cfg.GateSwimProfile)
		}
		if !strings.HasPrefix(cfg.DataDir, "/var/lib/tempest/") {
			t.Fatalf("data_dir %q is outside systemd's StateDirectory=tempest", cfg.DataDir)
		}
		if opts.TLSCert == "" || opts.TLSKey == "" {
			t.Fatalf("sample has no API TLS files: %+v", opts)
		}
	})
}

// TestStartsWithOnlySecretFile starts the manager as cluster.json's argv
// does, with an empty environment: AUTH_SECRET and TEMPEST_TOKEN come from
// --secret-file alone, at start-up, not only on SIGHUP. A secret file that
// cannot be read refuses the start rather than falling back.
func TestStartsWithOnlySecretFile(t *testing.T) {
	secretFile := testutil.WriteFile(t, "secret.env", fmt.Sprintf("AUTH_SECRET=%q\nTEMPEST_TOKEN=\"file-token\"\n", securitytest.Secret(t)))
	args, _, _ := cmdtest.ServerArgs(t, "m1", "--dc", "dc1", "--secret-file", secretFile)

	var missing bytes.Buffer
	bad := append(slices.Clone(args[:len(args)-1]), filepath.Join(t.TempDir(), "absent.env"))
	if code := run(bad, cmdtest.Env(nil), &missing, nil, nil); code != exitFailure || !strings.Contains(missing.String(), "secret file") {
		t.Fatalf("absent secret file: exit %d\n%s", code, missing.String())
	}

	manager := cmdtest.Start(t, run, args, nil)
	url := manager.Serving(30 * time.Second)
	// The API takes the file's token.
	cl, err := api.NewClient([]string{url}, "file-token")
	if err != nil {
		t.Fatal(err)
	}
	// Serving comes before the first election ends; a read in between is
	// told to retry, so wait for the leader rather than for time.
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := cl.Jobs(ctx); err != nil {
			var apiErr *api.Error
			if errors.As(err, &apiErr) && (apiErr.Code == api.CodeUnauthenticated) {
				t.Fatalf("API refused the file's token: %v", err)
			}
			return fmt.Errorf("API with the file's token: %w", err)
		}
		return nil
	})
	manager.Stop()
}
