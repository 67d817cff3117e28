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
		if len(wf.Series) > 0 {
			wv.Throughput = throughputChart(wf.Series)
			wv.Latency = latencyChart(wf.Series)
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

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"ms":    fmtMs,
	"count": fmtCount,
	"num":   num,
	"add":   func(a, b float64) float64 { return a + b },
}).Parse(pageHTML))
