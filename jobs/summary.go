package jobs

import (
	"fmt"
	"strconv"
	"time"

	"tempest/wire"
	"tempest/workflow"
)

// The conversions below turn wire statistics into the API's shapes. Managers
// and gates both use them, so a step's p99 means the same thing whichever
// role answers: a percentile of the merged HDR histogram, never an average
// of percentiles.

// StepSummaries merges steps by name (histograms merged exactly) and
// summarises each: counts and latency percentiles in milliseconds. It also
// returns the merged steps, for callers that go on to Distribution.
func StepSummaries(steps []wire.StepStats) ([]StepSummary, []wire.StepStats, error) {
	merged, err := workflow.MergeStepStats(nil, steps)
	if err != nil {
		return nil, nil, fmt.Errorf("merge step statistics: %w", err)
	}
	out := make([]StepSummary, 0, len(merged))
	for _, s := range merged {
		sum := StepSummary{Name: s.StepName, Completed: s.CompletedCount, Failed: s.FailedCount,
			Errors: s.Errors, BytesReceived: s.BytesReceived, BytesSent: s.BytesSent}
		for _, c := range s.Checks {
			sum.Checks = append(sum.Checks, CheckSummary{Name: c.Name, Passed: c.Passed, Failed: c.Failed})
		}
		for code, n := range s.Statuses {
			if sum.Statuses == nil {
				sum.Statuses = make(map[string]int64, len(s.Statuses))
			}
			sum.Statuses[strconv.Itoa(code)] = n
		}
		if ps, err := workflow.Percentiles(s.Histogram, 50, 90, 95, 99, 99.9, 100); err == nil {
			sum.P50Ms, sum.P90Ms, sum.P95Ms, sum.P99Ms, sum.P999Ms, sum.MaxMs =
				Ms(ps[0]), Ms(ps[1]), Ms(ps[2]), Ms(ps[3]), Ms(ps[4]), Ms(ps[5])
		}
		if len(s.CorrectedHistogram) > 0 {
			if ps, err := workflow.Percentiles(s.CorrectedHistogram, 50, 99); err == nil {
				sum.CorrectedP50Ms, sum.CorrectedP99Ms = Ms(ps[0]), Ms(ps[1])
			}
		}
		out = append(out, sum)
	}
	return out, merged, nil
}

// AddDistributions fills each summary's Distribution from the merged steps
// of the same name (as StepSummaries returned them). Only results carry a
// distribution: it decodes every histogram again.
func AddDistributions(sums []StepSummary, merged []wire.StepStats) error {
	pcts := DistributionPercentiles()
	byName := make(map[string][]byte, len(merged))
	for _, s := range merged {
		byName[s.StepName] = s.Histogram
	}
	for i := range sums {
		h, ok := byName[sums[i].Name]
		if !ok || len(h) == 0 {
			continue
		}
		ds, err := workflow.Percentiles(h, pcts...)
		if err != nil {
			return fmt.Errorf("step %s latency distribution: %w", sums[i].Name, err)
		}
		dist := make([]PercentilePoint, len(ds))
		for j, d := range ds {
			dist[j] = PercentilePoint{Percentile: pcts[j], Ms: Ms(d)}
		}
		sums[i].Distribution = dist
	}
	return nil
}

// SeriesPoints converts a run's per-second points, keeping at most
// wire.MaxSeriesEntries.
func SeriesPoints(series []wire.SecondStats) []SeriesPoint {
	series = wire.ClipSeries(series, 0)
	if len(series) == 0 {
		return nil
	}
	out := make([]SeriesPoint, len(series))
	for i, p := range series {
		out[i] = SeriesPoint{Second: p.Second, Completed: p.Completed, Failed: p.Failed,
			Dropped: p.Dropped, VUs: p.VUs, P50Ms: Ms(p.P50), P99Ms: Ms(p.P99)}
	}
	return out
}

// ThresholdResults converts verdicts to the API's shape.
func ThresholdResults(rs []wire.ThresholdResult) []ThresholdResult {
	var out []ThresholdResult
	for _, r := range rs {
		out = append(out, ThresholdResult{Expr: r.Expr, Step: r.Step, Passed: r.Passed, Actual: r.Actual, AbortOnFail: r.AbortOnFail})
	}
	return out
}

// Ms is d in (fractional) milliseconds, the API's latency unit.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
