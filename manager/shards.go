package manager

import (
	"fmt"

	"tempest/api"
	"tempest/store"
	"tempest/wire"
	"tempest/workflow"
)

// A workflow split with shards: N is N workflows of one name, placed on
// different workers where there are enough, each with its share of the
// load. Each shard is placed, retried and fenced on its own; statuses and
// results merge them back into one workflow.

// shardGroups cuts a job's workflows (in submission order) into runs: one
// workflow alone, or every shard of a split one.
func shardGroups(wfs []store.WorkflowRecord) [][]store.WorkflowRecord {
	var out [][]store.WorkflowRecord
	for i := 0; i < len(wfs); {
		j := i + 1
		if wfs[i].Spec.Shards > 1 {
			for j < len(wfs) && wfs[j].Spec.Name == wfs[i].Spec.Name && wfs[j].Spec.Shards == wfs[i].Spec.Shards {
				j++
			}
		}
		out = append(out, wfs[i:j])
		i = j
	}
	return out
}

// shardsStatus merges a split workflow's shards: counts summed, histograms
// merged, thresholds judged on the merged results once every shard ended.
func (m *Manager) shardsStatus(shards []store.WorkflowRecord, detail bool) api.WorkflowStatus {
	parts := make([]api.WorkflowPart, len(shards))
	for i := range shards {
		rec := &shards[i]
		// The last progress carries the newest second (for a running
		// shard's recent rate); results want the whole series, which the
		// record keeps once the shard ended.
		p := workflowProgressOf(rec)
		if detail && len(rec.Series) > 0 {
			p.Series = rec.Series
		}
		parts[i] = api.WorkflowPart{Progress: p, Attempts: rec.Attempts, Cores: rec.Cores}
	}
	ws, err := api.MergeWorkflow(shards[0].Spec, parts, shards[0].Spec.Shards, detail)
	if err != nil {
		m.log.Warn("undecodable step statistics", "job_id", shards[0].JobID, "workflow", shards[0].Spec.Name, "err", err)
	}
	return ws
}

// siblingWorkersLocked lists the workers that w's sibling shards run on or
// are being placed on, for placement to avoid.
func siblingWorkersLocked(w *workflowState) map[string]bool {
	if w.rec.Spec.Shards < 2 {
		return nil
	}
	out := map[string]bool{}
	for _, s := range w.job.wfs {
		if s == w || s.rec.Spec.Name != w.rec.Spec.Name || s.rec.Status.Terminal() {
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
