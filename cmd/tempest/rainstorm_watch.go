package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"tempest/api"
	"tempest/rainstorm"
	"tempest/wire"
)

// pipelineEvery is how often watch asks for a pipeline's per-task view.
const pipelineEvery = 500 * time.Millisecond

// pipelineResizesShown is how many of an autoscaled pipeline's latest
// resize decisions watch prints.
const pipelineResizesShown = 3

// pipelineView is the newest per-task view of one RainStorm workflow and the
// per-stage rates derived from the views before it.
type pipelineView struct {
	out    *api.PipelineOutput
	meters map[int]*rateMeter // by stage
	asked  time.Time
}

// pipelines fetches, at most every pipelineEvery, the per-task view of each
// RainStorm workflow of st for the display.
func (d *display) pipelines(ctx context.Context, c *api.Client, st api.JobStatus) {
	for _, wf := range st.Workflows {
		if wf.Type != rainstorm.TypeName {
			continue
		}
		if d.pipes == nil {
			d.pipes = map[string]*pipelineView{}
		}
		v := d.pipes[wf.Name]
		if v == nil {
			v = &pipelineView{meters: map[int]*rateMeter{}}
			d.pipes[wf.Name] = v
		}
		if d.now().Sub(v.asked) < pipelineEvery && !st.Status.Terminal() {
			continue
		}
		v.asked = d.now()
		// The summary alone: the rows may be large, and watch shows none.
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		out, err := c.OutputSummary(cctx, st.JobID, wf.Name)
		cancel()
		if err != nil {
			continue
		}
		v.out = out
		records := map[int]int64{}
		for _, t := range out.Tasks {
			records[t.Stage] += t.Records
		}
		for stage, n := range records {
			m := v.meters[stage]
			if m == nil {
				m = &rateMeter{}
				v.meters[stage] = m
			}
			m.observe(n, st.ElapsedSeconds)
		}
	}
}

// pipelineLines are a pipeline's stages under its workflow line: per stage
// its tasks (running of all), tuples/s taken in, records in and out,
// restarts and bad records; the source's backlog is what it passed on that
// the first stage has not yet taken in durably (none once the pipeline has
// finished). A task that waits for a placement gets a line saying why
// ("task count/2 waiting: no free core"). An autoscaled pipeline shows each
// stage's size in the epoch its source sends in (tasks running/size) and
// its latest resize decisions, so the size is seen changing over time.
func (d *display) pipelineLines(name, indent string) []string {
	v := d.pipes[name]
	if v == nil || v.out == nil {
		return nil
	}
	type agg struct {
		name                     string
		tasks, running, restarts int
		in, out, bad             int64
	}
	var stages []*agg
	// Tasks waiting for the same reason share a line: a pipeline placed
	// whole waits with all its tasks at once.
	var reasons []string
	waiting := map[string][]string{}
	for _, t := range v.out.Tasks {
		if t.Waiting != "" && t.Status == wire.WorkflowPending && !v.out.Status.Terminal() {
			name := "source"
			if t.Stage > 0 {
				name = fmt.Sprintf("%s/%d", t.Name, t.Index+1)
			}
			if _, ok := waiting[t.Waiting]; !ok {
				reasons = append(reasons, t.Waiting)
			}
			waiting[t.Waiting] = append(waiting[t.Waiting], name)
		}
		for len(stages) <= t.Stage {
			stages = append(stages, &agg{})
		}
		a := stages[t.Stage]
		a.name = t.Name
		a.tasks++
		if t.Status == wire.WorkflowRunning {
			a.running++
		}
		a.restarts += max(t.Attempts-1, 0)
		a.in += t.Records
		a.out += t.RecordsOut
		a.bad += t.Bad
	}
	for s, n := range v.out.StageTasks {
		if s < len(stages) {
			stages[s].tasks = n // the parts beyond it are dormant or retired
		}
	}
	var lines []string
	for s, a := range stages {
		line := fmt.Sprintf("%s%-10s tasks %d/%d  %s  records in %d out %d  restarts %d  bad %d", indent, a.name, a.running, a.tasks,
			formatRate(v.meters[s].rateOrZero()), a.in, a.out, a.restarts, a.bad)
		if s == 0 && len(stages) > 1 {
			line += fmt.Sprintf("  backlog %d", max(a.out-stages[1].in, 0))
		}
		lines = append(lines, strings.TrimRight(line, " "))
	}
	rs := v.out.Resizes
	for _, r := range rs[max(len(rs)-pipelineResizesShown, 0):] {
		when := "at " + r.At.Local().Format("15:04:05")
		if r.At.IsZero() { // recorded by the source under an earlier leader
			when = fmt.Sprintf("in epoch %d", r.Epoch)
		}
		lines = append(lines, fmt.Sprintf("%sresize %s: %s %s%s", indent, when, r.Stage, r.Decision, resizeFigures(r)))
	}
	for _, why := range reasons {
		names := waiting[why]
		what := "task"
		if len(names) > 1 {
			what = "tasks"
		}
		if len(names) > 3 {
			names = append(names[:3:3], fmt.Sprintf("%d more", len(names)-3))
		}
		lines = append(lines, fmt.Sprintf("%s%s %s waiting: %s", indent, what, strings.Join(names, ", "), why))
	}
	return lines
}

func (m *rateMeter) rateOrZero() float64 {
	if m == nil {
		return 0
	}
	return m.rate
}

// resizeFigures is what a resize has shown so far: when its size was in
// force, and what its handovers moved.
func resizeFigures(r api.PipelineResize) string {
	var parts []string
	if r.InForce > 0 {
		parts = append(parts, fmt.Sprintf("in force after %s, %d groups moved", r.InForce.Round(100*time.Millisecond), r.GroupsMoved))
	}
	if r.KeysMoved > 0 || r.Handover > 0 {
		p := fmt.Sprintf("%d keys (%d bytes) handed over", r.KeysMoved, r.BytesMoved)
		if r.Handover > 0 {
			p += fmt.Sprintf(" in %s", r.Handover.Round(time.Millisecond))
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, ", ")
}
