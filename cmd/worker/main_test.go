package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/security"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

func TestFlagsOverrideConfigFile(t *testing.T) {
	path := testutil.WriteFile(t, "worker.yaml", `
id: w-file
datacenter: east
cores: 8
managers: [10.0.0.1:7400]
progress_interval: 250ms
drain_timeout: 10s
swim_profile: local
`)
	cfg, opts, err := loadConfig([]string{"--config", path, "--cores", "2", "--managers", "a:1, b:2", "--log-format", "json"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ID != "w-file" || cfg.Datacenter != "east" || cfg.Cores != 2 || !slices.Equal(cfg.Managers, []string{"a:1", "b:2"}) ||
		cfg.ProgressInterval != 250*time.Millisecond || cfg.DrainTimeout != 10*time.Second || cfg.SwimProfile != "local" {
		t.Fatalf("config: %+v", cfg)
	}
	if opts.logFormat != "json" {
		t.Fatalf("options: %+v", opts)
	}
	// Keys the file did not set keep their defaults.
	if cfg.DegradedCPU != 80 || cfg.QUICListen != "127.0.0.1:0" {
		t.Fatalf("defaults lost: %+v", cfg)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		file string
		args []string
		want string
	}{
		{"unknown key", "id: w\nmanagers: [a:1]\ncorez: 3\n", nil, "corez"},
		{"secret in file", "id: w\nmanagers: [a:1]\nauth_secret: x\n", nil, "auth_secret"},
		{"invalid value", "id: w\nmanagers: [a:1]\ncores: -1\n", nil, "Cores"},
		{"no managers", "id: w\n", nil, "Managers"},
		{"stray argument", "id: w\nmanagers: [a:1]\n", []string{"extra"}, "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--config", testutil.WriteFile(t, "w.yaml", tc.file)}, tc.args...)
			_, _, err := loadConfig(args, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestRefusesWeakOrMissingSecret(t *testing.T) {
	args := []string{"--id", "w1", "--managers", "127.0.0.1:1"}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"missing", nil, "AUTH_SECRET is not set"},
		{"short", map[string]string{"AUTH_SECRET": "hunter2"}, "AUTH_SECRET"},
		{"sample", map[string]string{"AUTH_SECRET": security.SampleSecret}, "AUTH_SECRET"},
		{"weak previous", map[string]string{"AUTH_SECRET": mustSecret(t), "AUTH_SECRET_PREVIOUS": strings.Repeat("a", 40)}, "AUTH_SECRET_PREVIOUS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			code := run(args, func(k string) string { return tc.env[k] }, &stderr, nil)
			if code != exitFailure || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d mentioning %q", code, stderr.String(), exitFailure, tc.want)
			}
		})
	}
}

