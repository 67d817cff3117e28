package manager

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
)

// Placements on one worker made while earlier dispatches to it are on
// their way share a WorkflowDispatchBatch; a worker of an older release
// (fakeWorker serves no batch type) gets each dispatch alone instead.
// Either way every workflow runs, dispatched exactly once.
func TestDispatchesToOneWorkerShareMessages(t *testing.T) {
	for _, real := range []bool{true, false} {
		t.Run(fmt.Sprintf("worker serves batches %v", real), func(t *testing.T) {
			const n = 24
			c := newTestCluster(t, 3, nil)
			l := c.leader()
			if real {
				c.addRealWorker("w1", 64)
			} else {
				c.addWorker("w1", 64)
			}
			waitWorkerKnown(t, l, "w1")
			wv, _ := l.workers.get("w1")

			release := make(chan struct{})
			var releaseOnce sync.Once
			releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
			t.Cleanup(releaseAll)
			var mu sync.Mutex
			delivered := map[string]int{} // dispatches per workflow the worker received
			var shared int                // batches of more than one dispatch
			c.hub.SetHook(func(from, to string, msg wire.Message) bool {
				if from != l.ID() || to != wv.Addr {
					return true
				}
				switch m := msg.(type) {
				case *wire.WorkflowDispatch:
					<-release // the first dispatches wait, so the rest queue behind them
					mu.Lock()
					delivered[m.WorkflowID]++
					mu.Unlock()
				case *wire.WorkflowDispatchBatch:
					mu.Lock()
					if len(m.Dispatches) > 1 {
						shared++
					}
					if real {
						for _, d := range m.Dispatches {
							delivered[d.WorkflowID]++
						}
					}
					mu.Unlock()
				}
				return true
			})
			t.Cleanup(func() { c.hub.SetHook(nil) })

			// A submission places its workflows before it answers.
			acked := make(chan *wire.JobAck, 1)
			go func() {
				ack, err := l.Submit(context.Background(), sleepJob(t, "many", n, 1, time.Minute))
				if err != nil {
					t.Errorf("submit: %v", err)
				}
				acked <- ack
			}()
			testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
				if running, waiting := l.batch.dispatch.Load(wv.Addr); waiting < n/2 {
					return fmt.Errorf("%d dispatches waiting behind %d rounds, want %d or more", waiting, running, n/2)
				}
				return nil
			})
			releaseAll()
			ack := <-acked
			if ack == nil {
				t.FailNow()
			}
			testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
				l.mu.Lock()
				defer l.mu.Unlock()
				for i := range n {
					if w := l.wfs[workflowID(ack.JobID, i)]; w == nil || w.rec.Status != wire.WorkflowRunning {
						return fmt.Errorf("workflow %d not RUNNING", i)
					}
				}
				return nil
			})
			mu.Lock()
			defer mu.Unlock()
			if shared == 0 {
				t.Error("no dispatch shared a message")
			}
			for i := range n {
				if id := workflowID(ack.JobID, i); delivered[id] != 1 {
					t.Errorf("%s reached the worker %d times, want once", id, delivered[id])
				}
			}
		})
	}
}

// A progress batch is judged report by report, as lone reports would be:
// the current attempt's report is taken, a superseded attempt's is told to
// cancel, and an end is acknowledged only once a majority stored it. A
// batch speaking for another worker, or sent to a follower, is refused
// whole.
func TestProgressBatchJudgesEachReport(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.leader()
	w1 := c.addWorker("w1", 8)
	ack, err := l.Submit(context.Background(), sleepJob(t, "judged", 2, 1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	wf0, wf1 := workflowID(ack.JobID, 0), workflowID(ack.JobID, 1)
	tokens := map[string]uint64{}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, id := range []string{wf0, wf1} {
			w := l.wfs[id]
			if w == nil || w.rec.Status != wire.WorkflowRunning {
				return fmt.Errorf("%s not RUNNING", id)
			}
			tokens[id] = w.rec.FenceToken
		}
		return nil
	})
	call := func(to string, b *wire.WorkflowProgressBatch) (*wire.ProgressBatchAck, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := w1.tr.Call(ctx, c.manager(to).Addr(), b)
		if err != nil {
			return nil, err
		}
		a, ok := resp.(*wire.ProgressBatchAck)
		if !ok || len(a.Answers) != len(b.Reports) {
			t.Fatalf("answered %T %+v for %d reports", resp, resp, len(b.Reports))
		}
		return a, nil
	}
	report := func(id string, token uint64, status wire.WorkflowStatus) wire.WorkflowProgress {
		return wire.WorkflowProgress{JobID: ack.JobID, WorkflowID: id, Status: status, WorkerID: "w1", FenceToken: token,
			Final: status.Terminal(), CompletedCount: 1}
	}

	got, err := call(l.ID(), &wire.WorkflowProgressBatch{Reports: []wire.WorkflowProgress{
		report(wf0, tokens[wf0], wire.WorkflowCompleted),
		report(wf1, tokens[wf1]-1, wire.WorkflowRunning),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if a := got.Answers[0]; a.Err != nil || a.Ack == nil || a.Ack.Cancel || a.Ack.Leader != l.ID() {
		t.Errorf("%s's end: %+v (err %v), want acknowledged", wf0, a.Ack, a.Err)
	}
	if a := got.Answers[1]; a.Err != nil || a.Ack == nil || !a.Ack.Cancel {
		t.Errorf("%s's superseded attempt: %+v (err %v), want told to cancel", wf1, a.Ack, a.Err)
	}
	// Acknowledged only once a majority stored it: the leader and at least
	// one follower hold the end now.
	stored := 0
	for _, m := range c.running() {
		m.mu.Lock()
		if w := m.wfs[wf0]; w != nil && w.rec.Status == wire.WorkflowCompleted {
			stored++
		}
		m.mu.Unlock()
	}
	if stored < l.group.Load().Quorum {
		t.Errorf("%s's end acknowledged with %d managers holding it, want a majority (%d)", wf0, stored, l.group.Load().Quorum)
	}
	l.mu.Lock()
	if w := l.wfs[wf1]; w.rec.Status != wire.WorkflowRunning || w.rec.FenceToken != tokens[wf1] {
		t.Errorf("%s after a superseded report: %s under token %d, want RUNNING under %d", wf1, w.rec.Status, w.rec.FenceToken, tokens[wf1])
	}
	l.mu.Unlock()

	other := report(wf1, tokens[wf1], wire.WorkflowRunning)
	other.WorkerID = "w2"
	if _, err := call(l.ID(), &wire.WorkflowProgressBatch{Reports: []wire.WorkflowProgress{report(wf1, tokens[wf1], wire.WorkflowRunning), other}}); wire.CodeOf(err) != wire.CodeRejected {
		t.Errorf("a batch naming another worker: %v, want CodeRejected", err)
	}
	follower := others(c, l.ID())[0]
	if _, err := call(follower, &wire.WorkflowProgressBatch{Reports: []wire.WorkflowProgress{report(wf1, tokens[wf1], wire.WorkflowRunning)}}); wire.CodeOf(err) != wire.CodeNotLeader {
		t.Errorf("a batch sent to follower %s: %v, want CodeNotLeader", follower, err)
	}
}
