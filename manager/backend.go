package manager

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"tempest/internal/overload"
	"time"

	"tempest/api"
	"tempest/internal/store"
	"tempest/jobs"
	"tempest/leadership"
	"tempest/swim"
	"tempest/transport"
	"tempest/wire"
)

var _ api.Backend = (*Manager)(nil)

// Backend returns the manager as the API server's backend.
func (m *Manager) Backend() api.Backend { return m }

// Submit implements api.Backend. Only the leader places jobs; elsewhere the
// answer is NotLeader with the leader's API URL (the API server forwards).
func (m *Manager) Submit(ctx context.Context, job *wire.JobSubmission) (*wire.JobAck, error) {
	return m.submit(ctx, job, m.notLeaderAPI)
}

// Jobs implements api.Backend: every job this manager knows, newest first.
func (m *Manager) Jobs(context.Context) ([]api.JobStatus, error) {
	m.mu.Lock()
	views := make([]jobView, 0, len(m.jobs))
	for _, j := range m.jobs {
		views = append(views, viewLocked(j))
	}
	m.mu.Unlock()
	slices.SortFunc(views, func(a, b jobView) int {
		return cmp.Or(cmp.Compare(b.rec.CreatedAt, a.rec.CreatedAt), strings.Compare(b.rec.ID(), a.rec.ID()))
	})
	out := make([]api.JobStatus, 0, len(views))
	for _, v := range views {
		out = append(out, m.jobStatus(v, false))
	}
	return out, nil
}

// Job implements api.Backend.
func (m *Manager) Job(ctx context.Context, id string) (*api.JobStatus, error) {
	if err := m.awaitSynced(ctx); err != nil {
		return nil, err
	}
	v, ok := m.viewJob(id)
	if !ok {
		return nil, wire.Errorf(wire.CodeNotFound, "job %s not found", id)
	}
	st := m.jobStatus(v, false)
	return &st, nil
}

// Cancel implements api.Backend (leader only).
func (m *Manager) Cancel(ctx context.Context, id, reason string) (*wire.CancelAck, error) {
	if _, err := m.awaitLeader(ctx, m.notLeaderAPI); err != nil {
		return nil, err
	}
	if reason == "" {
		reason = "cancelled by client"
	}
	return m.cancelJob(ctx, id, wire.JobCancelled, reason)
}

// Results implements api.Backend: per workflow, per step, counts and latency
// percentiles read from the merged HDR histograms.
func (m *Manager) Results(ctx context.Context, id string) (*api.Results, error) {
	if err := m.awaitSynced(ctx); err != nil {
		return nil, err
	}
	v, ok := m.viewJob(id)
	if !ok {
		return nil, wire.Errorf(wire.CodeNotFound, "job %s not found", id)
	}
	st := m.jobStatus(v, true)
	return &api.Results{JobID: st.JobID, Status: st.Status, Workflows: st.Workflows}, nil
}

// Leader implements api.Backend.
func (m *Manager) Leader() (bool, string) {
	id, _ := m.elector.Leader()
	return m.apis.Leader(m.leading() != nil, id)
}

// notLeaderAPI is NotLeader for API callers: LeaderAddr is the leader's API
// URL, not its QUIC address.
func (m *Manager) notLeaderAPI() *wire.Error { return m.apis.NotLeader(m.elector.NotLeaderError()) }

