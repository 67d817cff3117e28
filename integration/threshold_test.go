package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tempest/internal/target"
	"tempest/wire"
)

// runCLI runs the built tempest binary against the cluster, configured the
// way a CI job would be: through TEMPEST_API and TEMPEST_TOKEN.
// submitCLI submits jobFile with the real CLI, failing the test unless it
// is accepted, and returns the job id.
func submitCLI(t *testing.T, c *cluster, jobFile string) string {
	t.Helper()
	code, stdout, stderr := runCLI(t, c, "submit", jobFile)
	if code != 0 {
		t.Fatalf("submit %s: exit %d: %s", jobFile, code, stderr)
	}
	return strings.TrimSpace(stdout)
}

func runCLI(t *testing.T, c *cluster, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "tempest"), args...)
	cmd.Env = append(c.Env(), "TEMPEST_API="+strings.Join(c.APIs(), ","))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("run tempest %v: %v", args, err)
	}
	return code, out.String(), errOut.String()
}

// Thresholds as a CI job uses them: against a target that adds 20ms to
// every answer, "p(99) < 5ms" fails and `tempest submit --wait` exits 1;
// generous thresholds pass and it exits 0; an abort_on_fail
// threshold ends a long run early and still exits 1.
func TestThresholdsSetTheExitCode(t *testing.T) {
	c := startCluster(t, 1, 1, 2)
	cfg := target.DefaultConfig()
	cfg.Latency = 20 * time.Millisecond
	tgt := startTarget(t, cfg)
	url := "http://" + tgt.Addr()

	write := func(name, job string) string {
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, []byte(job), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	thresholds := func(lines ...string) string {
		return "    thresholds:\n      - " + strings.Join(lines, "\n      - ") + "\n"
	}
	tests := []struct {
		name      string
		duration  string
		th        string
		wantCode  int
		wantState wire.JobStatus
		wantOut   [][]string // each: parts that one line of stdout holds
		within    time.Duration
	}{
		{
			name: "fails", duration: "1s",
			th:       thresholds(`"p(99) < 5ms"`, `"error_rate < 1%"`),
			wantCode: 1, wantState: wire.JobCompleted, within: 30 * time.Second,
			wantOut: [][]string{{"thresholds: 1 passed, 1 failed"}, {"✗", "get-root", "p(99) < 5ms", "actual ", "ms"}, {"✓", "get-root", "error_rate < 1%", "actual 0%"}},
		},
		{
			name: "passes", duration: "1s",
			th:       thresholds(`"p(99) < 10s"`, `{threshold: "p(50) >= 20ms", step: root}`, `"rps > 1"`),
			wantCode: 0, wantState: wire.JobCompleted, within: 30 * time.Second,
			wantOut: [][]string{{"thresholds: 3 passed, 0 failed"}, {"✓", "get-root/root", "p(50) >= 20ms"}},
		},
		{
			// A minute-long run ended within seconds by its threshold.
			name: "aborts", duration: "60s",
			th:       thresholds(`{threshold: "p(99) < 5ms", abort_on_fail: true}`),
			wantCode: 1, wantState: wire.JobFailed, within: 30 * time.Second,
			wantOut: [][]string{{"error: threshold failed: p(99) < 5ms (actual ", "ms) in workflow get-root"}, {"✗", "get-root", "p(99) < 5ms", "(abort_on_fail)"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := write(tt.name+".yaml", httpJob("thresholds-"+tt.name, url, 2, tt.duration, "")+tt.th)
			start := time.Now()
			code, stdout, stderr := runCLI(t, c, "submit", file, "--wait")
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.wantCode, stdout, stderr)
			}
			if took := time.Since(start); took > tt.within {
				t.Fatalf("submit --wait took %s", took)
			}
			if !strings.Contains(stdout, "("+"thresholds-"+tt.name+"): "+string(tt.wantState)) {
				t.Errorf("want the job %s:\n%s", tt.wantState, stdout)
			}
			for _, want := range tt.wantOut {
				if !hasLine(stdout, want...) {
					t.Errorf("summary lacks a line with %q:\n%s", want, stdout)
				}
			}
		})
	}

	// The API shows the same verdicts as the CLI printed.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	jobs, err := c.client.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	failed := map[string]bool{}
	for _, j := range jobs {
		failed[j.Name] = j.ThresholdsFailed
		if j.Name != "thresholds-aborts" {
			continue
		}
		// Once the abort ended the job, it stays FAILED for every later
		// reader, with its verdicts (`status` once said RUNNING after it).
		code, stdout, stderr := runCLI(t, c, "status", j.JobID)
		if code != 1 || !strings.Contains(stdout, "(thresholds-aborts): "+string(wire.JobFailed)) ||
			!hasLine(stdout, "✗", "get-root", "p(99) < 5ms", "(abort_on_fail)") {
			t.Errorf("status of the aborted job: exit %d, want 1 (a threshold failed, as submit exits), FAILED and its verdicts\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
	}
	if want := map[string]bool{"thresholds-fails": true, "thresholds-passes": false, "thresholds-aborts": true}; fmt.Sprint(failed) != fmt.Sprint(want) {
		t.Errorf("thresholds_failed by job = %v, want %v", failed, want)
	}
}

// hasLine reports whether one line of out holds every part, in order.
func hasLine(out string, parts ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		rest, ok := line, true
		for _, p := range parts {
			i := strings.Index(rest, p)
			if i < 0 {
				ok = false
				break
			}
			rest = rest[i+len(p):]
		}
		if ok {
			return true
		}
	}
	return false
}
