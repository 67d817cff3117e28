package gate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"tempest/api"
	"tempest/internal/lifecycle"
	"tempest/internal/overload"
	"tempest/jobs"
	"tempest/leadership"
	"tempest/wire"
	"tempest/workflow"
)

// watchPacing is the least time between two statuses a watcher is sent:
// reports arrive from every datacenter every few hundred milliseconds, and
// each status merges every histogram.
const watchPacing = 100 * time.Millisecond

// Submit implements api.Backend (leader only; followers forward).
func (g *Gate) Submit(ctx context.Context, job *wire.JobSubmission) (*wire.JobAck, error) {
	return g.submit(ctx, job)
}

// readable waits until a read of job id (of every job, for "") shows only
// what a successor would also show: on a leader, once its takeover read a
// majority of gates and stored the leases it moved, and once no change of
// the job is still being stored on the other gates. A follower (only tests
// read one directly; the API forwards) reads its own copy.
func (g *Gate) readable(ctx context.Context, id string) error {
	if lt := g.lead.Leading(); lt != nil {
		if err := lt.AwaitSynced(ctx); errors.Is(err, leadership.ErrTermEnded) {
			return g.notLeaderAPI()
		} else if err != nil {
			return err
		}
	}
	if id == "" {
		return nil
	}
	return g.awaitStored(ctx, id)
}

// Jobs implements api.Backend: every job, newest first.
func (g *Gate) Jobs(ctx context.Context) ([]api.JobStatus, error) {
	if err := g.readable(ctx, ""); err != nil {
		return nil, err
	}
	var recs []wire.GateJobRecord
	g.view(func() {
		recs = make([]wire.GateJobRecord, 0, len(g.jobs))
		for _, j := range g.jobs {
			recs = append(recs, j.rec)
		}
	})
	slices.SortFunc(recs, func(a, b wire.GateJobRecord) int {
		return cmp.Or(cmp.Compare(b.CreatedAt, a.CreatedAt), strings.Compare(b.Submission.JobID, a.Submission.JobID))
	})
	out := make([]api.JobStatus, 0, len(recs))
	for i := range recs {
		out = append(out, g.jobStatus(&recs[i], false))
	}
	return out, nil
}

func (g *Gate) record(id string) (rec wire.GateJobRecord, changed <-chan struct{}, ok bool) {
	g.view(func() {
		var j *jobEntry
		if j, ok = g.jobs[id]; ok {
			rec, changed = j.rec, j.changed
		}
	})
	return rec, changed, ok
}

// watchRecord is record with the job's shared merge of its workflows.
func (g *Gate) watchRecord(id string) (wire.GateJobRecord, <-chan struct{}, *jobs.Memo[<-chan struct{}, []jobs.WorkflowStatus], bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	j, ok := g.jobs[id]
	if !ok {
		return wire.GateJobRecord{}, nil, nil, false
	}
	if j.statuses == nil {
		j.statuses = new(jobs.Memo[<-chan struct{}, []jobs.WorkflowStatus])
	}
	return j.rec, j.changed, j.statuses, true
}

// Job implements api.Backend.
func (g *Gate) Job(ctx context.Context, id string) (*api.JobStatus, error) {
	if err := g.readable(ctx, id); err != nil {
		return nil, err
	}
	rec, _, ok := g.record(id)
	if !ok {
		return nil, wire.Errorf(wire.CodeNotFound, "job %s not found", id)
	}
	st := g.jobStatus(&rec, false)
	return &st, nil
}

