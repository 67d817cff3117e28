// Package apitest provides an in-memory api.Backend and a helper that serves
// it, for tests of the HTTP layer and of API clients (the CLI). It models
// only what the API needs from a role: jobs with statuses that tests change
// by hand, and a leader to forward to.
package apitest

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"tempest/api"
	"tempest/wire"
)

// Backend is an in-memory api.Backend. The zero value is not usable; use
// NewBackend. All methods are safe for concurrent use.
type Backend struct {
	mu          sync.Mutex
	jobs        map[string]*job
	order       []string // submission order
	seq         int
	submissions []*wire.JobSubmission
	cancels     []string
	errs        map[string]error // method name → error to return
	cluster     api.ClusterView
	isLeader    bool
	leaderAPI   string
	leaderFunc  func() (bool, string)
	datacenter  string
}

type job struct {
	status   api.JobStatus
	version  int
	changed  chan struct{} // closed and replaced on every change
	watchers int
}

// NewBackend returns a backend that is the leader and knows no jobs.
func NewBackend() *Backend {
	return &Backend{
		jobs:       make(map[string]*job),
		errs:       make(map[string]error),
		isLeader:   true,
		datacenter: "dc1",
	}
}

// SetLeader sets what Leader reports.
func (b *Backend) SetLeader(isLeader bool, leaderAPI string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.isLeader, b.leaderAPI, b.leaderFunc = isLeader, leaderAPI, nil
}

// SetLeaderFunc makes Leader call f, for tests where leadership moves
// between calls. f is called without the backend's lock held.
func (b *Backend) SetLeaderFunc(f func() (bool, string)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.leaderFunc = f
}

// SetError makes the named method ("Submit", "Jobs", "Job", "Watch",
// "Cancel", "Results", "Cluster") return err until cleared with nil.
func (b *Backend) SetError(method string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		delete(b.errs, method)
		return
	}
	b.errs[method] = err
}

// SetCluster sets the answer of Cluster.
func (b *Backend) SetCluster(v api.ClusterView) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cluster = v
}

// AddJob stores a job as given (its JobID must be set).
func (b *Backend) AddJob(st api.JobStatus) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.addLocked(st)
}

func (b *Backend) addLocked(st api.JobStatus) {
	if _, ok := b.jobs[st.JobID]; !ok {
		b.order = append(b.order, st.JobID)
	}
	b.jobs[st.JobID] = &job{status: st, changed: make(chan struct{})}
}

// Update changes a job's status with f and wakes its watchers. It reports
// false for an unknown job.
func (b *Backend) Update(id string, f func(*api.JobStatus)) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	j, ok := b.jobs[id]
	if !ok {
		return false
	}
	f(&j.status)
	j.version++
	close(j.changed)
	j.changed = make(chan struct{})
	return true
}

// Finish sets a job's status (and every workflow's, to match) and wakes its
// watchers.
func (b *Backend) Finish(id string, status wire.JobStatus) bool {
	wf := wire.WorkflowCompleted
	switch status {
	case wire.JobFailed, wire.JobTimeout:
		wf = wire.WorkflowFailed
	case wire.JobCancelled:
		wf = wire.WorkflowCancelled
	}
	return b.Update(id, func(st *api.JobStatus) {
		st.Status = status
		for i := range st.Workflows {
			st.Workflows[i].Status = wf
		}
	})
}

// Watchers reports how many streams watch a job now.
func (b *Backend) Watchers(id string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if j, ok := b.jobs[id]; ok {
		return j.watchers
	}
	return 0
}

// Submissions returns the jobs submitted so far, in order.
func (b *Backend) Submissions() []*wire.JobSubmission {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.submissions)
}

// Cancels returns the ids of cancelled jobs, in order.
func (b *Backend) Cancels() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.cancels)
}

func (b *Backend) errFor(method string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.errs[method]
}

// Submit stores the job as SUBMITTED with PENDING workflows.
func (b *Backend) Submit(ctx context.Context, sub *wire.JobSubmission) (*wire.JobAck, error) {
	if err := b.errFor("Submit"); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	id := fmt.Sprintf("job-%d", b.seq)
	st := api.JobStatus{JobID: id, Name: sub.Name, Status: wire.JobSubmitted, Datacenter: b.datacenter}
	for i, wf := range sub.Workflows {
		st.Workflows = append(st.Workflows, api.WorkflowStatus{Name: wf.Name,
			WorkflowID: fmt.Sprintf("%s-wf-%d", id, i), Type: wf.Type, Status: wire.WorkflowPending})
	}
	b.addLocked(st)
	cp := *sub
	cp.JobID = id
	b.submissions = append(b.submissions, &cp)
	return &wire.JobAck{JobID: id, Accepted: true, Datacenters: []string{b.datacenter}}, nil
}

// Jobs lists jobs newest first.
func (b *Backend) Jobs(ctx context.Context) ([]api.JobStatus, error) {
	if err := b.errFor("Jobs"); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]api.JobStatus, 0, len(b.order))
	for i := len(b.order) - 1; i >= 0; i-- {
		out = append(out, cloneStatus(b.jobs[b.order[i]].status))
	}
	return out, nil
}

// Job returns one job or a not-found error.
func (b *Backend) Job(ctx context.Context, id string) (*api.JobStatus, error) {
	st, err := b.status("Job", id)
	if err != nil {
		return nil, err
	}
	return &st, nil
}

