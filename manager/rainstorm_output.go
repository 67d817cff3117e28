package manager

import (
	"cmp"
	"context"
	"fmt"
	"iter"
	"math"
	"slices"

	"tempest/api"
	"tempest/rainstorm"
	"tempest/rsstore"
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
	out, rows, err := m.pipelineOutput(ctx, jobID, workflow, withRows)
	if err != nil {
		return nil, err
	}
	if withRows {
		out.Rows = [][]string{}
		for r := range rows {
			out.Rows = append(out.Rows, r)
		}
	}
	return out, nil
}

// PipelineOutputRows implements api.OutputStreamer: the output's summary,
// as PipelineOutput gives it without rows, and its rows in output order,
// read from the store as the sequence is ranged over (rainstorm_rows.go),
// so a read of the output holds a row per run of it rather than every
// row. The rows are those of the checkpoints durable when it was called.
func (m *Manager) PipelineOutputRows(ctx context.Context, jobID, workflow string) (*api.PipelineOutput, iter.Seq[[]string], error) {
	return m.pipelineOutput(ctx, jobID, workflow, true)
}

// pipelineOutput is the summary of a pipeline's output and, with
// withRows, its rows as a sequence.
func (m *Manager) pipelineOutput(ctx context.Context, jobID, workflow string, withRows bool) (*api.PipelineOutput, iter.Seq[[]string], error) {
	out, src, err := m.pipelineSummary(ctx, jobID, workflow)
	if err != nil || !withRows {
		return out, nil, err
	}
	cursors := make([]rsstore.RowsCursor, len(src.tasks))
	for i, t := range src.tasks {
		cursors[i] = m.rs.RowsCursor(t)
	}
	merged := rsMergeRows(cursors, src.aggregate)
	return out, func(yield func([]string) bool) {
		for r := range merged {
			if !yield(r.Fields) {
				return
			}
		}
	}, nil
}

// rsOutputSource is where a pipeline's output rows are: the last stage's
// tasks that hold a part of it, and whether that stage aggregates (which
// orders the rows by key rather than by input id).
type rsOutputSource struct {
	tasks     []wire.RainstormTask
	aggregate bool
}