// Watch implements api.Backend: the status now, then one per change (at
// most one per watchPacing), closing after the terminal one.
func (g *Gate) Watch(ctx context.Context, id string) (<-chan api.JobStatus, error) {
	if err := g.readable(ctx, id); err != nil {
		return nil, err
	}
	if _, _, ok := g.record(id); !ok {
		return nil, wire.Errorf(wire.CodeNotFound, "job %s not found", id)
	}
	out := make(chan api.JobStatus, 1)
	started := g.spawn(func(gctx context.Context) {
		defer close(out)
		// Each status merges every histogram and reports arrive from every
		// datacenter several times a second, so a stream is paced: one
		// status per watchPacing, with a burst of one so that the first
		// change after a quiet spell (RUNNING right after the submission)
		// is not held back.
		var last time.Time
		burst := 1
		for {
			// changed is taken with the record, so a change made while
			// this status is sent or paced is not missed. A change still
			// being stored on the other gates is not shown yet.
			if g.awaitStored(ctx, id) != nil {
				return
			}
			rec, changed, statuses, ok := g.watchRecord(id)
			if !ok {
				return
			}
			// The job's watchers share one merge of its workflows per
			// change: every change replaces changed, under the lock it
			// is made under.
			wss := statuses.Get(changed, func() []jobs.WorkflowStatus { return g.workflowStatuses(&rec, false) })
			select {
			case out <- g.jobStatusOf(&rec, wss):
			case <-ctx.Done():
				return
			case <-gctx.Done():
				return
			}
			last = time.Now()
			if rec.Status.Terminal() {
				return
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return
			case <-gctx.Done():
				return
			}
			switch since := time.Since(last); {
			case since >= watchPacing:
				burst = 1
			case burst > 0:
				burst--
			default:
				if !lifecycle.Sleep(ctx, watchPacing-since) {
					return
				}
			}
		}
	})
	if !started {
		return nil, &wire.Error{Code: wire.CodeUnavailable, Message: "gate shutting down"}
	}
	return out, nil
}

// Cancel implements api.Backend.
func (g *Gate) Cancel(ctx context.Context, id, reason string) (*wire.CancelAck, error) {
	if reason == "" {
		reason = "cancelled by client"
	}
	return g.cancelJob(ctx, id, reason)
}

// Results implements api.Backend: the job's workflows merged across
// datacenters, with series and latency distributions.
func (g *Gate) Results(ctx context.Context, id string) (*api.Results, error) {
	if err := g.readable(ctx, id); err != nil {
		return nil, err
	}
	rec, _, ok := g.record(id)
	if !ok {
		return nil, wire.Errorf(wire.CodeNotFound, "job %s not found", id)
	}
	st := g.jobStatus(&rec, true)
	return &api.Results{JobID: st.JobID, Status: st.Status, Workflows: st.Workflows}, nil
}

// Leader implements api.Backend. A gate taking over already answers as the
// leader: requests wait for the takeover rather than bounce.
func (g *Gate) Leader() (bool, string) {
	id, _ := g.elector.Leader()
	return g.apis.Leader(g.lead.Leading() != nil, id)
}

// notLeaderAPI is NotLeader for API callers: LeaderAddr is an API URL.
func (g *Gate) notLeaderAPI() *wire.Error { return g.apis.NotLeader(g.elector.NotLeaderError()) }

