package workflow

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"tempest/wire"
)

// ErrorClass says why a request (or action) failed.
type ErrorClass string

// Failure classes. Only classes that occurred appear in StepSnapshot.Errors.
const (
	// ErrorStatus: a response arrived with a status the step does not expect.
	ErrorStatus ErrorClass = "status"
	// ErrorTimeout: the per-request timeout passed.
	ErrorTimeout ErrorClass = "timeout"
	// ErrorCancelled: the run was cancelled while the request was in flight.
	// The target may or may not have seen it.
	ErrorCancelled ErrorClass = "cancelled"
	// ErrorConnect: resolving or dialling the target failed (e.g. refused).
	ErrorConnect ErrorClass = "connect"
	// ErrorBody: the response started but its body could not be read, or
	// it did not contain the step's expect_body.
	ErrorBody ErrorClass = "body"
	// ErrorTransport: any other request error.
	ErrorTransport ErrorClass = "transport"
	// ErrorCapture: a response arrived but a capture of the step found
	// nothing in it (flow.go).
	ErrorCapture ErrorClass = "capture"
	// ErrorSkipped: the step was not sent, because a value it uses was
	// never captured. Counted among the failed, never sent to the target.
	ErrorSkipped ErrorClass = "skipped"
	// ErrorRedirects: the response was a redirect past the workflow's
	// redirect limit (a loop, most likely).
	ErrorRedirects ErrorClass = "redirects"
)

// CheckResult counts one check of a step.
type CheckResult struct {
	Name           string
	Passed, Failed int64
}

// Snapshot is a workflow's counters since its run started. Every count is
// cumulative, so a later snapshot supersedes an earlier one and a lost
// progress message loses nothing.
type Snapshot struct {
	Elapsed   time.Duration
	Completed int64
	Failed    int64
	Steps     []StepSnapshot
	// DroppedIterations counts open-model iterations that fell due while
	// every VU was busy and the pool was at max_vus, and so never ran: load
	// the target was meant to get and did not. Zero under the closed model.
	// (Not yet in wire.WorkflowProgress; see StepStats.)
	DroppedIterations int64
	// Iterations counts passes over the steps that ran to their end (not
	// cut short by a stop), read before the other counts.
	Iterations int64
	// VUs is how many VUs were live when the snapshot was taken.
	VUs int
	// Offered is, for a paced RainStorm source, the records its schedule
	// has made due so far (wire.WorkflowProgress.Offered); zero otherwise.
	Offered int64
	// Series is the run's per-second history, oldest first, at most
	// MaxSeriesSeconds. While running, the last couple of seconds are not
	// in it yet (they are still filling); the final snapshot has them all.
	// It is shared between snapshots and must not be modified.
	Series []SecondStats
}

// StepSnapshot counts one step.
type StepSnapshot struct {
	Name      string
	Completed int64
	Failed    int64
	// Errors counts failures by class; nil when there were none.
	Errors map[ErrorClass]int64
	// Statuses counts responses by HTTP status code; Sent and Received sum
	// request and response body bytes.
	Statuses map[int]int64
	Sent     int64
	Received int64
	// Latency holds one sample per response received (whatever its status),
	// cumulative since the run started. Failures without a response
	// (refused, timed out, cancelled) have no meaningful latency and are not
	// in it, so Latency.Count() <= Completed+Failed. The snapshot owns it:
	// the runner never touches it again.
	//
	// It is the uncorrected latency: from sending the request to its last
	// body byte, as the target served it.
	Latency *Histogram
	// CorrectedLatency (open model only; nil under the closed model) holds
	// the same responses measured from when the request was meant to be
	// sent: the uncorrected latency plus how late its iteration started
	// against the schedule (coordinated-omission correction, as wrk2 does).
	// It is what a user arriving on schedule would have waited.
	CorrectedLatency *Histogram
	// Checks counts the step's checks, in the step's order.
	Checks []CheckResult
}

