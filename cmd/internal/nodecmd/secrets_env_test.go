package nodecmd

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestTakeSecretsLeavesThemOutOfTheEnvironment: once taken, the secrets
// are served to the node but gone from the environment a child inherits.
func TestTakeSecretsLeavesThemOutOfTheEnvironment(t *testing.T) {
	vals := map[string]string{
		"AUTH_SECRET":           "current-secret-canary",
		"AUTH_SECRET_PREVIOUS":  "previous-secret-canary",
		"TEMPEST_TOKEN":         "api-token-canary",
		"TEMPEST_METRICS_TOKEN": "metrics-token-canary",
	}
	for k, v := range vals {
		t.Setenv(k, v)
	}
	t.Setenv("TEMPEST_HARMLESS", "kept")
	getenv := TakeSecrets()
	for k, v := range vals {
		if got := getenv(k); got != v {
			t.Errorf("getenv(%s) = %q, want %q", k, got, v)
		}
		if _, ok := os.LookupEnv(k); ok {
			t.Errorf("%s is still in the process environment", k)
		}
	}
	if getenv("TEMPEST_HARMLESS") != "kept" {
		t.Error("a variable that is not a secret was not served")
	}
	out, err := exec.Command("env").Output()
	if err != nil {
		t.Skipf("no env program: %v", err)
	}
	for _, v := range vals {
		if strings.Contains(string(out), v) {
			t.Fatalf("a child inherited a secret: %s", out)
		}
	}
	// SIGHUP without a secret file reads them again through getenv.
	if cur, prev, err := Secrets("", getenv); err != nil || cur != vals["AUTH_SECRET"] || prev != vals["AUTH_SECRET_PREVIOUS"] {
		t.Fatalf("Secrets after TakeSecrets = %q, %q, %v", cur, prev, err)
	}
}
