package manager

import (
	"context"
	"testing"
	"time"

	"tempest/wire"
)

// A job's watchers share one merge of its workflows per change: however many
// streams read a change, its histograms are decoded once.
func TestWatchersShareOneStatusPerChange(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	c.addWorker("w1", 4)
	l := c.leader()
	ack, err := l.Submit(context.Background(), sleepJob(t, "nap", 2, 1, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, l, ack.JobID, wire.JobCompleted, 10*time.Second)

	builds := func() (int, uint64) {
		l.mu.Lock()
		defer l.mu.Unlock()
		j := l.jobs[ack.JobID]
		if j.statuses == nil {
			return 0, j.seq
		}
		return j.statuses.Builds(), j.seq
	}
	before, seq := builds()
	const streams = 5
	for range streams {
		watch, err := l.Watch(context.Background(), ack.JobID)
		if err != nil {
			t.Fatal(err)
		}
		var last wire.JobStatus
		for st := range watch {
			last = st.Status
			if len(st.Workflows) != 2 || len(st.Workflows[0].Steps) != 1 {
				t.Fatalf("status %+v", st)
			}
		}
		if last != wire.JobCompleted {
			t.Fatalf("stream ended at %s", last)
		}
	}
	after, seqAfter := builds()
	if seqAfter != seq {
		t.Skipf("the job changed while watched (seq %d → %d); nothing to compare", seq, seqAfter)
	}
	if after-before > 1 {
		t.Fatalf("%d streams of one unchanged job merged its workflows %d times, want at most once", streams, after-before)
	}
}
