package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/rainstorm"
	"tempest/wire"
)

// pipelineJob is a job of one pipeline named name: a generate source and
// a stage per width with that many tasks (projects, then a count). It has
// 1+sum(widths) tasks and needs max(widths) slots, one core each.
func pipelineJob(t *testing.T, name string, widths ...int) *wire.JobSubmission {
	t.Helper()
	return pipelineJobOf(t, name, false, widths...)
}

// pipelineJobOf is pipelineJob with its stages chained into the source as
// Expand chains them (chain) or each stage in tasks of its own, as the
// placement tests count them.
func pipelineJobOf(t *testing.T, name string, chain bool, widths ...int) *wire.JobSubmission {
	t.Helper()
	spec := &rainstorm.Spec{Source: rainstorm.Source{Generate: &rainstorm.Generate{Records: 10, Keys: 2}}}
	for i, n := range widths {
		st := rainstorm.Stage{Name: fmt.Sprintf("keep%d", i), Op: rainstorm.OpProject, Tasks: n, Fields: []string{"key"}}
		if i == len(widths)-1 {
			st = rainstorm.Stage{Name: "count", Op: rainstorm.OpCount, Tasks: n, Key: "key"}
		}
		st.NoChain = !chain
		spec.Stages = append(spec.Stages, st)
	}
	return expandJob(t, name, name, &rainstorm.PipelineParams{Spec: *spec})
}

// gangPipe is a submitted pipelineJob.
type gangPipe struct {
	name, job string
}

// submitGang submits a pipeline as a client does: under its own job id (the
// API's Idempotency-Key), resubmitted while the outcome is unknown (a
// loaded machine can let a replication round outlast the quorum timeout),
// so the job is stored once whatever the first answer was.
func submitGang(t *testing.T, m *Manager, name string, widths ...int) gangPipe {
	t.Helper()
	sub := pipelineJob(t, name, widths...)
	sub.JobID = "j-gang-" + name
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		ack, err := m.Submit(context.Background(), sub)
		if errors.Is(err, wire.ErrOutcomeUnknown) {
			return err
		}
		if err != nil {
			t.Fatalf("submit pipeline %s: %v", name, err)
		}
		if ack.JobID != sub.JobID || !ack.Accepted {
			t.Fatalf("submit pipeline %s: ack %+v", name, ack)
		}
		return nil
	})
	return gangPipe{name: name, job: sub.JobID}
}

// state sums up p's tasks: how many run, how many are pending and hold no
// worker, and each pending task's waiting reason.
func (p gangPipe) state(m *Manager) (running, waiting int, reasons []string, workers map[string][]string) {
	_, _, infos := m.rsTasks(p.job, p.name)
	workers = map[string][]string{}
	for i, in := range infos {
		switch {
		case in.status == wire.WorkflowRunning:
			running++
			workers[in.worker] = append(workers[in.worker], workflowID(p.job, i)) // the job's only workflow group
		case in.status == wire.WorkflowPending && in.worker == "":
			waiting++
			reasons = append(reasons, in.waiting)
		}
	}
	return running, waiting, reasons, workers
}

// waitGang waits until p has want running tasks and every other task waits
// holding nothing, each saying why with reason in it.
func waitGang(t *testing.T, m *Manager, p gangPipe, tasks, wantRunning int, reason string) map[string][]string {
	t.Helper()
	var workers map[string][]string
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		running, waiting, reasons, ws := p.state(m)
		if running != wantRunning || running+waiting != tasks {
			return fmt.Errorf("pipeline %s: %d running, %d waiting holding nothing, of %d; want %d running (waiting: %q)",
				p.name, running, waiting, tasks, wantRunning, reasons)
		}
		for _, r := range reasons {
			if !strings.Contains(r, reason) {
				return fmt.Errorf("pipeline %s: a task waits because %q, want %q in it", p.name, r, reason)
			}
		}
		workers = ws
		return nil
	})
	return workers
}

// completeGang ends every task of p as completed on its worker.
func completeGang(t *testing.T, c *testCluster, workers map[string][]string) {
	t.Helper()
	for id, wfs := range workers {
		c.mu.Lock()
		w := c.workers[id]
		c.mu.Unlock()
		for _, wf := range wfs {
			w.complete(t, wf, nil)
		}
	}
}

// gangCluster is a RainStorm cluster with a worker w1, w2, ... of each
// of cores, and its leader once it counts them all.
func gangCluster(t *testing.T, cores ...int) (*testCluster, *Manager) {
	t.Helper()
	c := newRainstormCluster(t, nil)
	total := 0
	for i, n := range cores {
		c.addWorker(fmt.Sprintf("w%d", i+1), n)
		total += n
	}
	return c, waitCores(t, c, total)
}

