package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"tempest/internal/devcluster"
)

// tempest dev starts in a new or empty directory only: one holding another
// cluster would start the old nodes' stores (and their jobs) under a new
// token, beside the old processes if they still run.
func TestDevRefusesADirectoryHoldingACluster(t *testing.T) {
	writeCluster := func(t *testing.T, pid int) string {
		dir := t.TempDir()
		b, err := json.Marshal(devcluster.File{Nodes: []*devcluster.Node{{Name: "dc1-manager-1", PID: pid}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cluster.json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	// A pid that is certainly not running: a child that has been waited for.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	stray := t.TempDir()
	if err := os.WriteFile(filepath.Join(stray, "notes.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		dir  string
		want string // "" means accepted
	}{
		{"absent", filepath.Join(t.TempDir(), "new"), ""},
		{"empty", t.TempDir(), ""},
		{"a stopped cluster", writeCluster(t, gone.Process.Pid), "holds another cluster (1 nodes"},
		{"a running cluster", writeCluster(t, os.Getpid()), "still running: dc1-manager-1 (pid"},
		{"other files", stray, "is not empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkFreshDir(tt.dir)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("err = %v, want it to say %q", err, tt.want)
			}
		})
	}
}