// Cluster implements api.Backend: the gates, and every datacenter's
// managers as their heartbeats describe them.
func (g *Gate) Cluster(ctx context.Context) (*api.ClusterView, error) {
	st := g.elector.Status()
	view := &api.ClusterView{}
	self := api.NodeView{Name: g.cfg.ID, Role: string(wire.RoleGate), State: "alive", IsLeader: g.lead.Leading() != nil,
		Addr: g.tr.Addr(), API: g.apis.Self(), Term: st.Term}
	if !g.ready.Load() {
		self.State = "syncing"
	}
	load := g.loadReading()
	self.Load, self.LoadReason = load.Level.String(), load.Reason
	if g.keyring != nil {
		self.SendKey, self.AcceptKeys = api.KeyIDs(g.keyring.SendKeyID(), g.keyring.AcceptedKeyIDs())
	}
	view.Nodes = append(view.Nodes, self)
	leader, _ := g.elector.Leader()
	if g.members != nil {
		for _, n := range g.members.Members() {
			if n.Name == g.cfg.ID || n.Meta.Role != wire.RoleGate {
				continue
			}
			nv := api.NodeView{Name: n.Name, Role: string(wire.RoleGate), State: n.State.String(),
				IsLeader: n.Name == leader, Addr: n.Meta.QUICAddr, API: n.Meta.Tags["api"], SendKey: n.Meta.Tags["send_key"]}
			if a := n.Meta.Tags["accept_keys"]; a != "" {
				nv.AcceptKeys = strings.Split(a, ",")
			}
			if lvl, err := strconv.Atoi(n.Meta.Tags[loadTag]); err == nil {
				nv.Load = overload.Level(lvl).String()
			}
			view.Nodes = append(view.Nodes, nv)
		}
	}
	var dcs []string
	for _, e := range g.dcs.all() {
		state := "alive"
		if !e.alive {
			state = "dead"
		}
		if !slices.Contains(dcs, e.dc) {
			dcs = append(dcs, e.dc)
		}
		nv := api.NodeView{Name: e.id, Role: string(wire.RoleManager), DC: e.dc, State: state, IsLeader: e.hb.IsLeader,
			AvailableCores: e.hb.AvailableCores, TotalCores: e.hb.TotalCores, Addr: e.addr, Term: e.hb.Term}
		if e.hb.SendKeyID != 0 {
			nv.SendKey, nv.AcceptKeys = api.KeyIDs(e.hb.SendKeyID, e.hb.AcceptKeyIDs)
		}
		view.Nodes = append(view.Nodes, nv)
	}
	workers, unreachable := g.datacenterWorkers(ctx, dcs)
	view.Nodes = append(view.Nodes, workers...)
	view.Unreachable = unreachable
	view.Groups = []api.GroupView{*g.groupView()}
	return view, nil
}

// datacenterWorkers asks each datacenter's manager leader for its workers,
// all at once, so one slow datacenter costs the view one dispatch timeout.
// A datacenter that does not answer is named in unreachable, with why.
func (g *Gate) datacenterWorkers(ctx context.Context, dcs []string) (workers []api.NodeView, unreachable []string) {
	type answer struct {
		nodes []api.NodeView
		err   error
	}
	answers := make([]answer, len(dcs))
	var wg sync.WaitGroup
	for i, dc := range dcs {
		wg.Go(func() {
			reply, err := g.callDCReply(ctx, dc, &wire.DatacenterNodesRequest{Datacenter: dc})
			if err != nil {
				answers[i].err = err
				return
			}
			r, ok := reply.(*wire.DatacenterNodes)
			if !ok {
				answers[i].err = fmt.Errorf("answered with %T", reply)
				return
			}
			for _, n := range r.Workers {
				answers[i].nodes = append(answers[i].nodes, api.WorkerNode(dc, n))
			}
		})
	}
	wg.Wait()
	for i, a := range answers {
		if a.err != nil {
			g.log.Warn("cluster view: datacenter's workers unknown", "dc", dcs[i], "err", a.err)
			unreachable = append(unreachable, fmt.Sprintf("workers of %s: %v", dcs[i], a.err))
			continue
		}
		workers = append(workers, a.nodes...)
	}
	return workers, unreachable
}

// jobStatus is a job's API shape: a line per datacenter, and each workflow
// merged across datacenters — counts summed, histograms merged (never
// percentiles averaged), thresholds judged on the merged results. detail
// adds what only results carry (series, latency distributions).
func (g *Gate) jobStatus(rec *wire.GateJobRecord, detail bool) api.JobStatus {
	return g.jobStatusOf(rec, g.workflowStatuses(rec, detail))
}

