package workflow

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"tempest/wire"
)

func newRunner(t *testing.T, typ string, params any) Runner {
	t.Helper()
	r, err := DefaultRegistry().New(wire.WorkflowSpec{Name: "wf", Type: typ, Cores: 1, Params: mustMarshal(t, params)})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// reports collects what a run reports, for checks after it returns.
type reports struct {
	mu    sync.Mutex
	snaps []Snapshot
	first chan struct{} // closed at the first report
	once  sync.Once
}

func newReports() *reports { return &reports{first: make(chan struct{})} }

func (r *reports) report(s Snapshot) {
	r.mu.Lock()
	r.snaps = append(r.snaps, s)
	r.mu.Unlock()
	r.once.Do(func() { close(r.first) })
}

func (r *reports) all() []Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Snapshot(nil), r.snaps...)
}

func TestSleepRuns(t *testing.T) {
	run := newRunner(t, "sleep", &SleepParams{Duration: 30 * time.Millisecond})
	rep := newReports()
	res, err := run.Run(context.Background(), Env{Report: rep.report, ReportInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != 1 || res.Failed != 0 || len(res.Steps) != 1 || res.Steps[0].Latency.Count() != 1 {
		t.Fatalf("result %+v, want one completed action", res)
	}
	if res.Elapsed < 30*time.Millisecond {
		t.Fatalf("elapsed %s, shorter than the sleep", res.Elapsed)
	}
	all := rep.all()
	if last := all[len(all)-1]; last.Completed != 1 {
		t.Fatalf("final report %+v, want the result", last)
	}
}

func TestSleepHonoursCancel(t *testing.T) {
	run := newRunner(t, "sleep", &SleepParams{Duration: time.Hour})
	rep := newReports()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	type ret struct {
		res Result
		err error
	}
	done := make(chan ret, 1)
	go func() {
		res, err := run.Run(ctx, Env{Report: rep.report, ReportInterval: time.Millisecond})
		done <- ret{res, err}
	}()
	<-rep.first // running
	cancel(errors.New("job cancelled by user"))
	select {
	case r := <-done:
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("error %v, want context.Canceled", r.err)
		}
		if r.res.Completed != 0 {
			t.Fatalf("cancelled sleep completed %d actions", r.res.Completed)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sleep did not stop on cancel")
	}
}

func TestSleepTimeout(t *testing.T) {
	run := newRunner(t, "sleep", &SleepParams{Duration: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := run.Run(ctx, Env{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want DeadlineExceeded", err)
	}
}
