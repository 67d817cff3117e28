package jobs

import (
	"fmt"

	"tempest/wire"
	"tempest/workflow"
)

// Model is what a role works out from a job's workflow specs once and keeps
// with the job: its groups (Groups) and each group's thresholds, parsed. The
// thresholds are judged on every status and, for abort_on_fail, every
// second of a run; parsing their text each time was most of nothing, many
// times over. A Model is immutable.
type Model struct {
	groups []Group
	th     []*workflow.CompiledThresholds // per group
	abort  []*workflow.CompiledThresholds // per group: the abort_on_fail ones
}

// NewModel works specs out. A split workflow's shards share their
// thresholds, so a group's are its first spec's.
func NewModel(specs []wire.WorkflowSpec) *Model {
	m := &Model{groups: Groups(specs)}
	for _, g := range m.groups {
		th := workflow.CompileThresholds(specs[g.Start].Thresholds)
		m.th = append(m.th, th)
		m.abort = append(m.abort, th.AbortOnFail())
	}
	return m
}

// Model is j's Model.
func (j *Job) Model() *Model { return NewModel(j.Workflows) }

// Groups is the job's groups, in submission order.
func (m *Model) Groups() []Group { return m.groups }

// GroupOf is the index in Groups of the group that holds spec i, or -1.
func (m *Model) GroupOf(i int) int {
	for k, g := range m.groups {
		if g.Contains(i) {
			return k
		}
	}
	return -1
}

// Thresholds is group g's thresholds.
func (m *Model) Thresholds(g int) *workflow.CompiledThresholds { return m.th[g] }

// AbortOnFail is group g's abort_on_fail thresholds.
func (m *Model) AbortOnFail(g int) *workflow.CompiledThresholds { return m.abort[g] }

// HasAbortOnFail reports whether any workflow of the job has an
// abort_on_fail threshold.
func (m *Model) HasAbortOnFail() bool {
	for _, a := range m.abort {
		if a.Len() > 0 {
			return true
		}
	}
	return false
}

// AbortReason is the error a job ends with when an abort_on_fail threshold
// of workflow name failed mid-run: the first of results that failed on
// data (a threshold with no data yet only means nothing was measured), or
// "" and false. Both roles end a job with it, and the API reads the prefix.
func AbortReason(name string, results []wire.ThresholdResult) (string, wire.ThresholdResult, bool) {
	for _, r := range results {
		if r.Passed || r.Actual == workflow.NoData {
			continue
		}
		reason := fmt.Sprintf("%s%s (actual %s) in workflow %s", wire.ThresholdAbortPrefix, r.Expr, r.Actual, name)
		if r.Step != "" {
			reason += ", step " + r.Step
		}
		return reason, r, true
	}
	return "", wire.ThresholdResult{}, false
}
