package manager

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"

	"tempest/api"
	"tempest/rainstorm"
	"tempest/wire"
)

// PipelineOutput implements api.OutputBackend from this manager's store:
// every durable checkpoint's rows of the last stage's tasks. Rows enter the
// store only with the checkpoint that produced them, so what is shown was
// never produced twice.
func (m *Manager) PipelineOutput(_ context.Context, jobID, workflow string, withRows bool) (*api.PipelineOutput, error) {
	spec, order, infos := m.rsTasks(jobID, workflow)
	if spec == nil {
		return nil, wire.Errorf(wire.CodeNotFound, "job %s has no rainstorm workflow %q", jobID, workflow)
	}
	out := &api.PipelineOutput{JobID: jobID, Workflow: workflow, Complete: true}
	if v, ok := m.viewJob(jobID); ok {
		out.Status = m.jobStatus(v, false).Status
	}
	last := len(spec.Stages)
	var rows []wire.RainstormRecord
	m.rs.mu.Lock()
	for i, t := range order {
		name := "source"
		if t.Stage > 0 {
			name = spec.Stages[t.Stage-1].Name
		}
		in := infos[i]
		st := m.rs.tasks[t]
		task := api.PipelineTask{Stage: t.Stage, Index: t.Index, Name: name, Status: in.status,
			Worker: in.worker, Attempts: in.attempts, Bad: in.bad, Waiting: in.waiting}
		switch {
		case t.Stage == 0:
			// The source's progress: well-formed records read (its
			// count), malformed ones (its failures).
			task.Records, task.RecordsOut = in.records+in.bad, in.records
		case st != nil && st.latest != nil:
			// A stage's durable counts: its progress would count work a
			// crash then undid, and miss what it redid.
			task.Records, task.RecordsOut = int64(st.latest.RecordsIn), int64(st.latest.RecordsOut)
		}
		out.Tasks = append(out.Tasks, task)
		out.Restarts += max(in.attempts-1, 0)
		if st != nil && st.latest != nil {
			out.BadRecords += st.latest.BadRecords
			if src := st.latest.Source; src != nil {
				for _, id := range src.BadFirst {
					out.BadFirst = append(out.BadFirst, id+1)
				}
			}
		}
		if t.Stage != last {
			continue
		}
		if infos[i].status != wire.WorkflowCompleted {
			out.Complete = false
		}
		if st == nil || !withRows {
			continue
		}
		for _, v := range slices.Sorted(maps.Keys(st.rows)) {
			rows = append(rows, st.rows[v]...)
		}
	}
	var header []string
	if h, ok := m.rs.headers[[2]string{jobID, workflow}]; ok {
		header = h.Header
	}
	m.rs.mu.Unlock()
	if spec.Stages[last-1].Op.Aggregate() {
		slices.SortFunc(rows, func(a, b wire.RainstormRecord) int { return strings.Compare(a.Fields[0], b.Fields[0]) })
	} else {
		slices.SortStableFunc(rows, func(a, b wire.RainstormRecord) int { return cmp.Compare(a.ID, b.ID) })
	}
	out.Header = rainstorm.Columns(spec, header, last)
	out.Rows = make([][]string, len(rows))
	for i, r := range rows {
		out.Rows[i] = r.Fields
	}
	return out, nil
}
