package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tempest/workflow"
)

// TestSubmitShipsDataFiles submits a job file whose workflow names a CSV
// relative to the job file, from another working directory: the CSV
// reaches the server inside the params.
func TestSubmitShipsDataFiles(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	const csv = "username,password\nalice,a1\nbob,b2\n"
	job := `name: logins
workflows:
  - name: login
    type: http
    vus: 2
    iterations: 4
    data: {file: data/users.csv, mode: per_vu}
    steps:
      - {name: login, method: POST, url: "http://127.0.0.1:1/login", body: "u={{data.username}}&p={{data.password}}"}
`
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"job.yaml": job, "data/users.csv": csv} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	code, stdout, stderr := c.run(runSubmit, filepath.Join(dir, "job.yaml"))
	if code != exitOK || stdout != "job-1\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	subs := c.backend.Submissions()
	p, err := workflow.HTTPType{}.DecodeParams(subs[0].Workflows[0].Params)
	if err != nil {
		t.Fatal(err)
	}
	if d := p.(*workflow.HTTPParams).Data; d == nil || d.CSV != csv || d.Mode != workflow.DataPerVU {
		t.Fatalf("data %+v", d)
	}

	// A missing data file or unknown column is reported from the job file's
	// line before anything is sent.
	bad := strings.Replace(job, "{{data.password}}", "{{data.pass}}", 1)
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = c.run(runSubmit, filepath.Join(dir, "bad.yaml"))
	want := filepath.Join(dir, "bad.yaml") + `:9: workflows[0].steps[0].body: {{data.pass}}: data file "data/users.csv" has no column "pass" (columns: username, password)` + "\n"
	if code != exitUsage || stderr != want {
		t.Fatalf("unknown column: exit %d, stderr %q, want %q", code, stderr, want)
	}
	if err := os.Remove(filepath.Join(dir, "data/users.csv")); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = c.run(runSubmit, filepath.Join(dir, "job.yaml"))
	if code != exitUsage || !strings.Contains(stderr, "job.yaml:7: workflows[0].data.file: cannot read data file: open ") {
		t.Fatalf("missing data file: exit %d, stderr %q", code, stderr)
	}
	if n := len(c.backend.Submissions()); n != 1 {
		t.Fatalf("%d submissions reached the backend, want only the good one", n)
	}
}