// Cluster implements api.Backend: this manager, its peers, every worker it
// knows and any other SWIM member.
func (m *Manager) Cluster(context.Context) (*api.ClusterView, error) {
	st := m.elector.Status()
	self := api.NodeView{
		Name: m.cfg.ID, Role: string(wire.RoleManager), DC: m.cfg.Datacenter, State: "alive",
		IsLeader: m.leading() != nil, Addr: m.tr.Addr(), API: m.apis.Self(), Term: st.Term,
	}
	load := m.loadReading()
	self.Load, self.LoadReason = load.Level.String(), load.Reason
	if m.keyring != nil {
		self.SendKey, self.AcceptKeys = api.KeyIDs(m.keyring.SendKeyID(), m.keyring.AcceptedKeyIDs())
	}
	if q, ok := m.tr.(transport.StatsSource); ok {
		for _, b := range q.Stats().Breakers {
			self.OpenBreakers = append(self.OpenBreakers, fmt.Sprintf("%s/%s:%s", b.Peer, b.Class, b.State))
		}
	}
	view := &api.ClusterView{Nodes: []api.NodeView{self}}
	members := make(map[string]swim.NodeInfo)
	for _, n := range m.members.Members() {
		members[n.Name] = n
	}
	peers := m.group.Load()
	for _, id := range peers.Targets() {
		n := api.NodeView{Name: id, Role: string(wire.RoleManager), DC: m.cfg.Datacenter, State: "dead", Addr: peers.Addr(id), IsLeader: id == st.Leader}
		if info, ok := members[id]; ok {
			n.State = "alive"
			n.API = info.Meta.Tags["api"]
		}
		if hb, alive, ok := m.managers.get(id); ok {
			n.Term = hb.Term
			n.Load = overload.Level(hb.Load).String()
			n.SendKey, n.AcceptKeys = api.KeyIDs(hb.SendKeyID, hb.AcceptKeyIDs)
			if !alive {
				n.State = "dead"
			}
		}
		view.Nodes = append(view.Nodes, n)
		delete(members, id)
	}
	delete(members, m.cfg.ID)
	for _, w := range m.workerNodes() {
		view.Nodes = append(view.Nodes, api.WorkerNode(m.cfg.Datacenter, w))
		delete(members, w.ID)
	}
	for _, n := range members {
		view.Nodes = append(view.Nodes, api.NodeView{Name: n.Name, Role: string(n.Meta.Role), DC: n.Meta.Datacenter,
			State: n.State.String(), Addr: n.Meta.QUICAddr, API: n.Meta.Tags["api"]})
	}
	view.Groups = []api.GroupView{*m.groupView()}
	return view, nil
}

// jobView is a copy of a job taken under the lock, so that turning it into
// JSON (which decodes histograms) happens outside it.
type jobView struct {
	rec store.JobRecord
	wfs []store.WorkflowRecord
	seq uint64
	// statuses is the job's: its workflows' statuses as of a seq, shared
	// by the job's watchers.
	statuses *jobs.Memo[uint64, []jobs.WorkflowStatus]
	model    *jobs.Model
	// waiting: why PENDING workflows are not placed, by workflow id.
	waiting map[string]string
}

func viewLocked(j *jobState) jobView {
	if j.statuses == nil {
		j.statuses = new(jobs.Memo[uint64, []jobs.WorkflowStatus])
	}
	v := jobView{rec: j.rec, seq: j.seq, statuses: j.statuses, model: modelLocked(j), wfs: make([]store.WorkflowRecord, len(j.wfs))}
	v.rec.Status = shownStatusLocked(j)
	for i, w := range j.wfs {
		v.wfs[i] = w.rec
		if w.waiting != "" && w.rec.Status == wire.WorkflowPending {
			if v.waiting == nil {
				v.waiting = map[string]string{}
			}
			v.waiting[w.rec.WorkflowID] = w.waiting
		}
	}
	return v
}

// awaitSynced holds a read on a leader whose state sync has not finished:
// until it has read a majority it may not know a job the cluster
// acknowledged, and "not found" would be an answer it cannot stand by.
func (m *Manager) awaitSynced(ctx context.Context) error {
	lt := m.leading()
	if lt == nil {
		return nil
	}
	err := lt.AwaitSynced(ctx)
	if errors.Is(err, leadership.ErrTermEnded) {
		return wire.Errorf(wire.CodeUnavailable, "%s stopped leading while syncing; ask again", m.cfg.ID)
	}
	return err
}

func (m *Manager) viewJob(id string) (jobView, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	j, ok := m.jobs[id]
	if !ok {
		return jobView{}, false
	}
	return viewLocked(j), true
}