// waitCores waits until the leader counts n cores in the datacenter.
func waitCores(t *testing.T, c *testCluster, n int) *Manager {
	t.Helper()
	var l *Manager
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		l = c.leader()
		if total, _, _ := l.workers.capacity(); total != n {
			return fmt.Errorf("%s counts %d cores, want %d", l.ID(), total, n)
		}
		return nil
	})
	return l
}

// Pipelines that together need more cores than the datacenter has are
// placed whole, one after the other, in submission order: each one's
// tasks get cores all together or not at all, so two pipelines never each
// hold part of the cores and wait forever for the rest (placed task by
// task, they did). One that waits holds nothing and says why, and a
// smaller pipeline submitted after it waits behind it rather than taking
// the cores it waits for.
func TestRainstormPipelinesPlacedWhole(t *testing.T) {
	c, lead := gangCluster(t, 2, 3)
	a := submitGang(t, lead, "a", 3)
	b := submitGang(t, lead, "b", 3)
	small := submitGang(t, lead, "small", 2)

	// Five cores: a (3 slots, 4 tasks) runs, b (3 slots) does not fit in
	// the 2 left and waits whole, small (2 slots) would fit but waits
	// behind b.
	onA := waitGang(t, lead, a, 4, 4, "")
	waitGang(t, lead, b, 4, 0, "no free cores for the whole pipeline (needs 3, 2 free)")
	waitGang(t, lead, small, 3, 0, "behind pipeline b")

	completeGang(t, c, onA)
	waitJob(t, lead, a.job, wire.JobCompleted, 20*time.Second)
	onB := waitGang(t, lead, b, 4, 4, "")
	onSmall := waitGang(t, lead, small, 3, 3, "")
	completeGang(t, c, onB)
	completeGang(t, c, onSmall)
	waitJob(t, lead, b.job, wire.JobCompleted, 20*time.Second)
	waitJob(t, lead, small.job, wire.JobCompleted, 20*time.Second)
}

// A running pipeline whose worker died gets its replacement tasks placed
// before a pipeline that waits whole: the replacement needs only its own
// cores, and the waiting pipeline keeps holding nothing.
func TestRainstormReplacementBeforeWaitingPipeline(t *testing.T) {
	c, lead := gangCluster(t, 2, 2)
	a := submitGang(t, lead, "a", 3)
	onA := waitGang(t, lead, a, 4, 4, "")
	b := submitGang(t, lead, "b", 2)
	waitGang(t, lead, b, 3, 0, "no free cores for the whole pipeline (needs 2, 1 free)")

	// Kill a worker of a's: its tasks go back to pending, a replacement
	// worker comes, and a's tasks take its cores first.
	var dead string
	for id := range onA {
		dead = id
		break
	}
	c.killWorker(dead)
	c.addWorker("w3", 2)
	onA = waitGang(t, lead, a, 4, 4, "")
	if _, ok := onA[dead]; ok {
		t.Fatalf("a task of a is still on dead worker %s", dead)
	}
	waitGang(t, lead, b, 3, 0, "no free cores for the whole pipeline")

	completeGang(t, c, onA)
	onB := waitGang(t, lead, b, 3, 3, "")
	completeGang(t, c, onB)
	waitJob(t, lead, b.job, wire.JobCompleted, 20*time.Second)
}

// runToEnd completes each pipeline as soon as all its tasks run, until
// every one of them has; it fails if some never run whole.
func runToEnd(t *testing.T, c *testCluster, m *Manager, pipes []gangPipe, sizes []int) {
	t.Helper()
	ended := map[int]bool{}
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		var open []string
		for i, p := range pipes {
			if ended[i] {
				continue
			}
			running, waiting, reasons, workers := p.state(m)
			if running == sizes[i] {
				completeGang(t, c, workers)
				ended[i] = true
				continue
			}
			open = append(open, fmt.Sprintf("%s: %d running, %d waiting %q", p.name, running, waiting, reasons))
		}
		if len(open) > 0 {
			return fmt.Errorf("never ran whole: %s", strings.Join(open, "; "))
		}
		return nil
	})
	for _, p := range pipes {
		waitJob(t, m, p.job, wire.JobCompleted, 20*time.Second)
	}
}

