package workflow

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"
)

// DefaultReportInterval is how often a runner reports progress unless told
// otherwise: the worker forwards at most one progress message per workflow
// per 100 ms.
const DefaultReportInterval = 100 * time.Millisecond

// Runner runs one workflow once.
type Runner interface {
	// Run runs the workflow until it finishes or ctx ends (cancel or
	// timeout), and returns what it counted either way. The error is nil
	// when the workflow ran to its natural end; when ctx ended it first, it
	// wraps ctx's cause (errors.Is(err, context.Canceled) or
	// context.DeadlineExceeded). Failed requests are counts, not errors.
	Run(ctx context.Context, env Env) (Result, error)
}

// Env is what the worker gives a run.
type Env struct {
	// Cores are the core indices the worker assigned. Runners size pools and
	// shards from len(Cores), never from the machine; empty means one core.
	Cores []int
	// Report receives progress: at most every ReportInterval while running
	// and once at the end with the final counts. Calls are never concurrent
	// and never happen after Run returns. Nil means no reports.
	Report func(Snapshot)
	// ReportInterval defaults to DefaultReportInterval.
	ReportInterval time.Duration
	// Logger carries the worker's job and workflow attributes. Nil discards.
	Logger *slog.Logger
	// Now is the clock for latencies and elapsed time; it must be monotonic
	// (time.Now is). Nil means time.Now.
	Now func() time.Time
}

func (e Env) withDefaults() Env {
	if e.ReportInterval <= 0 {
		e.ReportInterval = DefaultReportInterval
	}
	if e.Logger == nil {
		e.Logger = slog.New(slog.DiscardHandler)
	}
	if e.Now == nil {
		e.Now = time.Now
	}
	return e
}

// parallelism is how many goroutines may usefully run CPU work at once for
// this workflow: its cores, but never more than the Go scheduler will run
// in parallel (a worker on a cgroup-limited host has GOMAXPROCS below the
// core count it was configured with).
func (e Env) parallelism() int {
	return max(1, min(len(e.Cores), runtime.GOMAXPROCS(0)))
}

// reporter calls env.Report with fresh snapshots every interval until stop.
type reporter struct {
	done chan struct{}
	wg   sync.WaitGroup
}

func startReporter(env Env, snap func() Snapshot) *reporter {
	if env.Report == nil {
		return &reporter{done: make(chan struct{})}
	}
	return startLoop(env.ReportInterval, func() { env.Report(snap()) })
}

// startLoop calls fn every interval on one goroutine until stop.
func startLoop(interval time.Duration, fn func()) *reporter {
	r := &reporter{done: make(chan struct{})}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-r.done:
				return
			case <-t.C:
				fn()
			}
		}
	}()
	return r
}

// stop ends the reports and waits for an in-progress one, so the final
// report that follows can never race with (or precede) a periodic one.
func (r *reporter) stop() {
	close(r.done)
	r.wg.Wait()
}

// stopCause is ctx's error joined with its cause, if it has a different one,
// so errors.Is(err, context.Canceled) holds and a reason such as "job
// cancelled by user" still reaches the log.
func stopCause(ctx context.Context) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause == nil || cause == err {
		return err
	}
	return fmt.Errorf("%w: %w", err, cause)
}

// PermanentError marks a run's failure that another attempt would repeat,
// such as a setup step the target refused: the worker reports it as
// permanent, and the manager fails the workflow rather than retry it on
// another worker (which would send the same refused request again).
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }
