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
	"testing"
	"time"

	"tempest/cmd/internal/cmdtest"
	"tempest/cmd/internal/nodecmd"
	"tempest/internal/testutil"
	"tempest/rainstorm"
	"tempest/security"
	"tempest/security/securitytest"
	"tempest/worker"
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
	if opts.LogFormat != "json" {
		t.Fatalf("options: %+v", opts)
	}
	// Keys the file did not set keep their defaults.
	if cfg.DegradedCPU != 80 || cfg.QUICListen != "127.0.0.1:0" {
		t.Fatalf("defaults lost: %+v", cfg)
	}
}

// TestExecConfig: exec is off by default; an exec section the file gives
// turns it on over the defaults (the limits it does not name keep theirs),
// and a policy that names no program, or passes a secret on, is refused.
func TestExecConfig(t *testing.T) {
	cfg, _, err := loadConfig([]string{"--id", "w", "--managers", "a:1"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Exec.Enabled || len(cfg.SourceDirs) != 0 {
		t.Fatalf("exec or path: sources on by default: %+v %v", cfg.Exec, cfg.SourceDirs)
	}
	path := testutil.WriteFile(t, "worker.yaml", `
id: w
managers: [a:1]
source_dirs: [/srv/data]
exec:
  enabled: true
  programs: [/usr/bin/awk]
  env: [LANG]
  cpu_seconds: 60
`)
	cfg, _, err = loadConfig([]string{"--config", path}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	e := cfg.Exec
	if !e.Enabled || !slices.Equal(e.Programs, []string{"/usr/bin/awk"}) || e.Limits.CPUSeconds != 60 ||
		e.Limits.MemoryBytes != rainstorm.DefaultExecMemoryBytes || e.MaxLineBytes != rainstorm.DefaultExecMaxLine ||
		e.Path != rainstorm.DefaultExecPath || !slices.Equal(cfg.SourceDirs, []string{"/srv/data"}) {
		t.Fatalf("exec config: %+v, source_dirs %v", e, cfg.SourceDirs)
	}
	for _, bad := range []string{"exec: {enabled: true}\n", "exec: {enabled: true, programs: [/bin/cat], env: [AUTH_SECRET]}\n", "source_dirs: [data]\n"} {
		p := testutil.WriteFile(t, "bad.yaml", "id: w\nmanagers: [a:1]\n"+bad)
		if _, _, err := loadConfig([]string{"--config", p}, &bytes.Buffer{}); err == nil {
			t.Errorf("accepted %q", bad)
		}
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
	cmdtest.RefusesToStart(t, cmdtest.NoReady(run), []string{"--id", "w1", "--managers", "127.0.0.1:1"}, []cmdtest.Refusal{
		{Name: "missing", Want: "AUTH_SECRET is not set"},
		{Name: "short", Env: map[string]string{"AUTH_SECRET": "hunter2"}, Want: "AUTH_SECRET"},
		{Name: "sample", Env: map[string]string{"AUTH_SECRET": security.SampleSecret}, Want: "AUTH_SECRET"},
		{Name: "weak previous", Env: map[string]string{"AUTH_SECRET": securitytest.Secret(t), "AUTH_SECRET_PREVIOUS": strings.Repeat("a", 40)}, Want: "AUTH_SECRET_PREVIOUS"},
	})
}

// workerArgs run worker id alone on loopback with the test SWIM profile
// and JSON logs, registering with a manager that is not there.
func workerArgs(id string, extra ...string) []string {
	return append([]string{"--id", id, "--quic", "127.0.0.1:0", "--swim", "127.0.0.1:0", "--managers", "127.0.0.1:1",
		"--swim-profile", "test", "--log-format", "json"}, extra...)
}

// TestSignals runs the real worker (QUIC, memberlist) on loopback: SIGHUP
// reloads secrets from the env file, SIGTERM drains and exits 0, and every
// log line is JSON carrying the node id.
func TestSignals(t *testing.T) {
	current, next := securitytest.Secret(t), securitytest.Secret(t)
	secretFile := testutil.WriteFile(t, "secret.env", fmt.Sprintf("AUTH_SECRET=%s\nAUTH_SECRET_PREVIOUS=%s\n", current, next))
	w := cmdtest.Start(t, cmdtest.NoReady(run), workerArgs("w-sig", "--secret-file", secretFile), map[string]string{"AUTH_SECRET": current})
	w.WaitLog(`"msg":"worker started"`)
	w.ReloadsSecrets(`"msg":"secrets reloaded"`)
	w.Stop()
	stderr := &w.Stderr
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
	cmdtest.Samples(t, "worker", loadConfig, func(t *testing.T, cfg worker.Config, _ nodecmd.Options, id, dc string) {
		if cfg.ID != id || cfg.Datacenter != dc || len(cfg.Managers) != 3 || len(cfg.Join) != 3 || cfg.SwimProfile != "fastlan" {
			t.Fatalf("config = %+v", cfg)
		}
	})
}

// TestStartsWithOnlySecretFile starts the worker as cluster.json's argv
// does, with an empty environment: the secret comes from --secret-file at
// start-up, not only on SIGHUP.
func TestStartsWithOnlySecretFile(t *testing.T) {
	secretFile := testutil.WriteFile(t, "secret.env", fmt.Sprintf("AUTH_SECRET=%q\n", securitytest.Secret(t)))
	w := cmdtest.Start(t, cmdtest.NoReady(run), workerArgs("w-file", "--secret-file", secretFile), nil)
	w.WaitLog(`"msg":"worker started"`)
	w.Stop()
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
	env := map[string]string{"AUTH_SECRET": securitytest.Secret(t), "TEMPEST_METRICS_TOKEN": "scrape-0123"}
	w := cmdtest.Start(t, cmdtest.NoReady(run), workerArgs("w-metrics", "--metrics-listen", addr), env)
	w.WaitLog(`"msg":"worker started"`)

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
	w.Stop()
	if _, err := http.Get("http://" + addr + "/metrics"); err == nil {
		t.Error("metrics still served after the worker exited")
	}
}

// A worker with exec on refuses to start where its programs would get more
// than a job needs: as root without exec.user (they would be root), or with
// a secret file that a program of another user, or any other user, could
// read. euid is passed in, so the rules are checked whoever runs the test.
func TestExecHostChecks(t *testing.T) {
	cfg := worker.DefaultConfig()
	cfg.Exec.Enabled, cfg.Exec.Programs = true, []string{"/usr/bin/awk"}
	private := testutil.WriteFile(t, "secret.env", "AUTH_SECRET=x\n") // 0600, ours
	euid := os.Geteuid()

	if err := checkExecHost(cfg, private, 0); err == nil || !strings.Contains(err.Error(), "exec.user") {
		t.Fatalf("exec as root without exec.user: %v, want refused naming exec.user", err)
	}
	asRoot := cfg
	asRoot.Exec.User = "root"
	if err := checkExecHost(asRoot, "", 0); err != nil {
		t.Fatalf("exec as root with exec.user: root, said on purpose: %v", err)
	}
	if err := checkExecHost(asRoot, private, euid); err != nil {
		t.Fatalf("a private secret file: %v", err)
	}
	shared := testutil.WriteFile(t, "shared.env", "AUTH_SECRET=x\n")
	if err := os.Chmod(shared, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := checkExecHost(asRoot, shared, euid); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a group-readable secret file: %v, want refused", err)
	}
	if err := checkExecHost(asRoot, private, euid+1); err == nil || !strings.Contains(err.Error(), "chown") {
		t.Fatalf("a secret file of another user: %v, want refused", err)
	}
	off := worker.DefaultConfig()
	if err := checkExecHost(off, shared, 0); err != nil {
		t.Fatalf("exec off checks nothing: %v", err)
	}
}
