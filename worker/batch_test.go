package worker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/transport"
	"tempest/wire"
)

// Progress reports made while earlier ones are on their way share a
// message, each answered on its own; a manager of an older release, which
// serves no batch type, gets every report alone. Either way every
// workflow's final report arrives.
func TestProgressReportsShareMessages(t *testing.T) {
	for _, serveBatch := range []bool{true, false} {
		t.Run(fmt.Sprintf("manager serves batches %v", serveBatch), func(t *testing.T) {
			const n = 12
			release := make(chan struct{})
			var releaseOnce sync.Once
			releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
			var mu sync.Mutex
			var batches []int // reports per batch received
			var singles int
			h := startHarness(t, harnessOption{
				cfg: func(c *Config) { c.Cores = 16 },
				before: func(h *harness) {
					// The first lone reports wait, so the rest queue behind them.
					h.m.setProgress(func(p *wire.WorkflowProgress) (wire.Message, error) {
						mu.Lock()
						singles++
						mu.Unlock()
						<-release
						return &wire.ProgressAck{WorkflowID: p.WorkflowID, Leader: "m1"}, nil
					})
					if !serveBatch {
						return
					}
					h.m.tr.Handle(wire.TypeWorkflowProgressBatch, func(_ context.Context, _ transport.Peer, msg wire.Message) (wire.Message, error) {
						b := msg.(*wire.WorkflowProgressBatch)
						ack := &wire.ProgressBatchAck{Answers: make([]wire.ProgressAnswer, len(b.Reports))}
						h.m.mu.Lock()
						h.m.progress = append(h.m.progress, b.Reports...)
						h.m.mu.Unlock()
						for i, p := range b.Reports {
							ack.Answers[i].Ack = &wire.ProgressAck{WorkflowID: p.WorkflowID, Leader: "m1"}
						}
						mu.Lock()
						batches = append(batches, len(b.Reports))
						mu.Unlock()
						return ack, nil
					})
				},
			})
			t.Cleanup(releaseAll) // before the harness's cleanup, which waits for the worker
			h.waitRegistered(t, h.m)
			for i := range n {
				h.m.mustStart(t, "w1", dispatchOf("j", fmt.Sprintf("j-%d", i), sleepSpec(t, 50*time.Millisecond, 1), uint64(i+1)))
			}
			testutil.Eventually(t, waitFor, pollStep, func() error {
				if running, waiting := h.w.progress.Load("m1"); waiting < n/2 {
					mu.Lock()
					defer mu.Unlock()
					return fmt.Errorf("%d reports waiting behind %d rounds, want %d or more (%d alone so far)", waiting, running, n/2, singles)
				}
				return nil
			})
			releaseAll()
			for i := range n {
				h.m.waitFinal(t, fmt.Sprintf("j-%d", i))
			}
			h.waitIdle(t)
			mu.Lock()
			defer mu.Unlock()
			shared := 0
			for _, k := range batches {
				if k > 1 {
					shared++
				}
			}
			if serveBatch && shared == 0 {
				t.Errorf("no report shared a message (batches %v, %d alone)", batches, singles)
			}
			if !serveBatch && len(batches) != 0 {
				t.Errorf("batches %v reached a manager that serves none", batches)
			}
			t.Logf("batches %v, %d reports alone", batches, singles)
		})
	}
}

// A dispatch batch is answered dispatch by dispatch: each as a lone
// dispatch would be, in order (accepted, refused for want of cores, refused
// for another worker), and the accepted run.
func TestDispatchBatchAnswersEach(t *testing.T) {
	h := startHarness(t, harnessOption{cfg: func(c *Config) { c.Cores = 2 }})
	h.waitRegistered(t, h.m)
	misaddressed := dispatchOf("j", "j-2", sleepSpec(t, 50*time.Millisecond, 1), 3)
	misaddressed.Worker = "w9"
	b := &wire.WorkflowDispatchBatch{Dispatches: []wire.WorkflowDispatch{
		*dispatchOf("j", "j-0", sleepSpec(t, 50*time.Millisecond, 2), 1),
		*dispatchOf("j", "j-1", sleepSpec(t, 50*time.Millisecond, 3), 2),
		*misaddressed,
	}}
	resp, err := h.m.call(t, "w1", b)
	if err != nil {
		t.Fatal(err)
	}
	ack, ok := resp.(*wire.WorkflowDispatchBatchAck)
	if !ok || len(ack.Answers) != 3 {
		t.Fatalf("answered %T %+v, want 3 answers", resp, resp)
	}
	if a := ack.Answers[0]; a.Err != nil || a.Ack == nil || !a.Ack.Accepted || a.Ack.WorkflowID != "j-0" {
		t.Errorf("j-0: %+v (err %v), want accepted", a.Ack, a.Err)
	}
	if a := ack.Answers[1]; a.Err != nil || a.Ack == nil || a.Ack.Accepted || a.Ack.WorkflowID != "j-1" {
		t.Errorf("j-1 (3 of 2 cores): %+v (err %v), want refused", a.Ack, a.Err)
	}
	if a := ack.Answers[2]; a.Err == nil || a.Err.Code != wire.CodeRejected {
		t.Errorf("j-2 (for w9): %+v (err %v), want CodeRejected", a.Ack, a.Err)
	}
	if p := h.m.waitFinal(t, "j-0"); p.Status != wire.WorkflowCompleted {
		t.Errorf("j-0 ended %s, want COMPLETED", p.Status)
	}
	h.waitIdle(t)
}

// progressSize, which decides what may share a message, never falls short
// of the encoding, whatever a report carries.
func TestProgressSizeBoundsTheEncoding(t *testing.T) {
	long := func(n int) string { return string(make([]byte, n)) }
	full := wire.WorkflowProgress{
		JobID: long(128), WorkflowID: long(140), WorkflowName: long(64), WorkerID: long(64),
		Status: wire.WorkflowFailed, Final: true, Error: long(300), Waiting: long(200), Attempts: 1 << 30,
		CompletedCount: 1 << 62, FailedCount: 1 << 62, DroppedIterations: 1 << 62,
		RatePerSecond: 1e300, Elapsed: 1 << 62, Timestamp: 1 << 62, FenceToken: 1 << 63,
		AssignedCores: []int{1 << 30, 1 << 30, 1 << 30},
	}
	for i := range wire.SeriesLiveWindow {
		full.Series = append(full.Series, wire.SecondStats{Second: 1 << 62, Completed: 1 << 62, Failed: 1 << 62,
			Dropped: 1 << 62, VUs: 1 << 62, P50: 1 << 62, P99: 1<<62 + time.Duration(i)})
	}
	for i := range 3 {
		full.StepStats = append(full.StepStats, wire.StepStats{
			StepName: long(64), CompletedCount: 1 << 62, FailedCount: 1 << 62, TotalCount: 1 << 62,
			Histogram: make([]byte, 2000+i), CorrectedHistogram: make([]byte, 1000),
			Errors:        map[string]int64{"status": 1 << 62, "timeout": 1 << 62, "transport": 1 << 62},
			Statuses:      map[int]int64{200: 1 << 62, 503: 1 << 62, 1 << 30: 1 << 62},
			BytesReceived: 1 << 62, BytesSent: 1 << 62,
		})
	}
	for _, p := range []wire.WorkflowProgress{{}, {JobID: "j", WorkflowID: "j-0"}, full} {
		b, err := wire.Marshal(&p)
		if err != nil {
			t.Fatal(err)
		}
		if got := progressSize(&p); got < len(b) {
			t.Errorf("progressSize %d, but it encodes to %d bytes", got, len(b))
		}
	}
}