// Result is what a run counted when it ended.
type Result struct {
	Snapshot
}

// StepStats converts the snapshot to wire form. Histograms are cumulative
// since the run started (not deltas), so a receiver replaces its previous
// view of this workflow rather than adding to it; merging across workflows
// or datacenters is MergeStepStats.
//
// The per-second Series travels separately (wire.WorkflowProgress.Series,
// filled by the worker), not in the step stats.
func (s Snapshot) StepStats() ([]wire.StepStats, error) {
	out := make([]wire.StepStats, len(s.Steps))
	for i, st := range s.Steps {
		out[i] = wire.StepStats{
			StepName:       st.Name,
			CompletedCount: st.Completed,
			FailedCount:    st.Failed,
			TotalCount:     st.Completed + st.Failed,
			Statuses:       maps.Clone(st.Statuses),
			BytesSent:      st.Sent,
			BytesReceived:  st.Received,
		}
		for _, c := range st.Checks {
			out[i].Checks = append(out[i].Checks, wire.CheckStats{Name: c.Name, Passed: c.Passed, Failed: c.Failed})
		}
		for class, n := range st.Errors {
			if out[i].Errors == nil {
				out[i].Errors = make(map[string]int64, len(st.Errors))
			}
			out[i].Errors[string(class)] = n
		}
		if st.Latency != nil && st.Latency.Count() > 0 {
			b, err := st.Latency.Encode()
			if err != nil {
				return nil, fmt.Errorf("step %q: %w", st.Name, err)
			}
			out[i].Histogram = b
		}
		if st.CorrectedLatency != nil && st.CorrectedLatency.Count() > 0 {
			b, err := st.CorrectedLatency.Encode()
			if err != nil {
				return nil, fmt.Errorf("step %q corrected: %w", st.Name, err)
			}
			out[i].CorrectedHistogram = b
		}
	}
	return out, nil
}

// MaxMergeSteps bounds the distinct step names MergeStepStats accepts: each
// costs a histogram decode, merge and encode, and a hostile peer must not
// turn one message into minutes of work.
const MaxMergeSteps = 1024

// MergeStepStats merges two step lists by step name: counts add and
// histograms merge bucket by bucket, which is exact (the merged histogram
// is the one a single recorder of every sample would have built). Steps keep
// a's order, then b's new names in b's order; entries repeating a name within
// one list merge too. Inputs may come from the network: negative or
// overflowing counts and undecodable histograms are errors, and the output
// always holds freshly encoded histograms.
func MergeStepStats(a, b []wire.StepStats) ([]wire.StepStats, error) {
	var order []string
	groups := map[string][]wire.StepStats{}
	for _, list := range [][]wire.StepStats{a, b} {
		for _, st := range list {
			if _, seen := groups[st.StepName]; !seen {
				if len(order) == MaxMergeSteps {
					return nil, fmt.Errorf("merge step stats: more than %d steps", MaxMergeSteps)
				}
				order = append(order, st.StepName)
			}
			groups[st.StepName] = append(groups[st.StepName], st)
		}
	}
	out := make([]wire.StepStats, 0, len(order))
	for _, name := range order {
		merged, err := mergeStep(name, groups[name])
		if err != nil {
			return nil, fmt.Errorf("merge step stats: step %q: %w", truncate(name, 40), err)
		}
		out = append(out, merged)
	}
	return out, nil
}