// The deadlock: two pipelines of 4 slots on 3 workers of 2 cores. The
// first runs; placed a core at a time, the second took the 2 cores left
// and waited for 2 more. A worker holding 2 of the first's slots dies:
// each pipeline then held 2 of the 4 cores left and waited for the
// other's, forever. Placed whole, the second holds nothing, the first's
// replacements take the free cores, it ends, and then the second runs.
func TestRainstormPipelinesNoDeadlockAfterWorkerDeath(t *testing.T) {
	c, lead := gangCluster(t, 2, 2, 2)
	a := submitGang(t, lead, "a", 4)
	var onA map[string][]string
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		running, _, _, ws := a.state(lead)
		if running != 5 {
			return fmt.Errorf("a: %d of 5 tasks run", running)
		}
		onA = ws
		return nil
	})
	b := submitGang(t, lead, "b", 4)
	// Four slots on three workers: some worker holds two of a's, and none
	// of b's (b has the 2 cores left, if any).
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		_, _, reasons, _ := b.state(lead)
		if len(reasons) == 0 || reasons[0] == "" {
			return fmt.Errorf("b not placed yet")
		}
		return nil
	})
	_, _, _, onB := b.state(lead)
	dead := ""
	for id, wfs := range onA {
		if slotsOf(lead, wfs) == 2 && len(onB[id]) == 0 {
			dead = id
		}
	}
	if dead == "" {
		t.Fatalf("no worker holds two of a's slots and none of b's: a %v, b %v", onA, onB)
	}
	c.killWorker(dead)
	runToEnd(t, c, lead, []gangPipe{a, b}, []int{5, 5})
}

// reserveAll reserves cores for every task of a pipeline or for none,
// spreads the tasks over workers where there is room, and keeps each task
// off the workers it excludes.
func TestReserveAllIsAllOrNothing(t *testing.T) {
	tb := newWorkerTable(seeded(5), 64, time.Now)
	tb.register(&wire.WorkerRegistration{NodeID: "a", Addr: "a", TotalCores: 2})
	tb.register(&wire.WorkerRegistration{NodeID: "b", Addr: "b", TotalCores: 3})
	one := func(n int) []gangDemand { return make([]gangDemand, n) }
	for i := range 6 {
		d := one(6)
		for k := range d {
			d[k].cores = 1
		}
		if _, ok := tb.reserveAll(d); ok {
			t.Fatalf("round %d: 6 cores reserved on 5", i)
		}
		if _, free, _ := tb.capacity(); free != 5 {
			t.Fatalf("round %d: a failed reservation left %d of 5 cores free", i, free)
		}
	}
	d := []gangDemand{{cores: 1}, {cores: 1}, {cores: 2, excluded: []string{"a"}}}
	got, ok := tb.reserveAll(d)
	if !ok {
		t.Fatal("3 tasks (4 cores) did not fit on 5 free cores")
	}
	// The 2-core task goes first (the largest), to b; a is then the one
	// worker the pipeline does not use yet, so a 1-core task goes there.
	if got[2].ID != "b" || (got[0].ID != "a" && got[1].ID != "a") {
		t.Fatalf("placed on %s, %s, %s: want the 2-core task on b and a 1-core task on a", got[0].ID, got[1].ID, got[2].ID)
	}
	if _, free, _ := tb.capacity(); free != 1 {
		t.Fatalf("%d cores free after reserving 4 of 5", free)
	}
	if _, ok := tb.reserveAll([]gangDemand{{cores: 1}, {cores: 1}}); ok {
		t.Fatal("2 cores reserved on the 1 left")
	}
	if _, free, _ := tb.capacity(); free != 1 {
		t.Fatalf("a failed reservation took cores: %d free", free)
	}
}

// A pipeline whose cores were reserved whole but whose dispatch then
// failed on one worker, with no other worker free, does not keep the
// tasks that were placed: they go back to pending under a new fence
// token, their runs are stopped, and the pipeline waits whole again until
// it can run whole. Before, the placed tasks held their cores for good.
func TestRainstormPipelineNotPlacedWholeIsUndone(t *testing.T) {
	c := newRainstormCluster(t, nil)
	workers := map[string]*fakeWorker{}
	for _, id := range []string{"w1", "w2", "w3"} {
		workers[id] = c.addWorker(id, 1)
	}
	c.hub.SetHook(func(_, to string, msg wire.Message) bool {
		_, dispatch := msg.(*wire.WorkflowDispatch)
		return !dispatch || to != "w3"
	})
	lead := waitCores(t, c, 3)
	a := submitGang(t, lead, "a", 3)
	// Every dispatch that lands on w3 fails and keeps that task (and so its
	// slot) off w3 from then on; once all three slots are kept off it, two
	// cores are left for three slots, and the pipeline waits whole,
	// holding nothing.
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		running, waiting, reasons, _ := a.state(lead)
		if running != 0 || waiting != 4 {
			return fmt.Errorf("a: %d running, %d waiting holding nothing (%q)", running, waiting, reasons)
		}
		lead.mu.Lock()
		defer lead.mu.Unlock()
		off := map[int]bool{}
		for i := range 4 {
			if w := lead.wfs[workflowID(a.job, i)]; slices.Contains(w.rec.Excluded, "w3") {
				off[slotLocked(w)] = true
			}
		}
		if len(off) != 3 {
			return fmt.Errorf("slots %v kept off w3, want all 3", off)
		}
		return nil
	})
	// The runs it gave back are stopped (the cancel is on its way).
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		for i := range 4 {
			for id, w := range workers {
				if w.running(workflowID(a.job, i)) {
					return fmt.Errorf("task %d still runs on %s", i, id)
				}
			}
		}
		return nil
	})
	c.addWorker("w4", 1)
	onA := waitGang(t, lead, a, 4, 4, "")
	if _, ok := onA["w3"]; ok {
		t.Fatalf("a task runs on w3: %v", onA)
	}
	completeGang(t, c, onA)
	waitJob(t, lead, a.job, wire.JobCompleted, 20*time.Second)
}

// slotsOf counts the slots the pipeline tasks wfs hold between them.
func slotsOf(m *Manager, wfs []string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	slots := map[int]bool{}
	for _, id := range wfs {
		slots[slotLocked(m.wfs[id])] = true
	}
	return len(slots)
}

// The README's example on the README's cluster: two pipelines of a source,
// 3 filter tasks and 3 count tasks (7 tasks each) on 3 workers of 2 cores.
// Each needs 3 slots, so both run at once on the 6 cores; each slot's
// tasks share one core on one worker, and no worker runs more slots than
// it has cores. Before, each task took a core: neither pipeline (7 cores)
// could ever start.
func TestRainstormTasksShareSlots(t *testing.T) {
	c, lead := gangCluster(t, 2, 2, 2)
	a := submitGang(t, lead, "a", 3, 3)
	b := submitGang(t, lead, "b", 3, 3)
	onA := waitGang(t, lead, a, 7, 7, "")
	onB := waitGang(t, lead, b, 7, 7, "")

	for _, on := range []map[string][]string{onA, onB} {
		seen := map[int]string{} // slot → its worker
		for id, wfs := range on {
			lead.mu.Lock()
			for _, wf := range wfs {
				k := slotLocked(lead.wfs[wf])
				if other, ok := seen[k]; ok && other != id {
					t.Errorf("slot %d has tasks on %s and %s", k, other, id)
				}
				seen[k] = id
			}
			lead.mu.Unlock()
		}
		if len(seen) != 3 {
			t.Errorf("tasks in %d slots, want 3: %v", len(seen), on)
		}
	}
	c.mu.Lock()
	for id, w := range c.workers {
		if n := w.freeCores(); n != 0 {
			t.Errorf("worker %s has %d cores free with 6 slots on 6 cores", id, n)
		}
	}
	c.mu.Unlock()

	completeGang(t, c, onA)
	completeGang(t, c, onB)
	waitJob(t, lead, a.job, wire.JobCompleted, 20*time.Second)
	waitJob(t, lead, b.job, wire.JobCompleted, 20*time.Second)
}

// A pipeline that needs more cores than all the datacenter's registered
// workers have is refused at submit, naming the job file's field (its
// widest stage's tasks) and the reason, instead of waiting for its
// timeout. With no worker registered yet nothing can be judged: it is
// accepted and waits. One that fits once cores free up is accepted.
func TestRainstormRefusedAtSubmitWhenItCanNeverFit(t *testing.T) {
	c := newRainstormCluster(t, nil)
	lead := c.leader()
	if _, err := lead.Submit(context.Background(), pipelineJob(t, "early", 3, 39)); err != nil {
		t.Fatalf("a pipeline submitted before any worker registered was refused: %v", err)
	}
	for i := range 3 {
		c.addWorker(fmt.Sprintf("w%d", i+1), 2)
	}
	lead = waitCores(t, c, 6)

	// Chained, the pipeline runs as the source and the count's tasks; the
	// refusal still names the field as the job file has it.
	_, err := lead.Submit(context.Background(), pipelineJobOf(t, "big", true, 3, 39))
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeRejected {
		t.Fatalf("a pipeline of 40 tasks (39 slots) on 6 cores: %v, want rejected", err)
	}
	if we.Field != "workflows[0].stages[1].tasks" ||
		!strings.Contains(we.Message, "needs 39 cores, one per slot (its widest stage, count, has 39 tasks)") ||
		!strings.Contains(we.Message, "live workers (3) have 6 cores in all") {
		t.Fatalf("refusal %q for field %q", we.Message, we.Field)
	}

	// Six slots fit the six cores, even while another pipeline holds some.
	busy := submitGang(t, lead, "busy", 2)
	waitGang(t, lead, busy, 3, 3, "")
	if _, err := lead.Submit(context.Background(), pipelineJob(t, "fits", 6)); err != nil {
		t.Fatalf("a pipeline of 6 slots on 6 cores was refused: %v", err)
	}
}

