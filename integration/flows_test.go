package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"tempest/api"
	"tempest/wire"
)

// loginTarget is an application a job logs in to once: POST /login answers
// a token only for the password; /api answers 200 only with that token as a
// bearer and the API key. It counts requests by path.
type loginTarget struct {
	*httptest.Server
	mu     sync.Mutex
	byPath map[string]int
}

func newLoginTarget(t *testing.T, password, apiKey string) *loginTarget {
	lt := &loginTarget{byPath: map[string]int{}}
	lt.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lt.mu.Lock()
		lt.byPath[r.URL.Path]++
		lt.mu.Unlock()
		switch r.URL.Path {
		case "/login":
			b, _ := io.ReadAll(r.Body)
			if string(b) != "password="+password {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"token": "tok-1"}`)
		case "/api":
			if r.Header.Get("Authorization") != "Bearer tok-1" || r.Header.Get("X-Api-Key") != apiKey {
				w.WriteHeader(http.StatusForbidden)
				return
			}
			io.WriteString(w, "ok")
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(lt.Close)
	return lt
}

func (lt *loginTarget) count(path string) int {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return lt.byPath[path]
}

// A login flow through the CLI as a user runs it: the target's address from
// --env, the password and an API key from --secret. The workflow is split
// over two workers, so the setup step logs in once per shard; every request
// the engine counts reached the target. Then a wrong password fails the
// workflow at setup with its reason, before any load. Neither secret shows
// in anything the cluster gives back (status, results in every format) or
// writes (every node's log), nor in the CLI's own output.
func TestSetupEnvAndSecretsThroughTheCLI(t *testing.T) {
	const password, apiKey = "pw-Zq81-secret", "key-Ux47-secret"
	c := startCluster(t, 1, 2, 2)
	lt := newLoginTarget(t, password, apiKey)
	dir := t.TempDir()
	file := filepath.Join(dir, "login.yaml")
	if err := os.WriteFile(file, []byte(`name: login-once
timeout: 90s
workflows:
  - name: api
    type: http
    vus: 4
    iterations: 40
    shards: 2
    setup:
      - name: login
        method: POST
        url: "{{env.BASE_URL}}/login"
        body: "password={{secret.PASSWORD}}"
        expect_status: [200]
        captures: [{name: token, json: token}]
    steps:
      - name: call
        url: "{{env.BASE_URL}}/api"
        headers: {Authorization: "Bearer {{token}}", X-Api-Key: "{{secret.API_KEY}}"}
        expect_status: [200]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var shown []string // everything the CLI printed
	submit := func(pw string) *api.JobStatus {
		code, stdout, stderr := runCLI(t, c, "submit", file, "--json", "--env", "BASE_URL="+lt.URL,
			"--secret", "PASSWORD="+pw, "--secret", "API_KEY="+apiKey)
		shown = append(shown, stdout, stderr)
		if code != 0 {
			t.Fatalf("submit: exit %d: %s", code, stderr)
		}
		var out struct {
			JobID string `json:"job_id"`
		}
		if err := json.Unmarshal([]byte(stdout), &out); err != nil || out.JobID == "" {
			t.Fatalf("submit printed %q: %v", stdout, err)
		}
		return c.waitStatus(out.JobID, 60*time.Second, terminal)
	}

	st := submit(password)
	if st.Status != wire.JobCompleted || len(st.Workflows) != 1 {
		t.Fatalf("job ended %s (%s) with %+v, want COMPLETED", st.Status, st.Error, st.Workflows)
	}
	steps := map[string][2]int64{}
	for _, s := range st.Workflows[0].Steps {
		steps[s.Name] = [2]int64{s.Completed, s.Failed}
	}
	if fmt.Sprint(steps) != fmt.Sprint(map[string][2]int64{"login": {2, 0}, "call": {40, 0}}) {
		t.Fatalf("steps (completed, failed) %v, want login 2 (once per shard) and call 40", steps)
	}
	if lt.count("/login") != 2 || lt.count("/api") != 40 {
		t.Fatalf("target saw /login %d, /api %d; want 2 and 40", lt.count("/login"), lt.count("/api"))
	}
	for _, args := range [][]string{
		{"status", st.JobID, "--json"}, {"status", st.JobID},
		{"results", st.JobID}, {"results", st.JobID, "--format", "csv"}, {"results", st.JobID, "--format", "html"},
		{"jobs"},
	} {
		code, stdout, stderr := runCLI(t, c, args...)
		if code != 0 {
			t.Fatalf("tempest %v: exit %d: %s", args, code, stderr)
		}
		shown = append(shown, stdout, stderr)
	}

	failed := submit("wrong")
	why, _ := json.Marshal(failed) // the job's error and its workflow's, wherever the reason is kept
	if failed.Status != wire.JobFailed || !strings.Contains(string(why), `setup step \"login\" failed (status)`) {
		t.Fatalf("job with a wrong password ended %s: %s; want FAILED by its setup step", failed.Status, why)
	}
	if lt.count("/api") != 40 {
		t.Fatalf("target saw /api %d after the failed setup, want still 40: no load after a failed setup", lt.count("/api"))
	}
	code, stdout, stderr := runCLI(t, c, "status", failed.JobID, "--json")
	if code != 2 || !strings.Contains(stdout, `"FAILED"`) { // status exits 2 for a failed job
		t.Fatalf("status of the failed job: exit %d: %s%s", code, stdout, stderr)
	}
	shown = append(shown, stdout, stderr)

	for _, n := range c.Nodes() {
		b, err := os.ReadFile(n.Log)
		if err != nil {
			t.Fatalf("read %s's log: %v", n.Name, err)
		}
		shown = append(shown, string(b))
	}
	for _, secret := range []string{password, apiKey} {
		for _, s := range shown {
			if i := strings.Index(s, secret); i >= 0 {
				t.Fatalf("a secret is shown back: …%s…", s[max(0, i-200):min(len(s), i+len(secret)+50)])
			}
		}
	}
}
