package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"slices"
	"testing"
)

// TestDevAllowsTheExampleExecProgram: the sum a dev cluster's workers
// allow is that of examples/rainstorm-upper.sh as it is now, so the
// README's exec example runs on `tempest dev`.
func TestDevAllowsTheExampleExecProgram(t *testing.T) {
	b, err := os.ReadFile("../../examples/rainstorm-upper.sh")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != ExampleExecSum {
		t.Fatalf("examples/rainstorm-upper.sh has sha256 %s; set ExampleExecSum to it", got)
	}
	cfg, err := devWorkerConfig([]string{"/usr/bin/awk", "AB" + ExampleExecSum[2:]}, []string{"/srv/in"})
	if err != nil {
		t.Fatal(err)
	}
	exec := cfg["exec"].(map[string]any)
	if exec["enabled"] != true || !slices.Equal(exec["programs"].([]string), []string{"/usr/bin/awk"}) ||
		!slices.Contains(exec["program_sums"].([]string), ExampleExecSum) || !slices.Equal(cfg["source_dirs"].([]string), []string{"/srv/in"}) {
		t.Fatalf("dev worker config %v", cfg)
	}
	if _, err := devWorkerConfig([]string{"awk"}, nil); err == nil {
		t.Fatal("a bare program name was accepted")
	}
}
