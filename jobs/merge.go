package jobs

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"tempest/wire"
	"tempest/workflow"
)

// WorkflowPart is one piece of a workflow that runs in pieces: a shard on
// one worker (shards: N), the workflow's run in one datacenter (through a
// gate), or both.
type WorkflowPart struct {
	// Label prefixes the part's worker ("dc1/") and error ("dc1: ").
	Label    string
	Progress wire.WorkflowProgress // status, counts, step histograms, series, worker, error
	Attempts int
	Cores    []int
}

// MergeWorkflow is one workflow's status from its parts: counts summed,
// step histograms merged exactly (never percentiles averaged), thresholds
// judged on the merged histograms once every part ended (th: spec's
// thresholds, parsed once with the job's Model). expected is how
// many parts there will be: fewer means some have not started. detail adds
// what only results carry (series, latency distributions). The error is
// for undecodable statistics; the status is still usable without them.
func MergeWorkflow(spec wire.WorkflowSpec, th *workflow.CompiledThresholds, parts []WorkflowPart, expected int, detail bool) (WorkflowStatus, error) {
	ws := WorkflowStatus{Name: spec.Name, Type: spec.Type, PlannedSeconds: spec.Planned.Seconds()}
	var ids, workers []string
	var errs reasons
	var steps []wire.StepStats
	var elapsed time.Duration
	statuses := make([]wire.WorkflowStatus, 0, len(parts))
	var recent [][]wire.SecondStats
	var waits waiting
	for _, part := range parts {
		p := &part.Progress
		statuses = append(statuses, p.Status)
		if p.Waiting != "" && !p.Status.Terminal() {
			waits.add(part.Label, p.Waiting)
		}
		ids = append(ids, p.WorkflowID)
		if p.WorkerID != "" {
			workers = append(workers, part.Label+p.WorkerID)
		}
		if p.Error != "" {
			errs.add(part.Label, p.Error)
		}
		ws.CompletedCount += p.CompletedCount
		ws.FailedCount += p.FailedCount
		ws.DroppedIterations += p.DroppedIterations
		ws.Attempts = max(ws.Attempts, part.Attempts)
		ws.LostAttempts = append(ws.LostAttempts, LostAttempts(part.Label, p.Lost)...)
		ws.Cores = append(ws.Cores, part.Cores...)
		steps = append(steps, p.StepStats...)
		elapsed = max(elapsed, p.Elapsed)
		if n := len(p.Series); n > 0 && !p.Status.Terminal() {
			// Parts started a moment apart: their newest seconds count
			// as one.
			last := p.Series[n-1]
			last.Second = 0
			recent = append(recent, []wire.SecondStats{last})
		}
	}
	ws.WorkflowID = strings.Join(ids, ",")
	ws.Worker = strings.Join(workers, ",")
	ws.Error = errs.String(len(parts))
	ws.ElapsedSeconds = elapsed.Seconds()
	ws.Status = MergedWorkflowStatus(statuses, expected)
	if !ws.Status.Terminal() {
		ws.Waiting = waits.String()
		if merged := MergeSeries(recent); len(merged) > 0 {
			r := SeriesPoints(merged[len(merged)-1:])[0]
			ws.Recent = &r
		}
	}
	if detail {
		var series [][]wire.SecondStats
		for _, part := range parts {
			series = append(series, part.Progress.Series)
		}
		ws.Series = SeriesPoints(MergeSeries(series))
	}
	if len(steps) == 0 {
		return ws, nil
	}
	sums, merged, err := StepSummaries(steps)
	if err != nil {
		return ws, err
	}
	ws.Steps = sums
	if th.Len() > 0 && ws.Status.Terminal() {
		ws.Thresholds = ThresholdResults(th.Evaluate(merged, ws.CompletedCount, ws.FailedCount, elapsed))
	}
	if detail {
		err = AddDistributions(ws.Steps, merged)
	}
	return ws, err
}

// waiting counts, per label (datacenter), the parts that wait for a
// placement, with the first reason given.
// reasons are the parts' errors, each named once with the parts it ended
// (a cancel stops every shard for one reason; it is said once).
type reasons []reason

type reason struct {
	why    string
	labels []string
	n      int
}

func (r *reasons) add(label, why string) {
	name := strings.TrimSuffix(label, "/")
	for i := range *r {
		if (*r)[i].why == why {
			(*r)[i].n++
			if name != "" && !slices.Contains((*r)[i].labels, name) {
				(*r)[i].labels = append((*r)[i].labels, name)
			}
			return
		}
	}
	e := reason{why: why, n: 1}
	if name != "" {
		e.labels = []string{name}
	}
	*r = append(*r, e)
}

// String reads "east, west: worker lost; south: cancelled", or the reason
// alone when every one of the parts gave it (or none is labelled).
func (r reasons) String(parts int) string {
	if len(r) == 1 && r[0].n == parts {
		return r[0].why
	}
	out := make([]string, 0, len(r))
	for _, e := range r {
		if len(e.labels) == 0 {
			out = append(out, e.why)
			continue
		}
		out = append(out, strings.Join(e.labels, ", ")+": "+e.why)
	}
	return strings.Join(out, "; ")
}

type waiting []waitCount

type waitCount struct {
	label, why string
	n          int
}

func (w *waiting) add(label, why string) {
	for i := range *w {
		if (*w)[i].label == label {
			(*w)[i].n++
			return
		}
	}
	*w = append(*w, waitCount{label, why, 1})
}

// String reads "dc1: 2 parts waiting: no free core (needs 1); dc2: ...".
func (w waiting) String() string {
	var out []string
	for _, l := range w {
		s := fmt.Sprintf("%d part%s waiting: %s", l.n, plural(l.n), l.why)
		if name := strings.TrimSuffix(l.label, "/"); name != "" {
			s = name + ": " + s
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// MergeSeries adds per-second points of several parts: counts are summed;
// p50/p99 are completion-weighted means, good for drawing only (thresholds
// and summaries use the merged histograms).
func MergeSeries(parts [][]wire.SecondStats) []wire.SecondStats {
	switch len(parts) {
	case 0:
		return nil
	case 1:
		return parts[0]
	}
	type acc struct {
		s           wire.SecondStats
		p50, p99, w float64
	}
	by := map[int64]*acc{}
	for _, part := range parts {
		for _, p := range part {
			a, ok := by[p.Second]
			if !ok {
				a = &acc{s: wire.SecondStats{Second: p.Second}}
				by[p.Second] = a
			}
			a.s.Completed += p.Completed
			a.s.Failed += p.Failed
			a.s.Dropped += p.Dropped
			a.s.VUs += p.VUs
			w := float64(max(p.Completed, 1))
			a.p50 += w * float64(p.P50)
			a.p99 += w * float64(p.P99)
			a.w += w
		}
	}
	out := make([]wire.SecondStats, 0, len(by))
	for _, a := range by {
		if a.w > 0 {
			a.s.P50 = time.Duration(a.p50 / a.w)
			a.s.P99 = time.Duration(a.p99 / a.w)
		}
		out = append(out, a.s)
	}
	slices.SortFunc(out, func(a, b wire.SecondStats) int { return cmp.Compare(a.Second, b.Second) })
	return out
}
