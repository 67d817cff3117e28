package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tempest/internal/jobfile"
)

// TestExecProgramBesideJobFileNamedWithoutFolder: `cd examples && tempest
// submit rainstorm-exec.yaml` names the job file without a folder, so the
// job file's directory is "."; its program "./upper.sh" must still be
// found beside it, not looked up in PATH.
func TestExecProgramBesideJobFileNamedWithoutFolder(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("upper.sh", "#!/bin/sh\nexec cat\n", 0o755)
	write("signs.csv", "Category,Sign_Post\nWarning,Telespar\n", 0o644)
	job := []byte(`name: upper
workflows:
  - name: up
    type: rainstorm
    source: {file: signs.csv, header: true}
    stages:
      - {name: upper, op: exec, tasks: 1, command: ./upper.sh}
`)
	write("job.yaml", string(job), 0o644)
	t.Chdir(dir)
	t.Setenv("PATH", t.TempDir()) // the program is not on PATH

	for _, path := range []string{"job.yaml", filepath.Join(dir, "job.yaml")} {
		d := filepath.Dir(path)
		if _, err := jobfile.Parse(job, path, cliRegistry(d), jobfile.WithDataFiles(jobfile.DirDataFiles(d))); err != nil {
			t.Errorf("job file named %q: %v", path, err)
		}
	}

	// A program that is not there is still refused at its line.
	bad := []byte(strings.Replace(string(job), "./upper.sh", "./lower.sh", 1))
	_, err := jobfile.Parse(bad, "job.yaml", cliRegistry("."), jobfile.WithDataFiles(jobfile.DirDataFiles(".")))
	if err == nil || !strings.Contains(err.Error(), "not found beside the job file") || !strings.Contains(err.Error(), ":7") {
		t.Fatalf("missing program: %v, want \"not found beside the job file\" at line 7", err)
	}
}