// status is a copy of job id's status, or the error set for op.
func (b *Backend) status(op, id string) (api.JobStatus, error) {
	if err := b.errFor(op); err != nil {
		return api.JobStatus{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	j, ok := b.jobs[id]
	if !ok {
		return api.JobStatus{}, wire.Errorf(wire.CodeNotFound, "job %s not found", id)
	}
	return cloneStatus(j.status), nil
}

// Watch sends the current status, then the latest one after each change
// (changes in quick succession may collapse into one, as a real backend's
// may), closing after the terminal status or when ctx ends.
func (b *Backend) Watch(ctx context.Context, id string) (<-chan api.JobStatus, error) {
	if err := b.errFor("Watch"); err != nil {
		return nil, err
	}
	b.mu.Lock()
	j, ok := b.jobs[id]
	if !ok {
		b.mu.Unlock()
		return nil, wire.Errorf(wire.CodeNotFound, "job %s not found", id)
	}
	j.watchers++
	b.mu.Unlock()

	ch := make(chan api.JobStatus)
	go func() {
		defer close(ch)
		defer func() {
			b.mu.Lock()
			j.watchers--
			b.mu.Unlock()
		}()
		sent := -1
		for {
			b.mu.Lock()
			st, version, changed := cloneStatus(j.status), j.version, j.changed
			b.mu.Unlock()
			if version != sent {
				select {
				case ch <- st:
					sent = version
				case <-ctx.Done():
					return
				}
				if st.Status.Terminal() {
					return
				}
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// Cancel marks a running job CANCELLED; a finished one is left alone
// (Cancelled false).
func (b *Backend) Cancel(ctx context.Context, id, reason string) (*wire.CancelAck, error) {
	if err := b.errFor("Cancel"); err != nil {
		return nil, err
	}
	b.mu.Lock()
	j, ok := b.jobs[id]
	if !ok {
		b.mu.Unlock()
		return nil, wire.Errorf(wire.CodeNotFound, "job %s not found", id)
	}
	terminal := j.status.Status.Terminal()
	n := len(j.status.Workflows)
	b.cancels = append(b.cancels, id)
	b.mu.Unlock()
	if terminal {
		return &wire.CancelAck{JobID: id}, nil
	}
	b.Update(id, func(st *api.JobStatus) {
		st.Status = wire.JobCancelled
		st.Error = reason
		for i := range st.Workflows {
			st.Workflows[i].Status = wire.WorkflowCancelled
		}
	})
	return &wire.CancelAck{JobID: id, Cancelled: true, WorkflowsCancelled: n}, nil
}

// Results returns the job's workflows.
func (b *Backend) Results(ctx context.Context, id string) (*api.Results, error) {
	st, err := b.status("Results", id)
	if err != nil {
		return nil, err
	}
	return &api.Results{JobID: id, Status: st.Status, Workflows: st.Workflows}, nil
}

// Cluster returns what SetCluster set.
func (b *Backend) Cluster(ctx context.Context) (*api.ClusterView, error) {
	if err := b.errFor("Cluster"); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	v := api.ClusterView{Nodes: slices.Clone(b.cluster.Nodes), Unreachable: slices.Clone(b.cluster.Unreachable),
		Groups: slices.Clone(b.cluster.Groups)}
	return &v, nil
}

// AddMember adds mc to the first group SetCluster set, as a SYNCING
// learner, one epoch on; a member already there is refused.
func (b *Backend) AddMember(ctx context.Context, mc api.MemberChange) (*api.GroupView, error) {
	if err := b.errFor("AddMember"); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.cluster.Groups) == 0 {
		return nil, wire.Errorf(wire.CodeNotFound, "no group")
	}
	g := &b.cluster.Groups[0]
	if slices.ContainsFunc(g.Members, func(m api.MemberView) bool { return m.ID == mc.ID }) {
		return nil, wire.Errorf(wire.CodeRejected, "already a member: %s", mc.ID)
	}
	g.Members = append(slices.Clone(g.Members), api.MemberView{ID: mc.ID, Addr: mc.Addr, State: api.MemberSyncing})
	g.Epoch++
	out := *g
	return &out, nil
}

// RemoveMember removes id from the first group SetCluster set.
func (b *Backend) RemoveMember(ctx context.Context, id string) (*api.GroupView, error) {
	if err := b.errFor("RemoveMember"); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.cluster.Groups) == 0 {
		return nil, wire.Errorf(wire.CodeNotFound, "no group")
	}
	g := &b.cluster.Groups[0]
	i := slices.IndexFunc(g.Members, func(m api.MemberView) bool { return m.ID == id })
	if i < 0 {
		return nil, wire.Errorf(wire.CodeRejected, "no such member: %s", id)
	}
	g.Members = slices.Delete(slices.Clone(g.Members), i, i+1)
	g.Epoch++
	out := *g
	return &out, nil
}

// Leader reports what SetLeader (or SetLeaderFunc) set.
func (b *Backend) Leader() (bool, string) {
	b.mu.Lock()
	f, isLeader, leaderAPI := b.leaderFunc, b.isLeader, b.leaderAPI
	b.mu.Unlock()
	if f != nil {
		return f()
	}
	return isLeader, leaderAPI
}

func cloneStatus(st api.JobStatus) api.JobStatus {
	st.Workflows = slices.Clone(st.Workflows)
	for i := range st.Workflows {
		st.Workflows[i].Steps = slices.Clone(st.Workflows[i].Steps)
		st.Workflows[i].Cores = slices.Clone(st.Workflows[i].Cores)
	}
	return st
}

var _ api.Backend = (*Backend)(nil)
