package jobs

import "tempest/wire"

// Group is one workflow as the user wrote it: specs[Start:End] of a job,
// either one spec alone or every shard of a workflow split with shards: N
// (or by a manager over workers too small for it). Each shard is placed,
// retried and fenced on its own; statuses, results and thresholds read the
// group as one workflow.
type Group struct{ Start, End int }

// Len is how many specs the group holds.
func (g Group) Len() int { return g.End - g.Start }

// Contains reports whether spec i is in the group.
func (g Group) Contains(i int) bool { return i >= g.Start && i < g.End }

// Groups cuts a job's workflow specs (in submission order) into groups. The
// one rule: a spec with Shards > 1 starts a group that runs on over the
// following specs of the same name and the same Shards; any other spec is a
// group alone. Validate guarantees the shards of a workflow are exactly
// such a run (consecutive, numbered 1..Shards, names unique otherwise), so
// on any job a role accepted the rule agrees with grouping by name.
func Groups(specs []wire.WorkflowSpec) []Group {
	var out []Group
	for i := 0; i < len(specs); {
		j := i + 1
		if specs[i].Shards > 1 {
			for j < len(specs) && specs[j].Name == specs[i].Name && specs[j].Shards == specs[i].Shards {
				j++
			}
		}
		out = append(out, Group{Start: i, End: j})
		i = j
	}
	return out
}

// GroupOf is the group of specs that holds spec i.
func GroupOf(specs []wire.WorkflowSpec, i int) Group {
	for _, g := range Groups(specs) {
		if g.Contains(i) {
			return g
		}
	}
	return Group{Start: i, End: i + 1}
}
