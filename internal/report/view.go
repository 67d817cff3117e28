package report

import (
	"html/template"
	"time"
)

// view is what the template sees: the job plus everything computed for it.
type view struct {
	*Job
	Duration  string
	Generated string
	Workflows []workflowView
	// HasThresholds: some workflow has a verdict; without one the header
	// has no thresholds card (it would say "passed" about nothing).
	HasThresholds bool
}

type workflowView struct {
	*Workflow
	Throughput   *chart // nil without a series
	Latency      *chart // nil without a series
	Distribution *chart // nil when no step has a distribution
}

func newView(j *Job) view {
	v := view{Job: j}
	if j.Duration > 0 {
		v.Duration = j.Duration.Round(100 * time.Millisecond).String()
	}
	if !j.Generated.IsZero() {
		v.Generated = j.Generated.UTC().Format(time.RFC3339)
	}
	for i := range j.Workflows {
		wf := &j.Workflows[i]
		wv := workflowView{Workflow: wf}
		v.HasThresholds = v.HasThresholds || len(wf.Thresholds) > 0
		if series := wholeSeconds(wf.Series, wf.ElapsedSeconds); len(series) > 0 {
			wv.Throughput = throughputChart(series)
			wv.Latency = latencyChart(series)
		}
		for _, s := range wf.Steps {
			if len(s.Distribution) > 0 {
				wv.Distribution = distributionChart(wf.Steps)
				break
			}
		}
		v.Workflows = append(v.Workflows, wv)
	}
	return v
}

// wholeSeconds drops a last second the run did not cover whole: its few
// requests drawn as a full second's rate would plunge the throughput line
// at the end of every run. elapsed zero (unknown) keeps every second.
func wholeSeconds(series []Second, elapsed float64) []Second {
	if n := len(series); n > 0 && elapsed > 0 && float64(series[n-1].At+1) > elapsed+0.001 {
		return series[:n-1]
	}
	return series
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"ms":    fmtMs,
	"count": fmtCount,
	"num":   num,
	"add":   func(a, b float64) float64 { return a + b },
}).Parse(pageHTML))
