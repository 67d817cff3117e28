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

// tempest submit refuses a job file naming a data file, a file: source or
// an uploaded program outside its own folder (after cleaning and following
// symlinks), at the job file's line and before anything is sent, unless
// --allow-outside is given.
func TestSubmitRefusesFilesOutsideTheJobFilesFolder(t *testing.T) {
	c := newCLI(t)
	root := t.TempDir()
	dir := filepath.Join(root, "jobs")
	for name, content := range map[string]string{
		"secret.csv":      "user,token\nroot,hunter2\n",
		"jobs/users.csv":  "user,token\nalice,a1\n",
		"jobs/prog/x.sh":  "#!/bin/sh\ncat\n",
		"outside-prog.sh": "#!/bin/sh\ncat\n",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(root, "secret.csv"), filepath.Join(dir, "link.csv")); err != nil {
		t.Fatal(err)
	}
	httpJob := func(file string) string {
		return `name: j
workflows:
  - name: w
    type: http
    vus: 1
    iterations: 1
    data: {file: ` + file + `}
    steps:
      - {name: s, url: "http://127.0.0.1:1/{{data.user}}"}
`
	}
	pipeline := func(file, prog string) string {
		return `name: p
workflows:
  - name: w
    type: rainstorm
    source: {file: ` + file + `, format: csv}
    stages:
      - {name: e, op: exec, command: ` + prog + `, tasks: 1}
`
	}
	for _, tc := range []struct{ name, job, want string }{
		{"data file up a folder", httpJob("../secret.csv"), "secret.csv is outside the job file's folder"},
		{"data file by absolute path", httpJob(filepath.Join(root, "secret.csv")), "secret.csv is outside the job file's folder"},
		{"data file through a symlink", httpJob("link.csv"), "secret.csv is outside the job file's folder"},
		{"file: source up a folder", pipeline("../secret.csv", "./prog/x.sh"), "secret.csv is outside the job file's folder"},
		{"program up a folder", pipeline("users.csv", "../outside-prog.sh"), "outside-prog.sh is outside the job file's folder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "job.yaml")
			if err := os.WriteFile(path, []byte(tc.job), 0o600); err != nil {
				t.Fatal(err)
			}
			before := len(c.backend.Submissions())
			code, _, stderr := c.run(runSubmit, path)
			if code != exitUsage || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "job.yaml:") || !strings.Contains(stderr, "--allow-outside") {
				t.Fatalf("exit %d, stderr %q; want a usage error at the job file's line saying %q and naming --allow-outside", code, stderr, tc.want)
			}
			if len(c.backend.Submissions()) != before {
				t.Fatal("the job was sent")
			}
		})
	}
	// Inside the folder, and outside with --allow-outside, the job goes.
	for _, args := range [][]string{{filepath.Join(dir, "in.yaml")}, {filepath.Join(dir, "out.yaml"), "--allow-outside"}} {
		job := httpJob("users.csv")
		if strings.HasSuffix(args[0], "out.yaml") {
			job = httpJob("../secret.csv")
		}
		if err := os.WriteFile(args[0], []byte(job), 0o600); err != nil {
			t.Fatal(err)
		}
		if code, _, stderr := c.run(runSubmit, args...); code != exitOK {
			t.Fatalf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
}

// tempest submit fills {{env.NAME}} from --env and from its environment,
// sends {{secret.NAME}} values and the tls: files beside the job file, and
// the server puts them in the params; a tls: file outside the job file's
// folder is refused like a data file.
func TestSubmitSendsEnvSecretsAndTLSFiles(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	t.Setenv("TEMPEST_TEST_PATH", "/from-env")
	ca, err := os.ReadFile("../../internal/jobfile/testdata/tls/ca.pem")
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := os.ReadFile("../../internal/jobfile/testdata/tls/client.pem")
	key, _ := os.ReadFile("../../internal/jobfile/testdata/tls/client.key")
	job := `name: vars
workflows:
  - name: w
    type: http
    vus: "{{env.VUS}}"
    iterations: 4
    tls: {ca: certs/ca.pem, cert: certs/client.pem, key: certs/client.key}
    steps:
      - name: s
        url: "https://127.0.0.1:1{{env.TEMPEST_TEST_PATH}}"
        headers: {X-Key: "{{secret.KEY}}"}
`
	if err := os.MkdirAll(filepath.Join(dir, "certs"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{"job.yaml": []byte(job), "certs/ca.pem": ca, "certs/client.pem": cert, "certs/client.key": key} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	code, stdout, stderr := c.run(runSubmit, filepath.Join(dir, "job.yaml"), "--env", "VUS=3", "--secret", "KEY=k-77")
	if code != exitOK {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	subs := c.backend.Submissions()
	params, err := workflow.HTTPType{}.DecodeParams(subs[0].Workflows[0].Params)
	if err != nil {
		t.Fatal(err)
	}
	p := params.(*workflow.HTTPParams)
	if p.VUs != 3 || p.Steps[0].URL != "https://127.0.0.1:1/from-env" || p.Secrets["KEY"] != "k-77" || len(p.Secrets) != 1 {
		t.Fatalf("vus %d url %q secrets %d", p.VUs, p.Steps[0].URL, len(p.Secrets))
	}
	if p.TLS == nil || string(p.TLS.CA) != string(ca) || string(p.TLS.Cert) != string(cert) || string(p.TLS.Key) != string(key) {
		t.Fatalf("tls files did not arrive: %+v", p.TLS)
	}

	outside := strings.Replace(job, "certs/ca.pem", "../ca.pem", 1)
	if err := os.WriteFile(filepath.Join(dir, "outside.yaml"), []byte(outside), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = c.run(runSubmit, filepath.Join(dir, "outside.yaml"), "--env", "VUS=3", "--secret", "KEY=k-77")
	if code != exitUsage || !strings.Contains(stderr, "outside.yaml:7: workflows[0].tls.ca: cannot read ca file:") {
		t.Fatalf("a tls file outside the folder: exit %d, stderr %q", code, stderr)
	}
}
