package main

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

	"tempest/api"
	"tempest/api/apitest"
	"tempest/internal/testutil"
	"tempest/wire"
)

// These tests run the real tempest binary: once inside a real terminal
// (tmux, at a fixed size) to see the live display and the summary as a
// person would, and once writing into pipes, as in CI.

// buildTempest compiles this command into a temporary directory.
func buildTempest(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go toolchain on PATH to build the binary: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "tempest")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goBin, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// liveJob is a running job as the backend holds it before the test moves it
// on: one http workflow planned for a minute, with a step.
func liveJob(id string) api.JobStatus {
	return api.JobStatus{JobID: id, Name: "smoke", Status: wire.JobRunning, Datacenter: "dc1",
		TotalCompleted: 1200, TotalFailed: 3, ElapsedSeconds: 2,
		Workflows: []api.WorkflowStatus{{Name: "get-root", WorkflowID: id + "-wf-0", Type: "http",
			Status: wire.WorkflowRunning, CompletedCount: 1200, FailedCount: 3, ElapsedSeconds: 2, PlannedSeconds: 60,
			Worker: "worker-1", Attempts: 1,
			Recent: &api.SeriesPoint{Second: 1, Completed: 598, Failed: 2, P50Ms: 2.5, P99Ms: 17},
			Steps:  []api.StepSummary{{Name: "root", Completed: 1200, Failed: 3, P50Ms: 2.5, P99Ms: 17}}}}}
}

// finishLive moves a liveJob on: more requests, then COMPLETED with its
// final percentiles.
func finishLive(st *api.JobStatus) {
	st.Status, st.ElapsedSeconds = wire.JobCompleted, 60.5
	st.TotalCompleted, st.TotalFailed = 36000, 60
	wf := &st.Workflows[0]
	wf.Status, wf.CompletedCount, wf.FailedCount, wf.ElapsedSeconds, wf.Recent = wire.WorkflowCompleted, 36000, 60, 60, nil
	wf.Steps = []api.StepSummary{{Name: "root", Completed: 36000, Failed: 60,
		P50Ms: 2.5, P90Ms: 6, P95Ms: 9.5, P99Ms: 17, P999Ms: 48, MaxMs: 130}}
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func TestLiveDisplayInATerminal(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux is not installed; the live display needs a real terminal to test")
	}
	bin := buildTempest(t)
	c := newCLI(t)
	c.backend.AddJob(liveJob("j1"))

	// A private server with no config (-f /dev/null), so the test neither
	// sees nor disturbs anyone's tmux; killed whatever happens. Its socket
	// is a path in the test's own directory (-S rather than -L, whose
	// socket would outlive the test in /tmp/tmux-UID).
	socket := filepath.Join(t.TempDir(), "tmux.sock")
	tm := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, tmux, append([]string{"-S", socket, "-f", "/dev/null"}, args...)...).CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() { _, _ = tm("kill-server") })

	// The shell stays (sleep) after tempest exits, so the pane, the summary
	// and the exit code can still be read. sh, whatever the user's shell.
	cmdline := "sh -c " + shellQuote(fmt.Sprintf("%s watch j1 --api %s --token %s; echo EXIT=$?; sleep 600",
		shellQuote(bin), shellQuote(c.url), shellQuote(apitest.Token)))
	if out, err := tm("new-session", "-d", "-s", "watch", "-x", "120", "-y", "40", cmdline); err != nil {
		t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	var pane string
	waitPane := func(what string, ok func(string) bool) {
		t.Helper()
		err := testutil.Poll(60*time.Second, 50*time.Millisecond, func() error {
			out, err := tm("capture-pane", "-p", "-t", "watch")
			if err != nil {
				return fmt.Errorf("capture-pane: %v: %s", err, out)
			}
			pane = out
			if !ok(out) {
				return errors.New("not yet")
			}
			return nil
		})
		if err != nil {
			t.Fatalf("waiting for %s: %v; pane:\n%s", what, err, pane)
		}
	}

	// The live display, as the first status draws it.
	waitPane("the live display", func(p string) bool { return strings.Contains(p, "j1 RUNNING  elapsed 2s") })
	for _, want := range []string{
		"j1 RUNNING  elapsed 2s  remaining 58s",
		"completed 1200  errors 3 (0.25%)  workflows 0/1 done",
		"get-root  RUNNING    600.0/s  p50 2.50ms  p99 17.0ms  errors 3 (0.25%)",
	} {
		if !strings.Contains(pane, want) {
			t.Errorf("live display lacks %q; pane:\n%s", want, pane)
		}
	}

	// A newer status is drawn over the old one, not below it.
	c.backend.Update("j1", func(st *api.JobStatus) {
		st.ElapsedSeconds, st.TotalCompleted = 30, 18000
		wf := &st.Workflows[0]
		wf.ElapsedSeconds, wf.CompletedCount = 30, 18000
		wf.Recent = &api.SeriesPoint{Second: 29, Completed: 640, P50Ms: 2.75, P99Ms: 21}
	})
	waitPane("the redrawn display", func(p string) bool { return strings.Contains(p, "j1 RUNNING  elapsed 30s") })
	if strings.Contains(pane, "elapsed 2s") || strings.Count(pane, "j1 RUNNING") != 1 ||
		!strings.Contains(pane, "remaining 30s") || !strings.Contains(pane, "640.0/s  p50 2.75ms  p99 21.0ms") {
		t.Errorf("want one display, redrawn in place with the new numbers; pane:\n%s", pane)
	}

	// The end: the final display, then the summary table and exit 0.
	c.backend.Update("j1", finishLive)
	waitPane("the summary and exit code", func(p string) bool { return strings.Contains(p, "EXIT=") })
	for _, want := range []string{
		"j1 COMPLETED  elapsed 1m1s",
		"job j1 (smoke): COMPLETED after 1m1s, 36000 completed, 60 failed",
		"WORKFLOW  STEP  COUNT  RPS    P50     P90     P95     P99     P99.9   MAX      ERRORS",
		"get-root  root  36060  601.0  2.50ms  6.00ms  9.50ms  17.0ms  48.0ms  130.0ms  60 (0.17%)",
		"EXIT=0",
	} {
		if !strings.Contains(pane, want) {
			t.Errorf("pane lacks %q:\n%s", want, pane)
		}
	}
	if n := strings.Count(pane, "j1 RUNNING") + strings.Count(pane, "j1 COMPLETED  elapsed"); n != 1 {
		t.Errorf("%d displays on screen, want the final one alone:\n%s", n, pane)
	}
}