// A replacement whose dispatch to its slot's worker failed (outcome
// unknown: that worker is excluded for it) still goes back to that worker
// while a task of its slot runs there, instead of waiting for a core
// elsewhere while its slot's core sits there. On 3 workers of 1 core, a
// pipeline of 2 slots (source and count/1; count/2) loses the worker of its
// first slot; the slot goes to the free worker, and count/1's dispatch
// there is lost once. Before, count/1 waited for a free core, which no
// worker had, until the job's timeout.
func TestRainstormReplacementRejoinsItsSlotAfterAFailedDispatch(t *testing.T) {
	c, lead := gangCluster(t, 1, 1, 1)
	a := submitGang(t, lead, "a", 2)
	on := waitGang(t, lead, a, 3, 3, "")
	first := ""
	for id, wfs := range on {
		if slices.Contains(wfs, workflowID(a.job, 0)) {
			first = id
		}
	}
	count1 := workflowID(a.job, 1)
	var dropped atomic.Bool
	c.hub.SetHook(func(_, _ string, msg wire.Message) bool {
		d, ok := msg.(*wire.WorkflowDispatch)
		return !ok || d.WorkflowID != count1 || !dropped.CompareAndSwap(false, true)
	})
	c.killWorker(first)
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		running, waiting, reasons, ws := a.state(lead)
		if running != 3 {
			return fmt.Errorf("%d of 3 tasks run, %d wait (%q); dispatch of count/1 lost: %v", running, waiting, reasons, dropped.Load())
		}
		on = ws
		return nil
	})
	if !dropped.Load() {
		t.Fatal("count/1's dispatch was never lost: the test tested nothing")
	}
	lead.mu.Lock()
	w := lead.wfs[count1]
	worker, excluded := w.rec.Worker, slices.Clone(w.rec.Excluded)
	source := lead.wfs[workflowID(a.job, 0)].rec.Worker
	lead.mu.Unlock()
	if worker != source || !slices.Contains(excluded, worker) {
		t.Fatalf("count/1 runs on %s (excluded %v), the source on %s: want count/1 back in its slot on the worker it was excluded from", worker, excluded, source)
	}
	completeGang(t, c, on)
	waitJob(t, lead, a.job, wire.JobCompleted, 20*time.Second)
}

// A source split into more ranges than every stage has tasks needs a slot
// per range: refused at submit on too few cores, naming source.split.
func TestRainstormSplitSourceRefusedWhenItCanNeverFit(t *testing.T) {
	c := newRainstormCluster(t, nil)
	for i := range 2 {
		c.addConfinedWorker(fmt.Sprintf("w%d", i+1), 2, &wire.Confinement{SourceDirs: []string{"/data"}})
	}
	lead := waitCores(t, c, 4)
	split := &rainstorm.Spec{Source: rainstorm.Source{Path: "/data/in.csv", Split: 6}, Stages: []rainstorm.Stage{
		{Name: "count", Op: rainstorm.OpCount, Tasks: 2, Key: "1"}}}
	_, err := lead.Submit(context.Background(), expandJob(t, "split", "split", &rainstorm.PipelineParams{Spec: *split}))
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeRejected || we.Field != "workflows[0].source.split" ||
		!strings.Contains(we.Message, "needs 6 cores, one per slot (its widest stage, the source, has 6 tasks)") {
		t.Fatalf("a source in 6 ranges on 4 cores: %v, want rejected naming source.split", err)
	}
	split.Source.Split = 4
	if _, err := lead.Submit(context.Background(), expandJob(t, "fits", "fits", &rainstorm.PipelineParams{Spec: *split})); err != nil {
		t.Fatalf("a source in 4 ranges on 4 cores was refused: %v", err)
	}
}
