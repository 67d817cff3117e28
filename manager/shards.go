package manager

import (
	"fmt"
	"slices"

	"tempest/internal/store"
	"tempest/jobs"
	"tempest/wire"
	"tempest/workflow"
)

// A workflow split with shards: N is N workflows of one name, placed on
// different workers where there are enough, each with its share of the
// load. Each shard is placed, retried and fenced on its own; statuses and
// results merge them back into one workflow.

// modelLocked is j's job model (jobs.Model), worked out on first use: its
// workflows never change once the job is in memory.
func modelLocked(j *jobState) *jobs.Model {
	if j.model == nil {
		specs := make([]wire.WorkflowSpec, len(j.wfs))
		for i, w := range j.wfs {
			specs[i] = w.rec.Spec
		}
		j.model = jobs.NewModel(specs)
	}
	return j.model
}

// groupLocked is the index in w's job model of w's group (jobs.Groups):
// every shard of a split workflow, or w alone.
func groupLocked(w *workflowState) int {
	return modelLocked(w.job).GroupOf(slices.Index(w.job.wfs, w))
}

// thresholdsLocked is w's thresholds, parsed once with its job's model.
func thresholdsLocked(w *workflowState) *workflow.CompiledThresholds {
	if g := groupLocked(w); g >= 0 {
		return modelLocked(w.job).Thresholds(g)
	}
	return workflow.CompileThresholds(w.rec.Spec.Thresholds)
}

// groupMembersLocked is the workflows of w's group.
func groupMembersLocked(w *workflowState) []*workflowState {
	g := groupLocked(w)
	if g < 0 {
		return []*workflowState{w}
	}
	grp := modelLocked(w.job).Groups()[g]
	return w.job.wfs[grp.Start:grp.End]
}

// shardsStatus merges a split workflow's shards: counts summed, histograms
// merged, thresholds judged on the merged results once every shard ended.
func (m *Manager) shardsStatus(shards []store.WorkflowRecord, th *workflow.CompiledThresholds, detail bool) jobs.WorkflowStatus {
	parts := make([]jobs.WorkflowPart, len(shards))
	for i := range shards {
		rec := &shards[i]
		// The last progress carries the newest second (for a running
		// shard's recent rate); results want the whole series, which the
		// record keeps once the shard ended.
		p := workflowProgressOf(rec)
		if detail && len(rec.Series) > 0 {
			p.Series = rec.Series
		}
		parts[i] = jobs.WorkflowPart{Progress: p, Attempts: rec.Attempts, Cores: rec.Cores}
	}
	ws, err := jobs.MergeWorkflow(shards[0].Spec, th, parts, shards[0].Spec.Shards, detail)
	if err != nil {
		m.log.Warn("undecodable step statistics", "job_id", shards[0].JobID, "workflow", shards[0].Spec.Name, "err", err)
	}
	return ws
}

// siblingWorkersLocked lists the workers that w's sibling shards run on or
// are being placed on, for placement to avoid.
func siblingWorkersLocked(w *workflowState) map[string]bool {
	shards := groupMembersLocked(w)
	if len(shards) < 2 {
		return nil
	}
	out := map[string]bool{}
	for _, s := range shards {
		if s == w || s.rec.Status.Terminal() {
			continue
		}
		if s.rec.Worker != "" {
			out[s.rec.Worker] = true
		}
		if s.target != "" {
			out[s.target] = true
		}
	}
	return out
}

// splitOversized splits each workflow that asks for more cores than the
// largest live worker of this datacenter has, and whose type can split its
// load, into shards of at most that many cores, placed on different
// workers (by design: a workflow needing more cores than one worker has is split
// across workers). A workflow the job file already split, one whose type
// cannot split, or one whose load is too small to split that many ways
// keeps its shape and waits for a worker big enough. With no worker known
// yet nothing is split: a datacenter still starting up is no evidence.
func (m *Manager) splitOversized(specs []wire.WorkflowSpec) []wire.WorkflowSpec {
	largest := 0
	for _, wv := range m.workers.list() {
		if wv.Alive {
			largest = max(largest, wv.TotalCores)
		}
	}
	if largest == 0 {
		return specs
	}
	var out []wire.WorkflowSpec
	for _, spec := range specs {
		if spec.Cores <= largest || spec.Shards > 0 {
			out = append(out, spec)
			continue
		}
		n := (spec.Cores + largest - 1) / largest
		parts, err := m.splitSpec(spec, n)
		if err != nil {
			m.log.Warn("workflow needs more cores than any worker has and cannot be split; it waits for a larger worker",
				"workflow", spec.Name, "cores", spec.Cores, "largest_worker", largest, "err", err)
			out = append(out, spec)
			continue
		}
		m.log.Info("workflow split over workers", "workflow", spec.Name, "cores", spec.Cores, "largest_worker", largest, "shards", n)
		out = append(out, parts...)
	}
	return out
}

func (m *Manager) splitSpec(spec wire.WorkflowSpec, n int) ([]wire.WorkflowSpec, error) {
	typ, ok := m.reg.Lookup(spec.Type)
	if !ok {
		return nil, fmt.Errorf("unknown workflow type %q", spec.Type)
	}
	splitter, ok := typ.(workflow.Splitter)
	if !ok {
		return nil, fmt.Errorf("a %s workflow cannot be split", spec.Type)
	}
	params, err := splitter.Split(spec.Params, n)
	if err != nil {
		return nil, err
	}
	out := make([]wire.WorkflowSpec, n)
	for i := range out {
		out[i] = spec
		out[i].Params, out[i].Shard, out[i].Shards = params[i], i+1, n
		out[i].Cores = (spec.Cores + n - 1) / n
	}
	return out, nil
}
