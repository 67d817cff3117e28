package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"tempest/api"
	"tempest/api/apitest"
	"tempest/internal/testutil"
	"tempest/wire"
)

func TestMain(m *testing.M) {
	testutil.VerifyNoLeaks(m)
}

type runFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// cli runs client commands in-process against one API server.
type cli struct {
	t       *testing.T
	backend *apitest.Backend
	url     string
}

func newCLI(t *testing.T) *cli {
	b := apitest.NewBackend()
	srv := apitest.Serve(t, b, nil)
	return &cli{t: t, backend: b, url: srv.URL()}
}

// run runs f with the server's --api and --token appended.
func (c *cli) run(f runFunc, args ...string) (code int, stdout, stderr string) {
	c.t.Helper()
	return runCLI(c.t, f, append(args, "--api", c.url, "--token", apitest.Token)...)
}

func runCLI(t *testing.T, f runFunc, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code = f(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

const jobYAML = "name: smoke\nworkflows:\n  - {name: nap, type: sleep, duration: 1s}\n"

func TestSubmitPrintsOnlyTheID(t *testing.T) {
	c := newCLI(t)
	file := testutil.WriteFile(t, "job.yaml", jobYAML)

	code, stdout, stderr := c.run(runSubmit, file)
	if code != exitOK || stdout != "job-1\n" {
		t.Fatalf("exit %d, stdout %q (stderr %q); want 0 and the id alone", code, stdout, stderr)
	}
	code, stdout, _ = c.run(runSubmit, "--json", file)
	if code != exitOK || strings.TrimSpace(stdout) != "{\n  \"job_id\": \"job-2\"\n}" {
		t.Fatalf("--json: exit %d, stdout %q", code, stdout)
	}
	if subs := c.backend.Submissions(); len(subs) != 2 || subs[0].Name != "smoke" {
		t.Fatalf("backend got %+v", subs)
	}
}

// finishWhenWatched ends job id with status once a stream watches it, in a
// goroutine the test waits for.
func (c *cli) finishWhenWatched(id string, status wire.JobStatus) (wait func()) {
	done := make(chan error, 1)
	go func() {
		done <- testutil.Poll(10*time.Second, 5*time.Millisecond, func() error {
			if c.backend.Watchers(id) == 0 {
				return errors.New("not watched yet")
			}
			c.backend.Update(id, func(st *api.JobStatus) {
				st.TotalCompleted, st.ElapsedSeconds = 7, 1.5
				st.Workflows[0].CompletedCount, st.Workflows[0].Attempts, st.Workflows[0].Worker = 7, 1, "worker-1"
				st.Workflows[0].Steps = []api.StepSummary{{Name: "sleep", Completed: 7, P50Ms: 1.25, P99Ms: 12.5}}
			})
			c.backend.Finish(id, status)
			return nil
		})
	}()
	return func() {
		c.t.Helper()
		if err := <-done; err != nil {
			c.t.Fatal(err)
		}
	}
}

func TestSubmitWait(t *testing.T) {
	tests := []struct {
		name     string
		status   wire.JobStatus
		wantCode int
	}{
		{"completed", wire.JobCompleted, exitOK},
		{"failed", wire.JobFailed, exitJobFailed},
		{"cancelled", wire.JobCancelled, exitJobFailed},
		{"timed out", wire.JobTimeout, exitJobFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCLI(t)
			file := testutil.WriteFile(t, "job.yaml", jobYAML)
			wait := c.finishWhenWatched("job-1", tt.status)
			code, stdout, stderr := c.run(runSubmit, file, "--wait") // flag after the file
			wait()
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.wantCode, stderr)
			}
			for _, want := range []string{"job job-1 (smoke): " + string(tt.status), "WORKFLOW", "nap", "worker-1", "P50", "1.25ms", "12.5ms"} {
				if !strings.Contains(stdout, want) {
					t.Errorf("summary lacks %q:\n%s", want, stdout)
				}
			}
			// Not a terminal: plain progress lines on stderr. (Whether the
			// SUBMITTED status shows too depends on when the stream starts.)
			if !strings.Contains(stderr, "submitted job job-1\n") ||
				!strings.Contains(stderr, "job-1 "+string(tt.status)) || strings.Contains(stderr, "\r") {
				t.Errorf("progress on stderr:\n%s", stderr)
			}
		})
	}
}

