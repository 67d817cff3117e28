package manager

import (
	"context"
	"fmt"
	"testing"
	"time"

	"tempest/internal/store"
	"tempest/internal/testutil"
	"tempest/wire"
)

func wireSeries(n int) []wire.SecondStats {
	s := make([]wire.SecondStats, n)
	for i := range s {
		s[i] = wire.SecondStats{Second: int64(i), Completed: 10, Failed: 1, P50: time.Millisecond, P99: 3 * time.Millisecond}
	}
	return s
}

func TestKeepProgress(t *testing.T) {
	tests := []struct {
		name       string
		prior      []wire.SecondStats
		series     int
		final      bool
		wantSeries int
	}{
		{"mid-run window is not kept", nil, 60, false, 0},
		{"mid-run leaves an earlier final's series", wireSeries(5), 60, false, 5},
		{"final kept", nil, 100, true, 100},
		{"final replaces", wireSeries(5), 7, true, 7},
		{"oversized final clipped", nil, wire.MaxSeriesEntries + 10, true, wire.MaxSeriesEntries},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := store.WorkflowRecord{Series: tc.prior}
			p := wire.WorkflowProgress{CompletedCount: 3, Series: wireSeries(tc.series)}
			keepProgress(&rec, &p, tc.final)
			if len(rec.Series) != tc.wantSeries {
				t.Fatalf("record keeps %d points, want %d", len(rec.Series), tc.wantSeries)
			}
			// LastProgress keeps the counts and only the newest point, for
			// live displays.
			if ls := rec.LastProgress.Series; len(ls) != min(tc.series, 1) || rec.LastProgress.CompletedCount != 3 ||
				len(ls) == 1 && ls[0].Second != int64(tc.series-1) {
				t.Fatalf("LastProgress %+v: want the counts and the newest point", rec.LastProgress)
			}
			if len(p.Series) != tc.series {
				t.Fatal("keepProgress changed the message")
			}
			if tc.series > wire.MaxSeriesEntries && tc.final && rec.Series[len(rec.Series)-1].Second != int64(tc.series-1) {
				t.Fatal("clipping dropped the newest points")
			}
		})
	}
}

// TestFinalSeriesReachesResults: a final progress's series lands in the
// workflow record and in Results (not in the job's status), and a mid-run
// window does not.
func TestFinalSeriesReachesResults(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	c.addWorker("w1", 2)
	l := c.leader()
	ctx := context.Background()
	ack, err := l.Submit(ctx, sleepJob(t, "charted", 1, 1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	worker, token := workflowOn(t, c, ack.JobID)
	wfID := workflowID(ack.JobID, 0)
	send := func(p *wire.WorkflowProgress) {
		t.Helper()
		p.JobID, p.WorkflowID, p.WorkerID, p.FenceToken = ack.JobID, wfID, worker, token
		if _, err := c.hub.Node(worker).Call(ctx, l.ID(), p); err != nil {
			t.Fatalf("progress: %v", err)
		}
	}
	send(&wire.WorkflowProgress{Status: wire.WorkflowRunning, CompletedCount: 5, Series: wireSeries(wire.SeriesLiveWindow)})
	res, err := l.Results(ctx, ack.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Workflows[0].Series; len(got) != 0 {
		t.Fatalf("results carry %d points of a mid-run window, want none", len(got))
	}
	// The status of the running workflow shows the window's newest second.
	st, err := l.Job(ctx, ack.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if r := st.Workflows[0].Recent; r == nil || r.Second != wire.SeriesLiveWindow-1 || r.Completed != 10 || r.P99Ms != 3 {
		t.Fatalf("running workflow's recent point %+v", r)
	}

	// The final comes from the worker's own run, so no later report of the
	// same attempt replaces it.
	c.mu.Lock()
	w := c.workers[worker]
	c.mu.Unlock()
	w.complete(t, wfID, wireSeries(120))
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		res, err := l.Results(ctx, ack.JobID)
		if err != nil {
			return err
		}
		got := res.Workflows[0].Series
		if len(got) != 120 {
			return fmt.Errorf("results carry %d points, want 120", len(got))
		}
		if p := got[119]; p.Second != 119 || p.Completed != 10 || p.Failed != 1 || p.P50Ms != 1 || p.P99Ms != 3 {
			return fmt.Errorf("last point %+v", p)
		}
		return nil
	})
	st, err = l.Job(ctx, ack.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Workflows[0].Series) != 0 || st.Workflows[0].Recent != nil {
		t.Fatal("job status of a finished workflow carries the series or a recent point; only results carry points")
	}
	l.mu.Lock()
	rec := l.jobs[ack.JobID].wfs[0].rec
	l.mu.Unlock()
	if len(rec.Series) != 120 || len(rec.LastProgress.Series) != 1 {
		t.Fatalf("record keeps %d points (LastProgress %d), want 120 apart from LastProgress's newest one",
			len(rec.Series), len(rec.LastProgress.Series))
	}
}

// TestSeriesReplicatedToPeers: a follower that takes over can serve the
// report, so a finished workflow's series reaches the peers' records.
//
// The worker's own final report carries the series (one last word per
// attempt, as in production: a progress faked beside a still-running attempt
// is later replaced by that attempt's own end). The workflow ends only once
// every peer holds the job: a majority is all a submission waits for, and a
// status update that reaches a peer before the submission does is not kept
// (status replication is best effort; a successor's state sync repairs it).
func TestSeriesReplicatedToPeers(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.addWorker("w1", 2)
	l := c.leader()
	ctx := context.Background()
	ack, err := l.Submit(ctx, sleepJob(t, "charted", 1, 1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	worker, _ := workflowOn(t, c, ack.JobID)
	for _, m := range c.running() {
		testutil.Eventually(t, 30*time.Second, 10*time.Millisecond, func() error {
			_, err := m.Job(ctx, ack.JobID)
			return err
		})
	}
	c.mu.Lock()
	w := c.workers[worker]
	c.mu.Unlock()
	w.complete(t, workflowID(ack.JobID, 0), wireSeries(90))
	for _, m := range c.running() {
		testutil.Eventually(t, 30*time.Second, 10*time.Millisecond, func() error {
			res, err := m.Results(ctx, ack.JobID)
			if err != nil {
				return err
			}
			if got := len(res.Workflows[0].Series); got != 90 {
				return fmt.Errorf("%s serves %d points, want 90", m.ID(), got)
			}
			return nil
		})
	}
}