func mergeStep(name string, parts []wire.StepStats) (wire.StepStats, error) {
	m := wire.StepStats{StepName: name}
	var hist, corrected *Histogram
	for _, p := range parts {
		var err error
		if m.CompletedCount, err = addCount(m.CompletedCount, p.CompletedCount); err != nil {
			return m, fmt.Errorf("completed: %w", err)
		}
		if m.FailedCount, err = addCount(m.FailedCount, p.FailedCount); err != nil {
			return m, fmt.Errorf("failed: %w", err)
		}
		if m.TotalCount, err = addCount(m.TotalCount, p.TotalCount); err != nil {
			return m, fmt.Errorf("total: %w", err)
		}
		if m.BytesSent, err = addCount(m.BytesSent, p.BytesSent); err != nil {
			return m, fmt.Errorf("bytes sent: %w", err)
		}
		if m.BytesReceived, err = addCount(m.BytesReceived, p.BytesReceived); err != nil {
			return m, fmt.Errorf("bytes received: %w", err)
		}
		if m.Errors, err = addCounts(m.Errors, p.Errors); err != nil {
			return m, fmt.Errorf("errors: %w", err)
		}
		if m.Statuses, err = addCounts(m.Statuses, p.Statuses); err != nil {
			return m, fmt.Errorf("statuses: %w", err)
		}
		if m.Checks, err = addChecks(m.Checks, p.Checks); err != nil {
			return m, fmt.Errorf("checks: %w", err)
		}
		if hist, err = mergeEncoded(hist, p.Histogram); err != nil {
			return m, err
		}
		if corrected, err = mergeEncoded(corrected, p.CorrectedHistogram); err != nil {
			return m, fmt.Errorf("corrected: %w", err)
		}
	}
	if hist != nil && hist.Count() > 0 {
		b, err := hist.Encode()
		if err != nil {
			return m, err
		}
		m.Histogram = b
	}
	if corrected != nil && corrected.Count() > 0 {
		b, err := corrected.Encode()
		if err != nil {
			return m, err
		}
		m.CorrectedHistogram = b
	}
	return m, nil
}

// maxMergeKeys bounds the distinct error classes or status codes a merged
// step keeps: real ones are a handful, and a hostile peer must not grow a
// record without bound.
const maxMergeKeys = 256

// addCounts adds b's counts into acc (nil starts one).
func addCounts[K comparable](acc, b map[K]int64) (map[K]int64, error) {
	for k, n := range b {
		if acc == nil {
			acc = make(map[K]int64, len(b))
		}
		if _, ok := acc[k]; !ok && len(acc) >= maxMergeKeys {
			return acc, fmt.Errorf("more than %d distinct keys", maxMergeKeys)
		}
		v, err := addCount(acc[k], n)
		if err != nil {
			return acc, err
		}
		acc[k] = v
	}
	return acc, nil
}

// addChecks adds b's check counts into acc by name, keeping acc's order
// and then b's new names in b's order.
func addChecks(acc, b []wire.CheckStats) ([]wire.CheckStats, error) {
	for _, c := range b {
		i := slices.IndexFunc(acc, func(a wire.CheckStats) bool { return a.Name == c.Name })
		if i < 0 {
			if len(acc) >= maxMergeKeys {
				return acc, fmt.Errorf("more than %d distinct checks", maxMergeKeys)
			}
			acc = append(acc, wire.CheckStats{Name: c.Name})
			i = len(acc) - 1
		}
		var err error
		if acc[i].Passed, err = addCount(acc[i].Passed, c.Passed); err != nil {
			return acc, fmt.Errorf("%q passed: %w", truncate(c.Name, 40), err)
		}
		if acc[i].Failed, err = addCount(acc[i].Failed, c.Failed); err != nil {
			return acc, fmt.Errorf("%q failed: %w", truncate(c.Name, 40), err)
		}
	}
	return acc, nil
}

// mergeEncoded merges an encoded histogram into acc (nil starts one).
func mergeEncoded(acc *Histogram, enc []byte) (*Histogram, error) {
	if len(enc) == 0 {
		return acc, nil
	}
	h, err := DecodeHistogram(enc)
	if err != nil {
		return acc, err
	}
	if acc == nil {
		return h, nil
	}
	return acc, acc.Merge(h)
}

func addCount(a, b int64) (int64, error) {
	if b < 0 {
		return 0, fmt.Errorf("negative count %d", b)
	}
	if b > math.MaxInt64-a {
		return 0, fmt.Errorf("count overflows")
	}
	return a + b, nil
}
