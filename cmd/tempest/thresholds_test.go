package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"tempest/api"
	"tempest/internal/testutil"
	"tempest/wire"
)

func TestExitCodeWithThresholds(t *testing.T) {
	passed := []api.ThresholdResult{{Expr: "p(99) < 250ms", Passed: true, Actual: "120ms"}}
	failed := []api.ThresholdResult{
		{Expr: "p(99) < 250ms", Passed: true, Actual: "120ms"},
		{Expr: "p(95) < 100ms", Step: "login", Actual: "153.2ms", AbortOnFail: true},
	}
	tests := []struct {
		name       string
		status     wire.JobStatus
		thresholds []api.ThresholdResult
		abort      bool
		wantCode   int
		wantLines  []string
	}{
		{"completed, thresholds passed", wire.JobCompleted, passed, false, exitOK,
			[]string{"thresholds: 1 passed, 0 failed", "✓  nap  p(99) < 250ms  actual 120ms"}},
		{"completed, a threshold failed", wire.JobCompleted, failed, false, exitThresholds,
			[]string{"thresholds: 1 passed, 1 failed", "✗  nap/login  p(95) < 100ms  actual 153.2ms (abort_on_fail)"}},
		{"aborted by a threshold", wire.JobFailed, failed, true, exitThresholds,
			[]string{"error: threshold failed: p(95) < 100ms (actual 153.2ms)", "✗  nap/login"}},
		// The run did not finish: exit 2 wins over the thresholds.
		{"failed otherwise, a threshold failed too", wire.JobFailed, failed, false, exitJobFailed, []string{"✗  nap/login"}},
		{"cancelled, a threshold failed", wire.JobCancelled, failed, false, exitJobFailed, nil},
		{"timed out, a threshold failed", wire.JobTimeout, failed, false, exitJobFailed, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCLI(t)
			file := testutil.WriteFile(t, "job.yaml", jobYAML)
			done := make(chan error, 1)
			go func() {
				done <- testutil.Poll(10*time.Second, 5*time.Millisecond, func() error {
					if c.backend.Watchers("job-1") == 0 {
						return errors.New("not watched yet")
					}
					c.backend.Update("job-1", func(st *api.JobStatus) {
						st.Workflows[0].Thresholds = tt.thresholds
						st.ThresholdsFailed = tt.abort || len(tt.thresholds) > 1
						st.ThresholdAbort = tt.abort
						if tt.abort {
							st.Error = "threshold failed: p(95) < 100ms (actual 153.2ms) in workflow nap, step login"
						}
					})
					c.backend.Finish("job-1", tt.status)
					return nil
				})
			}()
			code, stdout, stderr := c.run(runSubmit, file, "--wait")
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, tt.wantCode, stdout, stderr)
			}
			for _, want := range tt.wantLines {
				if !strings.Contains(stdout, want) {
					t.Errorf("summary lacks %q:\n%s", want, stdout)
				}
			}

			// watch and status print the same section, and of a job that
			// ended both exit as the README's codes say.
			code, watchOut, _ := c.run(runWatch, "job-1")
			if code != tt.wantCode {
				t.Errorf("watch: exit %d, want %d", code, tt.wantCode)
			}
			code, statusOut, _ := c.run(runStatus, "job-1")
			if code != tt.wantCode {
				t.Errorf("status: exit %d, want %d", code, tt.wantCode)
			}
			for _, want := range tt.wantLines {
				if !strings.Contains(watchOut, want) || !strings.Contains(statusOut, want) {
					t.Errorf("watch or status lacks %q:\nwatch:\n%s\nstatus:\n%s", want, watchOut, statusOut)
				}
			}
		})
	}
}

func TestNoThresholdSectionWithoutThresholds(t *testing.T) {
	c := newCLI(t)
	c.backend.AddJob(api.JobStatus{JobID: "j", Status: wire.JobCompleted, Workflows: []api.WorkflowStatus{{Name: "nap"}}})
	code, stdout, _ := c.run(runStatus, "j")
	if code != exitOK || strings.Contains(stdout, "thresholds") {
		t.Fatalf("exit %d, stdout:\n%s", code, stdout)
	}
}
