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
// never produced twice. Only the leader answers, once it has read a
// majority's checkpoints this term (a follower, or a leader before that,
// may lack groups a majority holds, and would show rows missing); a
// follower answers NotLeader, which the API server forwards.
func (m *Manager) PipelineOutput(ctx context.Context, jobID, workflow string, withRows bool) (*api.PipelineOutput, error) {
	if err := m.rsAwaitSynced(ctx); err != nil {
		return nil, err
	}
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

// rsAwaitSynced waits until this manager leads and has read, in this term,
// the checkpoints of a majority: what it then serves holds every
// acknowledged checkpoint. Not leading, or no longer, it answers with the
// leader's API address.
func (m *Manager) rsAwaitSynced(ctx context.Context) error {
	for {
		lt, err := m.awaitLeader(ctx, m.notLeaderAPI)
		if err != nil {
			return err
		}
		synced := m.rs.syncedChan() // before the check: a sync after it closes it
		if m.rs.syncedTerm.Load() == lt.Number() {
			return nil
		}
		select {
		case <-synced:
		case <-lt.Context().Done(): // the term ended: point at the next leader
		case <-ctx.Done():
			return wire.Errorf(wire.CodeUnavailable, "leader is still reading the pipelines' state: %v", context.Cause(ctx))
		}
	}
}

// syncedChan returns a channel closed at the next setSynced.
func (s *rsStore) syncedChan() <-chan struct{} {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if s.syncedCh == nil {
		s.syncedCh = make(chan struct{})
	}
	return s.syncedCh
}

// setSynced records that this manager, leading in term, has read a
// majority's checkpoints, and wakes those waiting for it.
func (s *rsStore) setSynced(term uint64) {
	s.syncedTerm.Store(term)
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if s.syncedCh != nil {
		close(s.syncedCh)
		s.syncedCh = nil
	}
}