func mustSecret(t *testing.T) string {
	t.Helper()
	s, err := security.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func waitForLog(t *testing.T, s *testutil.SyncBuffer, substr string) {
	t.Helper()
	testutil.Eventually(t, 15*time.Second, 10*time.Millisecond, func() error {
		if !strings.Contains(s.String(), substr) {
			return fmt.Errorf("no %q in the log yet", substr)
		}
		return nil
	})
}

// TestSignals runs the real worker (QUIC, memberlist) on loopback: SIGHUP
// reloads secrets from the env file, SIGTERM drains and exits 0, and every
// log line is JSON carrying the node id.
func TestSignals(t *testing.T) {
	current, next := mustSecret(t), mustSecret(t)
	secretFile := testutil.WriteFile(t, "secret.env", fmt.Sprintf("AUTH_SECRET=%s\nAUTH_SECRET_PREVIOUS=%s\n", current, next))
	env := map[string]string{"AUTH_SECRET": current}
	args := []string{"--id", "w-sig", "--quic", "127.0.0.1:0", "--swim", "127.0.0.1:0", "--managers", "127.0.0.1:1",
		"--swim-profile", "test", "--log-format", "json", "--secret-file", secretFile}

	var stderr testutil.SyncBuffer
	sigs := make(chan os.Signal, 1)
	exit := make(chan int, 1)
	go func() { exit <- run(args, func(k string) string { return env[k] }, &stderr, sigs) }()

	waitForLog(t, &stderr, `"msg":"worker started"`)
	sigs <- syscall.SIGHUP
	waitForLog(t, &stderr, `"msg":"secrets reloaded"`)
	sigs <- syscall.SIGTERM
	select {
	case code := <-exit:
		if code != exitOK {
			t.Fatalf("exit %d after SIGTERM\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit after SIGTERM\n%s", stderr.String())
	}
	for _, want := range []string{`"msg":"drained"`, `"msg":"worker stopped"`} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("log lacks %s", want)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if rec["node"] != "w-sig" {
			t.Fatalf("log line without the node id: %q", line)
		}
		if strings.Contains(line, current) || strings.Contains(line, next) {
			t.Fatalf("a secret reached the log: %q", line)
		}
	}
}

// The sample deployment in configs/ must load with the real loader (unknown
// keys refused) and validate, so the files cannot drift from worker.Config.
func TestSampleConfigs(t *testing.T) {
	for _, tc := range []struct {
		file, id, dc string
	}{
		{"../../configs/dc-east/worker.yaml", "east-worker-1", "east"},
		{"../../configs/dc-west/worker.yaml", "west-worker-1", "west"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			cfg, _, err := loadConfig([]string{"--config", tc.file}, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			if cfg.ID != tc.id || cfg.Datacenter != tc.dc || len(cfg.Managers) != 3 || len(cfg.Join) != 3 || cfg.SwimProfile != "lan" {
				t.Fatalf("config = %+v", cfg)
			}
		})
	}
}

// TestStartsWithOnlySecretFile starts the worker as cluster.json's argv
// does, with an empty environment: the secret comes from --secret-file at
// start-up, not only on SIGHUP.
func TestStartsWithOnlySecretFile(t *testing.T) {
	secretFile := testutil.WriteFile(t, "secret.env", fmt.Sprintf("AUTH_SECRET=%q\n", mustSecret(t)))
	args := []string{"--id", "w-file", "--quic", "127.0.0.1:0", "--swim", "127.0.0.1:0", "--managers", "127.0.0.1:1",
		"--swim-profile", "test", "--log-format", "json", "--secret-file", secretFile}
	var stderr testutil.SyncBuffer
	sigs := make(chan os.Signal, 1)
	exit := make(chan int, 1)
	go func() { exit <- run(args, func(string) string { return "" }, &stderr, sigs) }()
	waitForLog(t, &stderr, `"msg":"worker started"`)
	sigs <- syscall.SIGTERM
	select {
	case code := <-exit:
		if code != exitOK {
			t.Fatalf("exit %d after SIGTERM\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
}

// --metrics-listen serves the worker's registry, behind TEMPEST_METRICS_TOKEN
// when it is set, and the listener goes away with the process; a bad
// address is a config error.
func TestMetricsListener(t *testing.T) {
	if _, _, err := loadConfig([]string{"--id", "w", "--managers", "a:1", "--metrics-listen", "nope"}, &bytes.Buffer{}); err == nil ||
		!strings.Contains(err.Error(), "MetricsListen") {
		t.Fatalf("bad --metrics-listen: err = %v", err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", testutil.FreeTCPPort(t))
	env := map[string]string{"AUTH_SECRET": mustSecret(t), "TEMPEST_METRICS_TOKEN": "scrape-0123"}
	args := []string{"--id", "w-metrics", "--quic", "127.0.0.1:0", "--swim", "127.0.0.1:0", "--managers", "127.0.0.1:1",
		"--swim-profile", "test", "--log-format", "json", "--metrics-listen", addr}
	var stderr testutil.SyncBuffer
	sigs := make(chan os.Signal, 1)
	exit := make(chan int, 1)
	go func() { exit <- run(args, func(k string) string { return env[k] }, &stderr, sigs) }()
	waitForLog(t, &stderr, `"msg":"worker started"`)

	scrape := func(token string) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("scrape: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := scrape(""); code != http.StatusUnauthorized {
		t.Errorf("scrape without the token: %d, want 401", code)
	}
	code, body := scrape("scrape-0123")
	if code != http.StatusOK || !strings.Contains(body, "tempest_worker_cores{state=\"free\"}") || !strings.Contains(body, "process_cpu_seconds_total") {
		t.Errorf("scrape with the token: %d\n%s", code, body)
	}
	sigs <- syscall.SIGTERM
	select {
	case code := <-exit:
		if code != exitOK {
			t.Fatalf("exit %d\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit after SIGTERM\n%s", stderr.String())
	}
	if _, err := http.Get("http://" + addr + "/metrics"); err == nil {
		t.Error("metrics still served after the worker exited")
	}
}