// jobStatus is a job's API shape.
func (m *Manager) jobStatus(v jobView, detail bool) api.JobStatus {
	return m.jobStatusOf(v, m.workflowStatuses(v, detail))
}

// jobStatusOf is a job's API shape around its workflows' statuses (which
// the caller may share with other readers of the same change).
func (m *Manager) jobStatusOf(v jobView, wss []jobs.WorkflowStatus) api.JobStatus {
	st := api.JobStatus{
		JobID:          v.rec.ID(),
		Name:           v.rec.Submission.Name,
		Status:         v.rec.Status,
		TotalCompleted: v.rec.Progress.TotalCompleted,
		TotalFailed:    v.rec.Progress.TotalFailed,
		Datacenter:     m.cfg.Datacenter,
		Error:          v.rec.Error,
		Workflows:      wss,
	}
	end := m.clock.Now()
	if v.rec.FinishedAt != 0 {
		end = v.rec.Finished()
	}
	st.ElapsedSeconds = end.Sub(v.rec.Created()).Seconds()
	if v.rec.Submission.SubmittedAt != 0 {
		st.SubmittedAt = time.Unix(0, v.rec.Submission.SubmittedAt).UTC().Format(time.RFC3339)
	}
	st.ThresholdAbort = thresholdAbort(v.rec.Status, v.rec.Error)
	st.ThresholdsFailed = st.ThresholdAbort
	for _, ws := range wss {
		for _, r := range ws.Thresholds {
			st.ThresholdsFailed = st.ThresholdsFailed || !r.Passed
		}
	}
	return st
}

// workflowStatuses is a job's workflows as the API shows them, one per
// group (jobs.Groups): a split workflow's shards merged into one. Building
// them decodes every step histogram.
func (m *Manager) workflowStatuses(v jobView, detail bool) []jobs.WorkflowStatus {
	out := make([]jobs.WorkflowStatus, 0, len(v.wfs))
	for k, g := range v.model.Groups() {
		group := v.wfs[g.Start:g.End]
		var ws jobs.WorkflowStatus
		if len(group) == 1 {
			ws = m.workflowStatus(&group[0])
			if detail {
				m.resultDetail(&group[0], &ws)
			}
		} else {
			ws = m.shardsStatus(group, v.model.Thresholds(k), detail)
		}
		if !v.rec.Status.Terminal() {
			ws.Waiting = waitingSummary(group, v.waiting)
		}
		out = append(out, ws)
	}
	return out
}

func (m *Manager) workflowStatus(rec *store.WorkflowRecord) jobs.WorkflowStatus {
	p := &rec.LastProgress
	ws := jobs.WorkflowStatus{
		Name:              rec.Spec.Name,
		WorkflowID:        rec.WorkflowID,
		Type:              rec.Spec.Type,
		Status:            rec.Status,
		CompletedCount:    p.CompletedCount,
		FailedCount:       p.FailedCount,
		DroppedIterations: p.DroppedIterations,
		Attempts:          rec.Attempts,
		LostAttempts:      jobs.LostAttempts("", rec.Lost),
		Worker:            rec.Worker,
		Cores:             rec.Cores,
		Error:             rec.Error,
		ElapsedSeconds:    p.Elapsed.Seconds(),
		PlannedSeconds:    rec.Spec.Planned.Seconds(),
	}
	if n := len(p.Series); n > 0 && !rec.Status.Terminal() {
		recent := jobs.SeriesPoints(p.Series[n-1:])[0]
		ws.Recent = &recent
	}
	ws.Thresholds = jobs.ThresholdResults(rec.Thresholds)
	steps, _, err := jobs.StepSummaries(p.StepStats)
	if err != nil {
		m.log.Warn("undecodable step statistics", "job_id", rec.JobID, "workflow_id", rec.WorkflowID, "err", err)
		return ws
	}
	ws.Steps = steps
	return ws
}

// LeaderElected implements api.Elected: the datacenter's election names a
// leader.
func (m *Manager) LeaderElected() bool {
	id, _ := m.elector.Leader()
	return id != ""
}