// TestPlainLinesIntoPipes runs the same command with stdout and stderr
// going into pipes: plain lines, no escapes, no carriage returns.
func TestPlainLinesIntoPipes(t *testing.T) {
	bin := buildTempest(t)
	c := newCLI(t)
	c.backend.AddJob(liveJob("j1"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout bytes.Buffer
	var stderr testutil.SyncBuffer
	cmd := exec.CommandContext(ctx, bin, "watch", "j1", "--api", c.url, "--token", apitest.Token)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "TERM=xterm-256color") // a terminal type, but not a terminal
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Finish the job once the running status is out, so both show.
	testutil.Eventually(t, 30*time.Second, 10*time.Millisecond, func() error {
		if !strings.Contains(stderr.String(), "j1 RUNNING") {
			return errors.New("no progress line yet")
		}
		return nil
	})
	c.backend.Update("j1", finishLive)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tempest watch: %v\nstderr:\n%s", err, stderr.String())
	}
	if out := stdout.String() + stderr.String(); strings.ContainsAny(out, "\r\x1b") {
		t.Fatalf("output into pipes has carriage returns or escapes: %q", out)
	}
	// The rate depends on which statuses the stream delivered, so the
	// lines are checked around it.
	for _, want := range []string{
		"j1 RUNNING  elapsed 2s  remaining 58s\n",
		"  get-root  RUNNING    600.0/s  p50 2.50ms  p99 17.0ms  errors 3 (0.25%)\n",
		"j1 COMPLETED  elapsed 1m1s\n",
		"/s  completed 36000  errors 60 (0.17%)  workflows 1/1 done\n  get-root  COMPLETED  completed 36000  errors 60 (0.17%)\n",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	if !strings.Contains(stdout.String(), "get-root  root  36060  601.0  2.50ms") {
		t.Errorf("summary on stdout:\n%s", stdout.String())
	}
}

// Ctrl-C while following a job cancels it and prints the summary of what
// ran, as k6 does; with --detach it leaves the job running. The real binary
// gets a real SIGINT.
func TestInterruptCancelsOrDetaches(t *testing.T) {
	bin := buildTempest(t)
	for _, tc := range []struct {
		name       string
		args       []string
		wantCancel bool
		wantCode   int
		wantErr    string
	}{
		{"cancels", nil, true, 2, "cancelling job j1"},
		{"detaches", []string{"--detach"}, false, exitUsage, "it keeps running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLI(t)
			c.backend.AddJob(liveJob("j1"))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var stdout, stderr testutil.SyncBuffer
			args := append([]string{"watch", "j1", "--api", c.url, "--token", apitest.Token}, tc.args...)
			cmd := exec.CommandContext(ctx, bin, args...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 30*time.Second, 10*time.Millisecond, func() error {
				if c.backend.Watchers("j1") == 0 || !strings.Contains(stderr.String(), "j1 RUNNING") {
					return errors.New("not watching yet")
				}
				return nil
			})
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			code := 0
			var exitErr *exec.ExitError
			if errors.As(err, &exitErr) {
				code = exitErr.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantCode || !strings.Contains(stderr.String(), tc.wantErr) {
				t.Fatalf("exit %d, want %d; stderr lacks %q?\n%s", code, tc.wantCode, tc.wantErr, stderr.String())
			}
			cancelled := len(c.backend.Cancels()) > 0
			if cancelled != tc.wantCancel {
				t.Fatalf("cancels %v, want a cancel: %v", c.backend.Cancels(), tc.wantCancel)
			}
			if tc.wantCancel && !strings.Contains(stdout.String(), "get-root") {
				t.Fatalf("no summary after the cancel:\n%s", stdout.String())
			}
		})
	}
}