// pipelineSummary is the summary of a pipeline's output, and where its
// rows are.
func (m *Manager) pipelineSummary(ctx context.Context, jobID, workflow string) (*api.PipelineOutput, rsOutputSource, error) {
	var src rsOutputSource
	if err := m.rsAwaitSynced(ctx); err != nil {
		return nil, src, err
	}
	spec, order, infos := m.rsTasks(jobID, workflow)
	if spec == nil {
		return nil, src, wire.Errorf(wire.CodeNotFound, "job %s has no rainstorm workflow %q", jobID, workflow)
	}
	out := &api.PipelineOutput{JobID: jobID, Workflow: workflow, Complete: true}
	if v, ok := m.viewJob(jobID); ok {
		out.Status = m.jobStatus(v, false).Status
	}
	last := len(spec.Stages)
	src.aggregate = spec.Stages[last-1].Op.Aggregate()
	// A resizable pipeline's last stage is complete with the tasks of the
	// epochs its source reached: a dormant task never ran.
	epochs, cur, _ := rsEpochsOf(spec, m.rs.Head(wire.RainstormTask{Job: jobID, Workflow: workflow}))
	if spec.Resizable() {
		out.StageTasks = append([]int{1}, epochs[cur].Tasks...)
		decided := m.rsScale.resizes(rsPipeKey{jobID, workflow})
		if len(decided) == 0 {
			decided = m.rsStoredResizes(jobID, workflow)
		}
		out.Resizes = rsRecordedResizes(spec, epochs, decided)
		if lt := m.leading(); lt != nil {
			out.AutoscaleHeld = m.rsScale.held(rsPipeKey{jobID, workflow}, lt.Number())
		}
	}
	for i, t := range order {
		name := "source"
		if t.Stage > 0 {
			name = spec.Stages[t.Stage-1].Name
		}
		in := infos[i]
		latest := m.rs.Head(t) // counters only: not the whole aggregate state
		task := api.PipelineTask{Stage: t.Stage, Index: t.Index, Name: name, Status: in.status,
			Worker: in.worker, Attempts: in.attempts, Bad: in.bad, Waiting: in.waiting}
		switch {
		case t.Stage == 0:
			// The source's progress: well-formed records read (its
			// count), malformed ones (its failures).
			task.Records, task.RecordsOut = in.records+in.bad, in.records
			if spec.IsChained() {
				// What it sent after the chained stages and combiner,
				// which the first stage's counts are held against: from
				// its durable checkpoint, so a record counts once.
				task.RecordsOut = 0
				if latest != nil {
					task.RecordsOut = int64(latest.RecordsOut)
				}
			}
		case latest != nil:
			// A stage's durable counts: its progress would count work a
			// crash then undid, and miss what it redid.
			task.Records, task.RecordsOut = int64(latest.RecordsIn), int64(latest.RecordsOut)
		}
		out.Tasks = append(out.Tasks, task)
		out.Restarts += max(in.attempts-1, 0)
		if latest != nil {
			out.BadRecords += latest.BadRecords
			if src := latest.Source; src != nil {
				for _, id := range src.BadFirst {
					out.BadFirst = append(out.BadFirst, id+1)
				}
			}
		}
		if t.Stage != last {
			continue
		}
		// Complete once every last-stage task's final checkpoint is
		// durable (its rows with it), not once its part has ended and its
		// status reached the job table, which is later.
		if latest == nil && spec.Resizable() && !existsIn(epochs, t.Stage, t.Index, 0, cur) {
			continue
		}
		if latest == nil || !latest.Done {
			out.Complete = false
		}
		src.tasks = append(src.tasks, t)
	}
	header, _ := m.rs.Header(jobID, workflow)
	out.Header = rainstorm.Columns(spec, header, last)
	return out, src, nil
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
		synced := m.rs.SyncedChan() // before the check: a sync after it closes it
		if m.rs.Synced(lt.Number()) {
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

// rsRecordedResizes is a pipeline's resizes for its status: the decisions
// this leader took (with their inputs and figures), and, for every change
// of a stage's size the source's durable epochs record that none of them
// explains — one decided under an earlier leader — an entry made from the
// epoch alone (no time, no inputs). The epochs are the durable history;
// the decisions' inputs and figures are the leader's memory.
func rsRecordedResizes(spec *rainstorm.Spec, epochs []wire.RainstormEpoch, decided []api.PipelineResize) []api.PipelineResize {
	known := map[rsResizeKey]bool{}
	for _, r := range decided {
		known[rsResizeKey{r.Stage, r.Epoch}] = true
	}
	var out []api.PipelineResize
	for e := 1; e < len(epochs); e++ {
		for st := range min(len(epochs[e].Tasks), len(epochs[e-1].Tasks), len(spec.Stages)) {
			from, to := epochs[e-1].Tasks[st], epochs[e].Tasks[st]
			name := spec.Stages[st].Name
			if from == to || known[rsResizeKey{name, uint64(e)}] {
				continue
			}
			out = append(out, api.PipelineResize{Stage: name, From: from, To: to, Epoch: uint64(e),
				Decision: fmt.Sprintf("%d → %d tasks: recorded by the source at segment %d (decided under an earlier leader)", from, to, epochs[e].Segment)})
		}
	}
	if len(out) == 0 {
		return decided
	}
	// In epoch order; this leader's decisions not yet recorded last.
	out = append(out, decided...)
	slices.SortStableFunc(out, func(a, b api.PipelineResize) int {
		ea, eb := a.Epoch, b.Epoch
		if ea == 0 {
			ea = math.MaxUint64
		}
		if eb == 0 {
			eb = math.MaxUint64
		}
		return cmp.Compare(ea, eb)
	})
	return out
}
