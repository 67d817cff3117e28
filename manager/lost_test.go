package manager

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
	"tempest/workflow"
)

// A dispatch whose answer broke after the worker started the run has an
// unknown outcome. The manager fences that attempt on its worker before
// it retries, keeps what the attempt did as a lost attempt, and the retry
// runs only the iterations left: the job counts every request the target
// received, and runs its iterations once (TestGatedJobWithLargeDataFile
// saw 1909 requests for 1800 counted when the retry ran them all again).
func TestUnknownDispatchOutcomeIsFencedAndCounted(t *testing.T) {
	const iterations, before = 200, 20
	var arrived atomic.Int64
	reached, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { closeOnce(release) })
	tgt := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The dispatch's answer breaks once the run has sent 20 requests;
		// later ones wait until the test has seen the first attempt
		// fenced, so it is cut off mid-run whatever the machine's speed.
		n := arrived.Add(1)
		if n == before {
			close(reached)
		}
		if n > before {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}))
	t.Cleanup(tgt.Close)
	params, err := wire.Marshal(&workflow.HTTPParams{VUs: 1, Iterations: iterations,
		Steps: []workflow.HTTPStep{{Name: "get", Method: "GET", URL: tgt.URL + "/"}}})
	if err != nil {
		t.Fatal(err)
	}
	c := newTestCluster(t, 1, nil)
	broken := c.addWorker("w1", 1)
	broken.mu.Lock()
	broken.breakFirstAnswer, broken.brokenAfter = true, reached
	broken.mu.Unlock()
	l := c.leader()
	ack, err := l.Submit(context.Background(), &wire.JobSubmission{Name: "unknown-outcome",
		Workflows: []wire.WorkflowSpec{{Name: "load", Type: "http", Cores: 1, Params: params}}})
	if err != nil {
		t.Fatal(err)
	}
	other := c.addWorker("w2", 1)

	testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		st, err := l.Job(context.Background(), ack.JobID)
		if err != nil {
			return err
		}
		if w := st.Workflows[0]; len(w.LostAttempts) == 0 {
			return fmt.Errorf("no lost attempt yet: %+v", w)
		}
		return nil
	})
	closeOnce(release)
	st := waitJob(t, l, ack.JobID, wire.JobCompleted, 30*time.Second)
	w := st.Workflows[0]
	if len(w.LostAttempts) != 1 || w.LostAttempts[0].Worker != "w1" || w.Worker != "w2" || w.Attempts != 2 {
		t.Fatalf("workflow = %+v, want attempt 1 lost on w1 and attempt 2 on w2", w)
	}
	// The answer breaks once the 20th request arrived; the fence finds the
	// 20th on its way back, the 21st in flight (either is cut off and
	// counted failed), or the VU between the two (nothing cut off). A
	// finished pass is counted however soon the stop follows it.
	lost := w.LostAttempts[0]
	cut := lost.FailedCount
	if lost.Iterations != lost.CompletedCount || lost.CompletedCount < before-1 || lost.CompletedCount > before ||
		cut > 1 || (lost.CompletedCount == before-1 && cut != 1) {
		t.Fatalf("lost attempt kept %+v, want %d iterations and requests with the 20th cut off, or %d with at most the 21st cut off", lost, before-1, before)
	}
	// Every iteration ran once; a request the fence cut off is counted as
	// failed, and may or may not have reached the target.
	if w.CompletedCount != iterations || w.FailedCount != cut {
		t.Fatalf("counted %d completed and %d failed, want %d and %d", w.CompletedCount, w.FailedCount, iterations, cut)
	}
	if got := arrived.Load(); got < w.CompletedCount || got > w.CompletedCount+w.FailedCount {
		t.Fatalf("the target received %d requests, the job counted %d completed and %d failed", got, w.CompletedCount, w.FailedCount)
	}
	if n, m := len(broken.dispatchTokens(w.WorkflowID)), len(other.dispatchTokens(w.WorkflowID)); n != 1 || m != 1 {
		t.Fatalf("runs: %d on w1, %d on w2; want one each", n, m)
	}
}

func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}
