package configs

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"tempest/internal/obs/obstest"
	"tempest/internal/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

var units = []string{"tempest-manager.service", "tempest-worker.service", "tempest-gate.service"}

// TestUnitsVerify runs scripts/verify-units.sh (systemd-analyze verify and
// the offline security review). CI machines without systemd skip it; the
// directive checks below run everywhere.
func TestUnitsVerify(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("skipped: systemd-analyze not installed")
	}
	out, err := exec.Command("bash", filepath.Join("..", "scripts", "verify-units.sh")).CombinedOutput()
	if err != nil {
		t.Fatalf("verify-units.sh: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// unit is a systemd unit file's directives: key -> every value it was
// given, in order (SystemCallFilter= may appear more than once).
type unit map[string][]string

func readUnit(t *testing.T, name string) unit {
	t.Helper()
	f, err := os.Open(filepath.Join("systemd", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: not a directive: %q", name, line)
		}
		u[k] = append(u[k], v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestUnitsHardened pins the directives the deployment relies on, so that
// an edit that quietly loosens a unit, or breaks secret reload, fails here
// even where systemd-analyze is absent.
func TestUnitsHardened(t *testing.T) {
	want := map[string]string{
		"EnvironmentFile":         "/etc/tempest/secret.env",
		"ExecReload":              "/bin/kill -HUP $MAINPID",
		"User":                    "tempest",
		"StateDirectory":          "tempest",
		"NoNewPrivileges":         "yes",
		"ProtectSystem":           "strict",
		"ProtectHome":             "yes",
		"PrivateTmp":              "yes",
		"PrivateDevices":          "yes",
		"ProtectKernelTunables":   "yes",
		"ProtectKernelModules":    "yes",
		"ProtectKernelLogs":       "yes",
		"ProtectControlGroups":    "yes",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX AF_NETLINK",
		"RestrictNamespaces":      "yes",
		"LockPersonality":         "yes",
		"MemoryDenyWriteExecute":  "yes",
		"SystemCallFilter":        "@system-service",
		"CapabilityBoundingSet":   "",
		"Restart":                 "on-failure",
	}
	for _, name := range units {
		t.Run(name, func(t *testing.T) {
			u := readUnit(t, name)
			for k, v := range want {
				vals, ok := u[k]
				if !ok || !slices.Contains(vals, v) {
					t.Errorf("%s=%q missing (have %q)", k, v, vals)
				}
			}
			if _, ok := u["DynamicUser"]; ok {
				t.Errorf("DynamicUser= would leave the process unable to read secret.env on reload")
			}
			role := strings.TrimSuffix(strings.TrimPrefix(name, "tempest-"), ".service")
			execStart := first(u["ExecStart"])
			for _, part := range []string{"/usr/local/bin/tempest-" + role + " ", "--config /etc/tempest/" + role + ".yaml", "--secret-file /etc/tempest/secret.env"} {
				if !strings.Contains(execStart, part) {
					t.Errorf("ExecStart %q lacks %q", execStart, part)
				}
			}
			if first(u["LimitNOFILE"]) == "" {
				t.Errorf("LimitNOFILE unset")
			}
		})
	}
}

// TestUnitsWeighSwim: managers and workers run the fastlan SWIM profile,
// which takes 1.6 s without CPU for death; their units must keep the
// weight that stops busy neighbours starving them that long.
func TestUnitsWeighSwim(t *testing.T) {
	for _, name := range []string{"tempest-manager.service", "tempest-worker.service"} {
		w, err := strconv.Atoi(first(readUnit(t, name)["CPUWeight"]))
		if err != nil || w < 300 {
			t.Errorf("%s: CPUWeight=%d (%v), want at least 300", name, w, err)
		}
	}
}

// TestWorkerStopTimeoutCoversDrain: systemd must not SIGKILL a draining
// worker. Its drain waits drain_timeout for running work and again for the
// final progress, plus a grace to leave SWIM (cmd/worker's drainGrace).
func TestWorkerStopTimeoutCoversDrain(t *testing.T) {
	stop, err := time.ParseDuration(first(readUnit(t, "tempest-worker.service")["TimeoutStopSec"]))
	if err != nil {
		t.Fatalf("TimeoutStopSec: %v", err)
	}
	for _, dc := range []string{"dc-east", "dc-west"} {
		b, err := os.ReadFile(filepath.Join(dc, "worker.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			DrainTimeout time.Duration `yaml:"drain_timeout"`
		}
		if err := yaml.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		if need := 2*cfg.DrainTimeout + 5*time.Second; cfg.DrainTimeout == 0 || stop < need {
			t.Errorf("%s: TimeoutStopSec %s < 2 x drain_timeout %s + 5s", dc, stop, cfg.DrainTimeout)
		}
	}
}

func first(vals []string) string {
	if len(vals) == 0 {
		return ""
	}
	return vals[0]
}

// The Grafana dashboard parses and every query names at least one metric
// of ours (or the runtime's); integration's TestMetricsEveryRole checks the
// names against what running gates, managers and workers export.
func TestGrafanaDashboardQueries(t *testing.T) {
	exprs, err := obstest.DashboardQueries(filepath.Join("grafana", "tempest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(exprs) < 10 {
		t.Fatalf("dashboard has %d queries", len(exprs))
	}
	for _, e := range exprs {
		if len(obstest.QueryMetrics(e)) == 0 {
			t.Errorf("query %q names no tempest_, go_ or process_ metric", e)
		}
	}
}
