package manager

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"tempest/api"
	"tempest/internal/store"
	"tempest/rainstorm"
	"tempest/transport"
	"tempest/wire"
)

// registerRainstormOutput serves a pipeline's output to the gates, one page
// per request (wire.RainstormOutputRequest). Only the leader answers: it
// holds every durable checkpoint's rows, where a follower may lag a group
// behind. The gate follows not_leader like it does for submissions. Only
// gates read output this way: the transport refuses the request from a
// worker's key (wire.MaySend). A node holding a manager's key can read it,
// as it can every pipeline's state (RainstormSyncRequest): the manager key
// is trusted with the datacenter. A check against the gates SWIM shows
// alive would add nothing against it (SWIM metadata can be gossiped) and
// would refuse a real gate while SWIM suspects it.
func (m *Manager) registerRainstormOutput() {
	handle(m, wire.TypeRainstormOutputRequest, func(ctx context.Context, _ transport.Peer, msg *wire.RainstormOutputRequest) (wire.Message, error) {
		if _, err := m.rsReady(); err != nil {
			return nil, err
		}
		if !msg.Rows {
			out, err := m.PipelineOutput(ctx, msg.Job, msg.Workflow, false)
			if err != nil {
				return nil, err
			}
			return api.OutputPage(out, msg.Offset), nil
		}
		if msg.Resume || len(msg.Cursor) > 0 {
			return m.rsOutputPage(ctx, msg)
		}
		// A reader without cursors: the rows are read through to count
		// them, the page's kept, so a page holds its own rows only.
		out, rows, err := m.PipelineOutputRows(ctx, msg.Job, msg.Workflow)
		if err != nil {
			return nil, err
		}
		return api.OutputPageOf(out, rows, msg.Offset), nil
	})
}

// waitingSummary says which of a pipeline's (or split workflow's) parts wait
// for a placement and why, for its status line: "task count/2 waiting: no
// free core". Tasks are named by stage and 1-based index; at most three are
// named.
func waitingSummary(group []store.WorkflowRecord, waiting map[string]string) string {
	if len(waiting) == 0 {
		return ""
	}
	var names []string
	reason := ""
	var order []wire.RainstormTask
	var spec *rainstorm.Spec
	if group[0].Spec.Type == rainstorm.TypeName {
		if p, err := rainstorm.DecodeTaskParams(group[0].Spec.Params); err == nil {
			spec, order = &p.Spec, rainstorm.TaskOrder(&p.Spec)
		}
	}
	for i, rec := range group {
		why, ok := waiting[rec.WorkflowID]
		if !ok {
			continue
		}
		reason = cmp.Or(reason, why)
		switch {
		case spec != nil && i < len(order) && order[i].Stage == 0:
			names = append(names, "source")
		case spec != nil && i < len(order):
			names = append(names, fmt.Sprintf("%s/%d", spec.Stages[order[i].Stage-1].Name, order[i].Index+1))
		case len(group) > 1:
			names = append(names, fmt.Sprintf("shard %d/%d", rec.Spec.Shard, rec.Spec.Shards))
		default:
			names = append(names, rec.Spec.Name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	what := "task"
	if spec == nil {
		what = "part"
	}
	if len(names) > 1 {
		what += "s"
	}
	if len(names) > 3 {
		names = append(names[:3], fmt.Sprintf("%d more", len(names)-3))
	}
	return fmt.Sprintf("%s %s waiting: %s", what, strings.Join(names, ", "), reason)
}
