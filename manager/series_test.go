package manager

import (
	"context"
	"fmt"
	"testing"
	"time"

	"tempest/transport"
	"tempest/wire"
)

// A job of many workflows, each with an hour of per-second points, fits a
// message: the series are thinned to a shared budget, first and last
// seconds kept.
func TestFitJobSeries(t *testing.T) {
	hour := make([]wire.SecondStats, wire.MaxSeriesEntries)
	for i := range hour {
		hour[i] = wire.SecondStats{Second: int64(i), Completed: 10}
	}
	jp := wire.JobProgress{JobID: "j"}
	for i := range 200 {
		jp.Workflows = append(jp.Workflows, wire.WorkflowProgress{WorkflowID: fmt.Sprintf("j-%d", i), Series: hour})
	}
	before, err := wire.Marshal(&jp)
	if err != nil {
		t.Fatal(err)
	}
	fitJobSeries(&jp)
	total := 0
	for _, w := range jp.Workflows {
		total += len(w.Series)
		if w.Series[0].Second != 0 || w.Series[len(w.Series)-1].Second != wire.MaxSeriesEntries-1 {
			t.Fatalf("thinned series lost its ends: %v .. %v", w.Series[0], w.Series[len(w.Series)-1])
		}
	}
	after, err := wire.Marshal(&jp)
	if err != nil {
		t.Fatal(err)
	}
	if total > 200*minSeriesEntries && total > maxJobSeriesEntries || len(after) > wire.MaxMessageSize/4 {
		t.Fatalf("%d points, %d bytes after fitting (%d before)", total, len(after), len(before))
	}
	if len(hour) != wire.MaxSeriesEntries || hour[1].Second != 1 {
		t.Fatal("fitting modified the shared series")
	}
}

// A manager's state sync snapshot is paged by size: jobs that together are
// far over the message cap reach a new leader in pages that each fit, and
// every job is in one of them.
func TestSnapshotPagedBySize(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.leader()
	var follower *Manager
	for _, m := range c.running() {
		if m != l {
			follower = m
			break
		}
	}
	const jobs = 24
	big := make([]byte, 600<<10) // 24 × 600 KiB: about 14 MiB in all
	follower.update(func(tx *txn) {
		for i := range jobs {
			sub := sleepJob(t, fmt.Sprintf("big-%02d", i), 1, 1, time.Second)
			sub.JobID = fmt.Sprintf("j-big-%02d", i)
			sub.Workflows[0].Params = append(sub.Workflows[0].Params[:len(sub.Workflows[0].Params):len(sub.Workflows[0].Params)], big...)
			follower.adoptSubmissionLocked(tx, sub)
		}
	})
	seen := make(map[string]bool)
	req := &wire.StateSyncRequest{RequesterID: l.ID(), RequesterRole: wire.RoleManager, Term: l.Term()}
	for pages := 0; ; pages++ {
		if pages > jobs {
			t.Fatal("paging does not end")
		}
		resp, err := follower.handleStateSync(context.Background(), transport.Peer{NodeID: l.ID()}, req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := wire.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > wire.MaxMessageSize {
			t.Fatalf("page %d is %d bytes, over the %d cap", pages, len(b), wire.MaxMessageSize)
		}
		ms := resp.(*wire.StateSyncResponse).ManagerState
		for _, s := range ms.Submissions {
			seen[s.JobID] = true
		}
		if ms.NextAfter == "" {
			break
		}
		req.JobsAfter = ms.NextAfter
	}
	if len(seen) != jobs {
		t.Fatalf("pages carried %d of %d jobs", len(seen), jobs)
	}
}
