package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"tempest/api"
	"tempest/cmd/internal/nodecmd"
	"tempest/gate"
	"tempest/internal/testutil"
	"tempest/security"
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
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown key", []string{"--config", typo}, "lease_tll"},
		{"bad peers", []string{"--peers", "a=1.2.3.4:5,b"}, `"b" is not id=quicaddr`},
		{"self not in peers", []string{"--id", "me", "--peers", "a=127.0.0.1:1"}, "must include this gate"},
		{"stray argument", []string{"extra"}, "unexpected arguments"},
		{"lease shorter than ticks", []string{"--id", "g", "--lease-ttl", "100ms"}, "LeaseTTL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			_, _, err := loadConfig(tc.args, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("loadConfig(%q) = %v, want error with %q", tc.args, err, tc.want)
			}
		})
	}
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
	good, err := security.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"no secret", map[string]string{"TEMPEST_TOKEN": "t"}, "AUTH_SECRET is not set"},
		{"weak secret", map[string]string{"AUTH_SECRET": strings.Repeat("a", 40), "TEMPEST_TOKEN": "t"}, "AUTH_SECRET"},
		{"no token", map[string]string{"AUTH_SECRET": good}, "TEMPEST_TOKEN is not set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			code := run([]string{"--data-dir", t.TempDir()}, func(k string) string { return tc.env[k] }, &stderr, nil, nil)
			if code != nodecmd.ExitFailure || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit %d mentioning %q", code, stderr.String(), nodecmd.ExitFailure, tc.want)
			}
		})
	}
}

// A gate of one runs as main would on loopback: it becomes leader, serves
// the API (a job with no datacenter to go to is refused with a clear
// reason), reloads secrets on SIGHUP and stops cleanly on SIGTERM.
func TestServesAndStops(t *testing.T) {
	secret, err := security.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"AUTH_SECRET": secret, "TEMPEST_TOKEN": "test-token"}
	quic := fmt.Sprintf("127.0.0.1:%d", testutil.FreeUDPPort(t))
	args := []string{
		"--id", "g1", "--quic", quic, "--swim", fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)), "--api", "127.0.0.1:0",
		"--data-dir", testutil.DataDir(t, "g1"), "--peers", "g1=" + quic,
		"--swim-profile", "test", "--election-profile", "test",
	}
	sigs := make(chan os.Signal, 1)
	ready := make(chan string, 1)
	exit := make(chan int, 1)
	var stderr testutil.SyncBuffer
	go func() { exit <- run(args, func(k string) string { return env[k] }, &stderr, sigs, ready) }()
	var url string
	select {
	case url = <-ready:
	case code := <-exit:
		t.Fatalf("exited %d before serving:\n%s", code, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("not serving after 10s:\n%s", stderr.String())
	}
	defer func() {
		if t.Failed() {
			t.Logf("gate log:\n%s", stderr.String())
		}
	}()
	client, err := api.NewClient([]string{url}, "test-token")
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		view, err := client.Cluster(ctx)
		if err != nil {
			return err
		}
		if len(view.Nodes) == 0 || view.Nodes[0].Role != "gate" || !view.Nodes[0].IsLeader {
			return fmt.Errorf("gate not leading yet: %+v", view.Nodes)
		}
		return nil
	})
	_, err = client.Submit(ctx, []byte("name: nowhere\nworkflows:\n  - {name: nap, type: sleep, cores: 1, duration: 1s}\n"), "j.yaml")
	if err == nil || !strings.Contains(err.Error(), "0 are healthy") {
		t.Fatalf("submit with no datacenter = %v, want a refusal naming the healthy count", err)
	}

	sigs <- syscall.SIGHUP
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		if !strings.Contains(stderr.String(), "secrets reloaded") {
			return fmt.Errorf("no reload logged")
		}
		return nil
	})
	sigs <- syscall.SIGTERM
	select {
	case code := <-exit:
		if code != nodecmd.ExitOK {
			t.Fatalf("exit %d after SIGTERM", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no exit 20s after SIGTERM")
	}
}