func TestSubmitWaitJSON(t *testing.T) {
	c := newCLI(t)
	file := testutil.WriteFile(t, "job.yaml", jobYAML)
	wait := c.finishWhenWatched("job-1", wire.JobCompleted)
	code, stdout, _ := c.run(runSubmit, "--wait", "--json", file)
	wait()
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	// Exactly one JSON object on stdout, nothing else.
	dec := json.NewDecoder(strings.NewReader(stdout))
	var st api.JobStatus
	if err := dec.Decode(&st); err != nil {
		t.Fatalf("stdout %q: %v", stdout, err)
	}
	if st.JobID != "job-1" || st.Status != wire.JobCompleted || st.TotalCompleted != 7 {
		t.Errorf("final status %+v", st)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		t.Errorf("more than one JSON value on stdout: %q", stdout)
	}
}

func TestSubmitErrors(t *testing.T) {
	c := newCLI(t)
	bad := testutil.WriteFile(t, "bad.yaml", "name: x\nworkflows:\n  - {name: nap, type: sleep, duraton: 1s}\n")
	good := testutil.WriteFile(t, "job.yaml", jobYAML)
	dead := fmt.Sprintf("http://127.0.0.1:%d", testutil.FreeTCPPort(t))

	tests := []struct {
		name       string
		args       []string
		wantStderr []string
	}{
		{"bad job file", []string{bad, "--api", c.url, "--token", apitest.Token},
			[]string{"bad.yaml:3: workflows[0]: unknown key \"duraton\" (did you mean \"duration\"?)", "bad.yaml:3: workflows[0].duration: is required"}},
		{"missing file", []string{"/nonexistent/job.yaml", "--api", c.url, "--token", apitest.Token},
			[]string{"tempest: read job file:"}},
		{"unreachable", []string{good, "--api", dead, "--token", apitest.Token},
			[]string{"tempest: cannot reach the Tempest API at " + dead + ": connection refused (set --api or TEMPEST_API)\n"}},
		{"wrong token", []string{good, "--api", c.url, "--token", "nope"},
			[]string{"refused the API token"}},
		{"no arguments", []string{"--api", c.url}, []string{"want 1 argument(s), got 0", "usage: tempest submit"}},
		{"two files", []string{good, good}, []string{"want 1 argument(s), got 2"}},
		{"unknown flag", []string{"--nope", good}, []string{"flag provided but not defined: -nope"}},
		{"bad endpoint", []string{good, "--api", "ftp://x", "--token", "t"}, []string{"want http(s)://host:port"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(envToken, "")
			t.Setenv(envAPI, "")
			code, stdout, stderr := runCLI(t, runSubmit, tt.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			for _, want := range tt.wantStderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
		})
	}
	if n := len(c.backend.Submissions()); n != 0 {
		t.Errorf("%d submissions reached the backend", n)
	}
}

func TestEnvironmentAndHelp(t *testing.T) {
	c := newCLI(t)
	file := testutil.WriteFile(t, "job.yaml", jobYAML)
	t.Setenv(envAPI, "http://127.0.0.1:1,"+c.url) // first one dead: the client moves on
	t.Setenv(envToken, apitest.Token)
	if code, stdout, stderr := runCLI(t, runSubmit, file); code != exitOK || stdout != "job-1\n" {
		t.Fatalf("submit from env: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	t.Setenv(envToken, "")
	if code, _, stderr := runCLI(t, runJobs); code != exitUsage || !strings.Contains(stderr, "no API token: set TEMPEST_TOKEN") {
		t.Errorf("no token: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, runJobs, "-h"); code != exitOK || !strings.Contains(stderr, "usage: tempest jobs [--json]") {
		t.Errorf("-h: exit %d, stderr %q", code, stderr)
	}
}

func TestStatus(t *testing.T) {
	c := newCLI(t)
	c.backend.AddJob(api.JobStatus{JobID: "j1", Name: "load", Status: wire.JobFailed, TotalCompleted: 90, TotalFailed: 10,
		ElapsedSeconds: 65.2, Error: "workflow get failed",
		Workflows: []api.WorkflowStatus{{Name: "get", Type: "http", Status: wire.WorkflowFailed, CompletedCount: 90, FailedCount: 10,
			Attempts: 3, Worker: "w2", Error: "too many errors", ElapsedSeconds: 50,
			LostAttempts: []api.LostAttempt{{Attempt: 1, Worker: "w1", Reason: "worker w1 is dead", CompletedCount: 40, FailedCount: 2},
				{Attempt: 2, Worker: "w3", Reason: "worker w3 is dead", CompletedCount: 20}},
			Steps: []api.StepSummary{{Name: "root", Completed: 90, Failed: 10, P50Ms: 3.5, P90Ms: 20, P95Ms: 40,
				P99Ms: 1500, P999Ms: 2500, MaxMs: 3000}}}}})

	code, stdout, stderr := c.run(runStatus, "j1")
	if code != exitJobFailed {
		t.Fatalf("exit %d, want %d for a failed job: %s", code, exitJobFailed, stderr)
	}
	want := `job j1 (load): FAILED after 1m5s, 90 completed, 10 failed
error: workflow get failed

WORKFLOW  STATUS  COMPLETED  FAILED  ATTEMPTS  WORKER
get       FAILED  90         10      3         w2
get: too many errors
get: attempt 1 on w1 was lost (worker w1 is dead); its 40 completed and 2 failed requests are kept in the counts, and only the rest of the load runs again
get: attempt 2 on w3 was lost (worker w3 is dead); its 20 completed and 0 failed requests are kept in the counts, and only the rest of the load runs again

WORKFLOW  STEP  COUNT  RPS  P50     P90     P95     P99    P99.9  MAX    ERRORS
get       root  100    2.0  3.50ms  20.0ms  40.0ms  1.50s  2.50s  3.00s  10 (10.00%)
`
	if stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", stdout, want)
	}

	code, stdout, _ = c.run(runStatus, "j1", "--json")
	var st api.JobStatus
	if err := json.Unmarshal([]byte(stdout), &st); code != exitJobFailed || err != nil || st.JobID != "j1" || st.Workflows[0].Steps[0].P99Ms != 1500 {
		t.Errorf("--json: exit %d, %v, %+v", code, err, st)
	}

	code, stdout, stderr = c.run(runStatus, "nope")
	if code != exitUsage || stdout != "" || !strings.Contains(stderr, "job nope not found") {
		t.Errorf("unknown job: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestWatch(t *testing.T) {
	c := newCLI(t)
	c.backend.AddJob(api.JobStatus{JobID: "j1", Status: wire.JobRunning, Workflows: []api.WorkflowStatus{{Name: "nap"}}})
	c.backend.AddJob(api.JobStatus{JobID: "j2", Status: wire.JobRunning, Workflows: []api.WorkflowStatus{{Name: "nap"}}})

	wait := c.finishWhenWatched("j1", wire.JobCompleted)
	code, stdout, _ := c.run(runWatch, "j1")
	wait()
	if code != exitOK || !strings.Contains(stdout, "job j1: COMPLETED") {
		t.Errorf("watch completed: exit %d, stdout:\n%s", code, stdout)
	}

	wait = c.finishWhenWatched("j2", wire.JobCancelled)
	code, stdout, _ = c.run(runWatch, "--json", "j2")
	wait()
	if code != exitJobFailed {
		t.Errorf("watch cancelled: exit %d, want %d", code, exitJobFailed)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var last api.JobStatus
	for _, line := range lines {
		if err := json.Unmarshal([]byte(line), &last); err != nil {
			t.Fatalf("--json line %q: %v", line, err)
		}
	}
	// One line per status received; the fake may fold RUNNING into the
	// final change if that lands before the stream starts.
	if last.Status != wire.JobCancelled || last.TotalCompleted != 7 {
		t.Errorf("--json: %d lines ending %+v, want the stream ending CANCELLED", len(lines), last)
	}

	// A finished job: the current (terminal) status at once.
	code, _, _ = c.run(runWatch, "j2")
	if code != exitJobFailed {
		t.Errorf("watch of a finished cancelled job: exit %d", code)
	}
	code, _, stderr := c.run(runWatch, "nope")
	if code != exitUsage || !strings.Contains(stderr, "not found") {
		t.Errorf("watch unknown: exit %d, stderr %q", code, stderr)
	}
}

func TestCancelResultsJobsCluster(t *testing.T) {
	c := newCLI(t)
	c.backend.AddJob(api.JobStatus{JobID: "j1", Name: "one", Status: wire.JobCompleted, TotalCompleted: 3,
		Workflows: []api.WorkflowStatus{{Name: "get", Status: wire.WorkflowCompleted,
			Steps: []api.StepSummary{{Name: "root", Completed: 3, P50Ms: 1, P90Ms: 2, P99Ms: 3, MaxMs: 4}}}}})
	c.backend.AddJob(api.JobStatus{JobID: "j2", Name: "two", Status: wire.JobRunning,
		Workflows: []api.WorkflowStatus{{Name: "nap", Status: wire.WorkflowRunning}}})
	c.backend.SetCluster(api.ClusterView{Nodes: []api.NodeView{
		{Name: "m1", Role: "manager", DC: "dc1", State: "alive", IsLeader: true, Term: 4, SendKey: "ab12", AcceptKeys: []string{"ab12", "cd34"}},
		{Name: "w1", Role: "worker", DC: "dc1", State: "HEALTHY", AvailableCores: 3, TotalCores: 4, SendKey: "ab12",
			AcceptKeys: []string{"ab12"}, OpenBreakers: []string{"m2/progress"}},
	}, Unreachable: []string{"workers of dc2: no live manager known in dc2"}})

	t.Run("cancel", func(t *testing.T) {
		code, stdout, _ := c.run(runCancel, "j2", "--reason", "enough")
		if code != exitOK || stdout != "cancelled job j2 (1 workflows stopped)\n" {
			t.Errorf("exit %d, stdout %q", code, stdout)
		}
		code, stdout, _ = c.run(runCancel, "j1")
		if code != exitOK || !strings.Contains(stdout, "already finished") {
			t.Errorf("finished: exit %d, stdout %q", code, stdout)
		}
		if code, _, _ := c.run(runCancel, "nope"); code != exitUsage {
			t.Errorf("unknown: exit %d", code)
		}
	})
	t.Run("results", func(t *testing.T) {
		code, stdout, _ := c.run(runResults, "j1", "--format", "csv")
		rows, err := csv.NewReader(strings.NewReader(stdout)).ReadAll()
		if code != exitOK || err != nil || len(rows) != 2 || strings.Join(rows[1], ",") != "get,root,3,0,1.000,2.000,3.000,4.000,0,0,,,0.000,0.000,," {
			t.Errorf("csv: exit %d, %v, %q", code, err, stdout)
		}
		code, stdout, _ = c.run(runResults, "j1")
		var res api.Results
		if err := json.Unmarshal([]byte(stdout), &res); code != exitOK || err != nil || res.JobID != "j1" {
			t.Errorf("json: exit %d, %v, %q", code, err, stdout)
		}
		if code, _, stderr := c.run(runResults, "j1", "--format", "xml"); code != exitUsage || !strings.Contains(stderr, "want json, csv or html") {
			t.Errorf("xml: exit %d, %q", code, stderr)
		}
	})
	t.Run("jobs", func(t *testing.T) {
		code, stdout, _ := c.run(runJobs)
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		if code != exitOK || len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") ||
			!strings.HasPrefix(lines[1], "j2") || !strings.HasPrefix(lines[2], "j1") {
			t.Errorf("exit %d, stdout:\n%s", code, stdout)
		}
		code, stdout, _ = c.run(runJobs, "--json")
		var list api.JobList
		if err := json.Unmarshal([]byte(stdout), &list); code != exitOK || err != nil || len(list.Jobs) != 2 {
			t.Errorf("--json: exit %d, %v, %q", code, err, stdout)
		}
		if code, _, _ := c.run(runJobs, "extra"); code != exitUsage {
			t.Errorf("extra argument: exit %d", code)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		code, stdout, stderr := c.run(runCluster)
		want := `NAME  ROLE     DC   STATE    LEADER      CORES  KEYS        OPEN BREAKERS
m1    manager  dc1  alive    * (term 4)  -      ab12 +cd34  -
w1    worker   dc1  HEALTHY              3/4    ab12        m2/progress
`
		if code != exitOK || stdout != want {
			t.Errorf("exit %d, stdout:\n%s\nwant:\n%s", code, stdout, want)
		}
		if stderr != "not shown: workers of dc2: no live manager known in dc2\n" {
			t.Errorf("stderr %q, want the datacenter whose workers are not shown", stderr)
		}
		code, stdout, _ = c.run(runCluster, "--json")
		var view api.ClusterView
		if err := json.Unmarshal([]byte(stdout), &view); code != exitOK || err != nil || len(view.Nodes) != 2 {
			t.Errorf("--json: exit %d, %v", code, err)
		}
	})
}

func TestParseArgs(t *testing.T) {
	tests := []struct {
		args     []string
		wantPos  []string
		wantWait bool
	}{
		{[]string{"f.yaml"}, []string{"f.yaml"}, false},
		{[]string{"f.yaml", "--wait"}, []string{"f.yaml"}, true},
		{[]string{"--wait", "f.yaml"}, []string{"f.yaml"}, true},
		{[]string{"a", "--wait", "b"}, []string{"a", "b"}, true},
		{[]string{"--", "--wait"}, []string{"--wait"}, false},
		{nil, nil, false},
	}
	for _, tt := range tests {
		fs := newFlagSet("x", "x", io.Discard)
		wait := fs.Bool("wait", false, "")
		pos, err := parseArgs(fs, tt.args)
		if err != nil || fmt.Sprint(pos) != fmt.Sprint(tt.wantPos) || *wait != tt.wantWait {
			t.Errorf("parseArgs(%q) = %q, wait %v, %v", tt.args, pos, *wait, err)
		}
	}
}

// --ca, --cert and --key (or TEMPEST_CA, TEMPEST_CERT, TEMPEST_KEY) reach
// an API that requires client certificates; without a certificate the
// CLI is refused and says so.
func TestMutualTLSFlags(t *testing.T) {
	ca := apitest.NewCA(t, "tempest-ca")
	serverCert, serverKey := ca.Issue(t, "api")
	clientCert, clientKey := ca.Issue(t, "operator")
	srv := apitest.Serve(t, apitest.NewBackend(), func(c *api.ServerConfig) {
		c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile = serverCert, serverKey, ca.File
	})
	conn := []string{"--api", srv.URL(), "--token", apitest.Token}

	if code, _, stderr := runCLI(t, runJobs, append(conn, "--ca", ca.File, "--cert", clientCert, "--key", clientKey)...); code != exitOK {
		t.Fatalf("with a client certificate: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, runJobs, append(conn, "--ca", ca.File)...); code != exitUsage || !strings.Contains(stderr, "certificate") {
		t.Errorf("without a client certificate: exit %d, stderr %q; want refused, naming the certificate", code, stderr)
	}
	t.Setenv(envCA, ca.File)
	t.Setenv(envCert, clientCert)
	t.Setenv(envKey, clientKey)
	if code, _, stderr := runCLI(t, runJobs, conn...); code != exitOK {
		t.Errorf("with the environment's files: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, runJobs, append(conn, "--key", "")...); code != exitOK {
		t.Errorf("an empty flag keeps the environment's: exit %d, stderr %q", code, stderr)
	}
	t.Setenv(envKey, "")
	if code, _, stderr := runCLI(t, runJobs, conn...); code != exitUsage || !strings.Contains(stderr, "key") {
		t.Errorf("a certificate without its key: exit %d, stderr %q", code, stderr)
	}
}
