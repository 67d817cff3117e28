package manager

import (
	"tempest/api"
	"tempest/store"
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