// jobStatusOf is jobStatus around the job's merged workflows (which the
// caller may share with other readers of the same change).
func (g *Gate) jobStatusOf(rec *wire.GateJobRecord, wss []jobs.WorkflowStatus) api.JobStatus {
	now := g.now()
	st := api.JobStatus{
		JobID:  rec.Submission.JobID,
		Name:   rec.Submission.Name,
		Status: rec.Status,
		Error:  rec.Error,
	}
	end := now
	if rec.FinishedAt != 0 {
		end = time.Unix(0, rec.FinishedAt)
	}
	if rec.CreatedAt != 0 {
		st.ElapsedSeconds = end.Sub(time.Unix(0, rec.CreatedAt)).Seconds()
	}
	if rec.Submission.SubmittedAt != 0 {
		st.SubmittedAt = time.Unix(0, rec.Submission.SubmittedAt).UTC().Format(time.RFC3339)
	}
	var names []string
	for _, p := range rec.Datacenters {
		names = append(names, p.Datacenter)
		st.TotalCompleted += p.TotalCompleted
		st.TotalFailed += p.TotalFailed
		ds := api.DatacenterStatus{Name: p.Datacenter, Status: p.Status, TotalCompleted: p.TotalCompleted,
			TotalFailed: p.TotalFailed, Rate: p.OverallRate, Error: p.Error, ReportedFenceToken: p.FenceToken}
		for _, l := range rec.Leases {
			if l.Datacenter == p.Datacenter {
				ds.LeaseHolder, ds.FenceToken = l.LeaseHolder, l.FenceToken
				if !p.Status.Terminal() {
					ds.LeaseExpiresIn = time.Unix(0, l.ExpiresAt).Sub(now).Seconds()
				}
			}
		}
		st.Datacenters = append(st.Datacenters, ds)
		st.OverallRate += p.OverallRate
		switch {
		case p.Status == wire.JobCompleted:
			st.CompletedDatacenters++
		case p.Status.Terminal():
			st.FailedDatacenters++
		}
	}
	st.Datacenter = strings.Join(names, ",")
	// The gate judges abort_on_fail thresholds on the merged results and
	// ends the job with the reason (managers leave gate-driven jobs to it).
	st.ThresholdAbort = rec.Status == wire.JobFailed && strings.HasPrefix(rec.Error, wire.ThresholdAbortPrefix)
	st.ThresholdsFailed = st.ThresholdAbort
	st.Workflows = wss
	for _, ws := range wss {
		for _, r := range ws.Thresholds {
			st.ThresholdsFailed = st.ThresholdsFailed || !r.Passed
		}
	}
	return st
}

// workflowStatuses is a job's workflows, one per group (jobs.Groups), each
// merged across datacenters and shards. Building them decodes every step
// histogram of every report.
func (g *Gate) workflowStatuses(rec *wire.GateJobRecord, detail bool) []jobs.WorkflowStatus {
	model := g.modelOf(rec)
	var out []jobs.WorkflowStatus
	for k, grp := range model.Groups() {
		out = append(out, g.mergedWorkflow(rec, rec.Submission.Workflows[grp.Start], model.Thresholds(k), detail))
	}
	return out
}

// modelOf is the job model of rec, a copy of a job's record: worked out once
// per job and kept with it, keyed by the workflows' backing array (which a
// copy shares, and a record replaced by a newer one does not).
func (g *Gate) modelOf(rec *wire.GateJobRecord) *jobs.Model {
	ws := rec.Submission.Workflows
	if len(ws) == 0 {
		return jobs.NewModel(nil)
	}
	g.mu.Lock()
	j, ok := g.jobs[rec.Submission.JobID]
	g.mu.Unlock()
	if !ok {
		return jobs.NewModel(ws)
	}
	return j.model.Get(&ws[0], func() *jobs.Model { return jobs.NewModel(ws) })
}

// mergedWorkflow merges one workflow's reports from every datacenter (and
// every shard within each).
func (g *Gate) mergedWorkflow(rec *wire.GateJobRecord, spec wire.WorkflowSpec, th *workflow.CompiledThresholds, detail bool) jobs.WorkflowStatus {
	var parts []jobs.WorkflowPart
	for _, p := range rec.Datacenters {
		for _, w := range p.Workflows {
			if w.WorkflowName == spec.Name {
				parts = append(parts, jobs.WorkflowPart{Label: p.Datacenter + "/", Progress: w, Attempts: max(w.Attempts, 1)})
			}
		}
	}
	ws, err := jobs.MergeWorkflow(spec, th, parts, len(rec.Datacenters)*max(spec.Shards, 1), detail)
	if err != nil {
		g.log.Warn("undecodable step statistics", "job_id", rec.Submission.JobID, "workflow", spec.Name, "err", err)
	}
	return ws
}

// LeaderElected implements api.Elected: the gates' election names a leader.
func (g *Gate) LeaderElected() bool {
	id, _ := g.elector.Leader()
	return id != ""
}
