package worker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
	"tempest/workflow"
)

func testSeries(n int) []workflow.SecondStats {
	s := make([]workflow.SecondStats, n)
	for i := range s {
		s[i] = workflow.SecondStats{Second: int64(i), Completed: int64(i + 1), Failed: 1, Dropped: 2, VUs: 3,
			P50: time.Millisecond, P99: time.Duration(i) * time.Millisecond}
	}
	return s
}

func TestSeriesFor(t *testing.T) {
	tests := []struct {
		name      string
		n         int
		status    wire.WorkflowStatus
		wantLen   int
		wantFirst int64
	}{
		{"none", 0, wire.WorkflowRunning, 0, 0},
		{"running short", 10, wire.WorkflowRunning, 10, 0},
		{"running keeps the live window", 100, wire.WorkflowRunning, wire.SeriesLiveWindow, 100 - wire.SeriesLiveWindow},
		{"final keeps all", 100, wire.WorkflowCompleted, 100, 0},
		{"failed is final too", 100, wire.WorkflowFailed, 100, 0},
		{"final clipped to the cap", wire.MaxSeriesEntries + 5, wire.WorkflowCompleted, wire.MaxSeriesEntries, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := seriesFor(testSeries(tc.n), tc.status)
			if len(got) != tc.wantLen {
				t.Fatalf("%d points, want %d", len(got), tc.wantLen)
			}
			if tc.wantLen == 0 {
				if got != nil {
					t.Fatalf("empty series is %#v, want nil (omitted on the wire)", got)
				}
				return
			}
			f := tc.wantFirst
			want := wire.SecondStats{Second: f, Completed: f + 1, Failed: 1, Dropped: 2, VUs: 3,
				P50: time.Millisecond, P99: time.Duration(f) * time.Millisecond}
			if got[0] != want {
				t.Fatalf("first point %+v, want %+v", got[0], want)
			}
		})
	}
}

// TestFinalProgressCarriesSeries: mid-run messages carry only the live
// window, the final one the whole series.
func TestFinalProgressCarriesSeries(t *testing.T) {
	const seconds = 150
	release := make(chan struct{})
	charted := funcType{name: "charted", fn: func(ctx context.Context, env workflow.Env) (workflow.Result, error) {
		env.Report(workflow.Snapshot{Completed: 1, Elapsed: time.Second, Series: testSeries(seconds)})
		select {
		case <-ctx.Done():
			return workflow.Result{}, ctx.Err()
		case <-release:
		}
		return workflow.Result{Snapshot: workflow.Snapshot{Completed: 2, Elapsed: 2 * time.Second, Series: testSeries(seconds)}}, nil
	}}
	h := startHarness(t, harnessOption{registry: registryWith(t, charted)})
	h.waitRegistered(t, h.m)
	h.m.mustStart(t, "w1", dispatchOf("j", "wf", wire.WorkflowSpec{Name: "c", Type: "charted", Cores: 1}, 1))

	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		for _, p := range h.m.progressOf("wf") {
			if !p.Final && len(p.Series) > 0 {
				return nil
			}
		}
		return fmt.Errorf("no mid-run progress with a series yet")
	})
	close(release)
	final := h.m.waitFinal(t, "wf")
	for _, p := range h.m.progressOf("wf") {
		if !p.Final && len(p.Series) > wire.SeriesLiveWindow {
			t.Fatalf("mid-run progress carries %d points, want at most %d", len(p.Series), wire.SeriesLiveWindow)
		}
	}
	if len(final.Series) != seconds || final.Series[seconds-1].Second != seconds-1 {
		t.Fatalf("final carries %d points, want all %d", len(final.Series), seconds)
	}
}
