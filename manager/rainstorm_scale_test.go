package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"tempest/api"
	"tempest/internal/testutil"
	"tempest/rainstorm"
	"tempest/wire"
)

// scaleJob is a generate source and a count stage autoscaled between 1
// and 3 tasks: parts source, count/1, count/2, count/3.
func scaleJob(t *testing.T, pol rainstorm.Autoscale) *wire.JobSubmission {
	t.Helper()
	return expandJob(t, "rs", "pipe", &rainstorm.PipelineParams{Spec: rainstorm.Spec{
		Source: rainstorm.Source{Generate: &rainstorm.Generate{Records: 10, Keys: 2}},
		Stages: []rainstorm.Stage{{Name: "count", Op: rainstorm.OpCount, Key: "key", NoChain: true, Autoscale: &pol}},
	}})
}

// rsCaller calls the leader as worker node, waiting out a leader still
// syncing, and sending again a request a majority did not store in time
// (a loaded host), as a worker's task does.
func rsCaller(t *testing.T, c *testCluster, node string, lead *Manager) func(wire.Message) wire.Message {
	caller := c.hub.Node(node)
	return func(msg wire.Message) wire.Message {
		t.Helper()
		var resp wire.Message
		testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
			var err error
			resp, err = caller.Call(context.Background(), lead.cfg.ID, msg)
			var we *wire.Error
			if errors.As(err, &we) && (we.Code == wire.CodeUnavailable || we.Code == wire.CodeNoQuorum) {
				return err
			}
			if err != nil {
				t.Fatal(err)
			}
			return nil
		})
		return resp
	}
}

func taskState(lead *Manager, job string, k int) rsTaskInfo {
	_, _, infos := lead.rsTasks(job, "pipe")
	if k >= len(infos) {
		return rsTaskInfo{}
	}
	return infos[k]
}

// An autoscaled stage has its maximum of parts from submit, and only its
// starting size is placed. A task of a later epoch is placed once the
// source's durable checkpoint shows the source sending in an epoch that
// has it, the tasks no epoch needed end with the input, and a task's
// handover is answered from its old owner's durable closing checkpoint.
func TestRainstormAutoscalePartsFollowTheSourceEpochs(t *testing.T) {
	c := newRainstormCluster(t, nil)
	c.addWorker("w1", 4)
	lead := c.leader()
	sp := submitScaled(t, c, lead, rainstorm.Autoscale{Min: 1, Max: 3, Low: 1, High: 1e9})
	job, call, src, srcInc, c0, c0Inc := sp.job, sp.call, sp.src, sp.srcInc, sp.c0, sp.c0Inc
	if n := len(rainstorm.TaskOrder(mustSpec(t, lead, job))); n != 4 {
		t.Fatalf("the pipeline has %d parts, want 4 (the source and count's maximum of 3)", n)
	}

	// count/2 and count/3 wait, saying why, until an epoch needs them.
	dormant := func(k int) error {
		in := taskState(lead, job, k)
		if in.status != wire.WorkflowPending || !strings.Contains(in.waiting, "current size") {
			return fmt.Errorf("task %d is %s (%q), want PENDING outside the stage's size", k, in.status, in.waiting)
		}
		return nil
	}
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error { return errors.Join(dormant(2), dormant(3)) })

	// Epochs open with the source's: the start's sizes before it records
	// any.
	open := call(&wire.RainstormOpen{Task: src, Incarnation: srcInc, HasHeader: true}).(*wire.RainstormOpenReply)
	if want := rainstorm.SpecStartEpochs(mustSpec(t, lead, job)); !slices.EqualFunc(open.Epochs, want, epochEqual) {
		t.Fatalf("open answered epochs %v, want %v", open.Epochs, want)
	}
	epochs := []wire.RainstormEpoch{{Tasks: []int{1}}, {Epoch: 1, Segment: 4, Tasks: []int{2}}}
	ckpt := func(v uint64, cur uint64, done bool) {
		t.Helper()
		a := call(&wire.RainstormCheckpoint{Task: src, Incarnation: srcInc, Version: v, Done: done,
			Source: &wire.RainstormSourcePos{Segment: 4, Epochs: epochs, Epoch: cur, Reserve: 6}}).(*wire.RainstormCheckpointAck)
		if a.Refused {
			t.Fatalf("source checkpoint %d refused: %s", v, a.Reason)
		}
	}
	// Recorded, not yet sent in: nothing is placed.
	ckpt(1, 0, false)
	call(&wire.RainstormOpen{Task: c0, Incarnation: c0Inc})
	if err := errors.Join(dormant(2), dormant(3)); err != nil {
		t.Fatal(err)
	}
	// count/1 closes epoch 0, giving away the groups count/2 owns in 1.
	tabs, err := rainstorm.NewTables(epochs)
	if err != nil {
		t.Fatal(err)
	}
	var groups []wire.RainstormGroupState
	for g := range rainstorm.KeyGroups {
		groups = append(groups, wire.RainstormGroupState{Group: g, Entries: []wire.RainstormAggregate{{Key: fmt.Sprint("k", g), Count: 1}}})
	}
	want := wire.RainstormHandoverWant{Stage: 1, Index: 0, Epoch: 0}
	routes := func() *wire.RainstormRoutes {
		return call(&wire.RainstormRoutesRequest{Job: job, Workflow: "pipe", Handovers: []wire.RainstormHandoverWant{want}}).(*wire.RainstormRoutes)
	}
	if r := routes(); len(r.Handovers) != 0 {
		t.Fatalf("a handover answered before the old owner's closing checkpoint: %+v", r.Handovers)
	}
	if a := call(&wire.RainstormCheckpoint{Task: c0, Incarnation: c0Inc, Version: 1, Closing: true, Groups: groups,
		Epochs: epochs, Inputs: []wire.RainstormInput{{Next: 2, EOS: true}}}).(*wire.RainstormCheckpointAck); a.Refused {
		t.Fatalf("closing checkpoint refused: %s", a.Reason)
	}
	// Durable now, but w1 runs no task that gains the groups (count/2 is
	// not placed): a worker sees another task's state only to run it.
	if r := routes(); len(r.Handovers) != 0 {
		t.Fatalf("a handover answered to a worker that runs no task gaining its groups: %+v", r.Handovers)
	}

	// The source sends in epoch 1: count/2 is placed, count/3 still waits.
	ckpt(2, 1, false)
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if in := taskState(lead, job, 2); in.status != wire.WorkflowRunning {
			return fmt.Errorf("count/2 is %s (%q)", in.status, in.waiting)
		}
		return dormant(3)
	})
	// count/2's worker asks: it gets the groups count/2 gains.
	r := routes()
	if len(r.Handovers) != 1 || r.Handovers[0].More {
		t.Fatalf("handovers %+v, want one, whole", r.Handovers)
	}
	moved := tabs.Table(1, 1).Owned(1)
	var got []int
	for _, g := range r.Handovers[0].Groups {
		got = append(got, g.Group)
	}
	if !slices.Equal(got, moved) {
		t.Fatalf("the handover gives groups %v, want the %d that move to count/2: %v", got, len(moved), moved)
	}
	// The input ends in epoch 1: count/3, which no epoch had, ends with it.
	ckpt(3, 1, true)
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if in := taskState(lead, job, 3); in.status != wire.WorkflowCompleted {
			return fmt.Errorf("count/3 is %s", in.status)
		}
		return nil
	})
}

func epochEqual(a, b wire.RainstormEpoch) bool {
	return a.Epoch == b.Epoch && a.Segment == b.Segment && slices.Equal(a.Tasks, b.Tasks)
}

func mustSpec(t *testing.T, m *Manager, job string) *rainstorm.Spec {
	t.Helper()
	spec, _, _ := m.rsTasks(job, "pipe")
	if spec == nil {
		t.Fatalf("job %s has no pipeline", job)
	}
	return spec
}

// The leader samples an autoscaled stage's durable counters: a load over
// its high mark through a window becomes a decision, logged and shown in
// the pipeline's output, and the route answers ask the source for the new
// size until its durable checkpoint records it.
func TestRainstormAutoscaleDecisionAsksTheSource(t *testing.T) {
	c := newRainstormCluster(t, nil)
	c.addWorker("w1", 4)
	lead := c.leader()
	sp := submitScaled(t, c, lead, fastDecisions())
	job, call := sp.job, sp.call
	sp.openSourceAndCount()

	// count/1 takes in 1,000 records every 50 ms: 20,000/s, far over
	// 100 per task.
	resize := sp.loadUntilAsked(t, lead)
	if !slices.Equal(resize, []int{2}) {
		t.Fatalf("the source is asked for sizes %v, want [2]", resize)
	}
	out, err := lead.PipelineOutput(context.Background(), job, "pipe", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Resizes) != 1 || out.Resizes[0].From != 1 || out.Resizes[0].To != 2 || !strings.Contains(out.Resizes[0].Decision, "records/s") {
		t.Fatalf("the output shows decisions %+v, want 1 → 2 with its inputs", out.Resizes)
	}
	if !slices.Equal(out.StageTasks, []int{1, 1}) {
		t.Fatalf("stage sizes %v before the source recorded the epoch, want [1 1]", out.StageTasks)
	}
	// Once the source records the epoch, nobody asks again.
	sp.call = call
	sp.sourceRecordsTheResize(t)
}

// A completed task's route names the epoch its final checkpoint closed (its
// completion acknowledges that epoch's channel only); a task retired by a
// shrink that a later recorded epoch has again is not shown done, or its
// upstream would take the new epoch's batches as acknowledged.
func TestRainstormDoneRouteOfARetiredTask(t *testing.T) {
	epochs := []wire.RainstormEpoch{{Tasks: []int{3}}, {Epoch: 1, Segment: 4, Tasks: []int{1}}}
	retired := &wire.RainstormCheckpoint{Epoch: 0, Closing: true, Retired: true, Done: true}
	r := wire.RainstormRoute{Stage: 1, Index: 2, Done: true, Node: "w1"}
	rsDoneRoute(&r, retired, epochs)
	if !r.Done || r.Epoch != 0 || r.Node != "w1" {
		t.Fatalf("a task retired for good: route %+v, want done in epoch 0", r)
	}
	final := &wire.RainstormCheckpoint{Epoch: 1, Done: true}
	r = wire.RainstormRoute{Stage: 1, Index: 0, Done: true, Node: "w1"}
	rsDoneRoute(&r, final, epochs)
	if !r.Done || r.Epoch != 1 {
		t.Fatalf("a task done at the end: route %+v, want done in epoch 1", r)
	}
	back := append(slices.Clone(epochs), wire.RainstormEpoch{Epoch: 2, Segment: 9, Tasks: []int{3}})
	r = wire.RainstormRoute{Stage: 1, Index: 2, Done: true, Node: "w1"}
	rsDoneRoute(&r, retired, back)
	if r.Done || r.Node != "" {
		t.Fatalf("a retired task that epoch 2 has again: route %+v, want not done", r)
	}
}

// scaled is an autoscaled pipeline submitted to lead, with its source
// and first count task as worker w1 speaks for them.
type scaled struct {
	job           string
	call          func(wire.Message) wire.Message
	src, c0       wire.RainstormTask
	srcInc, c0Inc uint64
}

// fastDecisions decides on the first window over 100 records/s a task,
// with no cooldown: the unit tests' load is far over it.
func fastDecisions() rainstorm.Autoscale {
	return rainstorm.Autoscale{Min: 1, Max: 3, Low: 10, High: 100, Window: 1500 * time.Millisecond, Cooldown: time.Millisecond}
}

// openSourceAndCount opens the source and count/1 as their worker does.
func (sp *scaled) openSourceAndCount() {
	sp.call(&wire.RainstormOpen{Task: sp.src, Incarnation: sp.srcInc, HasHeader: true})
	sp.call(&wire.RainstormOpen{Task: sp.c0, Incarnation: sp.c0Inc})
}

// loadUntilAsked reports count/1 taking in 1,000 records a checkpoint
// (every 50 ms: 20,000/s, far over the test's high mark) until the route
// answers ask the source for new sizes, and returns them.
func (sp *scaled) loadUntilAsked(t *testing.T, lead *Manager) []int {
	t.Helper()
	var resize []int
	v := uint64(0)
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		v++
		if a := sp.call(&wire.RainstormCheckpoint{Task: sp.c0, Incarnation: sp.c0Inc, Version: v,
			Epochs: rainstorm.SpecStartEpochs(mustSpec(t, lead, sp.job)), RecordsIn: 1000 * v}).(*wire.RainstormCheckpointAck); a.Refused {
			t.Fatalf("checkpoint refused: %s", a.Reason)
		}
		resize = sp.call(&wire.RainstormRoutesRequest{Job: sp.job, Workflow: "pipe"}).(*wire.RainstormRoutes).Resize
		if len(resize) == 0 {
			return errors.New("no resize asked for")
		}
		return nil
	})
	return resize
}

// sourceRecordsTheResize checkpoints the source in the 1 → 2 epoch and
// waits until the route answers no longer ask for it.
func (sp *scaled) sourceRecordsTheResize(t *testing.T) {
	t.Helper()
	epochs := []wire.RainstormEpoch{{Tasks: []int{1}}, {Epoch: 1, Segment: 2, Tasks: []int{2}}}
	if a := sp.call(&wire.RainstormCheckpoint{Task: sp.src, Incarnation: sp.srcInc, Version: 1,
		Source: &wire.RainstormSourcePos{Epochs: epochs, Reserve: 2}}).(*wire.RainstormCheckpointAck); a.Refused {
		t.Fatalf("source checkpoint refused: %s", a.Reason)
	}
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		if r := sp.call(&wire.RainstormRoutesRequest{Job: sp.job, Workflow: "pipe"}).(*wire.RainstormRoutes).Resize; len(r) > 0 {
			return fmt.Errorf("still asked for %v", r)
		}
		return nil
	})
}

// sendInTheGrow checkpoints the source (its first version) recording the
// 1 → 2 epoch from segment seg and sending in it, waits until count/2 is
// placed and runs, and returns the epochs.
func (sp *scaled) sendInTheGrow(t *testing.T, lead *Manager, seg uint64) []wire.RainstormEpoch {
	t.Helper()
	epochs := []wire.RainstormEpoch{{Tasks: []int{1}}, {Epoch: 1, Segment: seg, Tasks: []int{2}}}
	if a := sp.call(&wire.RainstormCheckpoint{Task: sp.src, Incarnation: sp.srcInc, Version: 1,
		Source: &wire.RainstormSourcePos{Segment: seg, Epochs: epochs, Epoch: 1, Reserve: seg + 2}}).(*wire.RainstormCheckpointAck); a.Refused {
		t.Fatalf("source checkpoint refused: %s", a.Reason)
	}
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if in := taskState(lead, sp.job, 2); in.status != wire.WorkflowRunning {
			return fmt.Errorf("count/2 is %s (%q)", in.status, in.waiting)
		}
		return nil
	})
	return epochs
}

// scaledAskedToGrow submits the scaled pipeline to a cluster with one
// worker, opens its source and count/1, and loads the count until the
// leader asks the source to grow it to 2 tasks.
func scaledAskedToGrow(t *testing.T) (*testCluster, *Manager, scaled) {
	t.Helper()
	c := newRainstormCluster(t, nil)
	c.addWorker("w1", 4)
	lead := c.leader()
	sp := submitScaled(t, c, lead, fastDecisions())
	sp.openSourceAndCount()
	if r := sp.loadUntilAsked(t, lead); !slices.Equal(r, []int{2}) {
		t.Fatalf("the source is asked for %v, want [2]", r)
	}
	return c, lead, sp
}

func submitScaled(t *testing.T, c *testCluster, lead *Manager, a rainstorm.Autoscale) scaled {
	t.Helper()
	ack, err := lead.Submit(context.Background(), scaleJob(t, a))
	if err != nil {
		t.Fatal(err)
	}
	job := ack.JobID
	return scaled{
		job: job, call: rsCaller(t, c, "w1", lead),
		src: wire.RainstormTask{Job: job, Workflow: "pipe"}, srcInc: taskToken(t, lead, job, 0, 0),
		c0: wire.RainstormTask{Job: job, Workflow: "pipe", Stage: 1}, c0Inc: taskToken(t, lead, job, 1, 0),
	}
}

// A handover larger than one message comes in pages, each under the
// message cap, and together they are exactly the state the old owner gave
// to the asking worker's task.
func TestRainstormHandoverPagedPastAMessage(t *testing.T) {
	// One manager: the paging is the leader's alone, and replicating
	// megabytes of state to peers under the race detector only slows the
	// test (on a loaded host, past election timeouts).
	c := newTestCluster(t, 1, nil)
	if err := c.reg.Register(idleRainstorm{}); err != nil {
		t.Fatal(err)
	}
	c.addWorker("w1", 4)
	lead := c.leader()
	sp := submitScaled(t, c, lead, rainstorm.Autoscale{Min: 1, Max: 2, Low: 1, High: 1e9})
	job, call, c0, c0Inc := sp.job, sp.call, sp.c0, sp.c0Inc
	sp.openSourceAndCount()
	epochs := sp.sendInTheGrow(t, lead, 4)

	// count/1's state: over a message of keys in the groups count/2
	// gains, written as a task would, in checkpoints under the cap.
	tabs, err := rainstorm.NewTables(epochs)
	if err != nil {
		t.Fatal(err)
	}
	next := tabs.Table(1, 1)
	given := map[string]int64{}
	pad := strings.Repeat("x", 1000) // few keys, many bytes: quick to commit
	size, v := 0, uint64(0)
	for i := 0; size <= wire.MaxMessageSize+wire.MaxMessageSize/10; {
		byGroup := map[int][]wire.RainstormAggregate{}
		for chunk := 0; chunk < wire.MaxMessageSize/8; i++ {
			k := fmt.Sprintf("%s%d", pad, i)
			g := rainstorm.KeyGroup(k)
			if next[g] != 1 {
				continue
			}
			e := wire.RainstormAggregate{Key: k, Count: int64(i)}
			byGroup[g] = append(byGroup[g], e)
			given[k] = e.Count
			chunk += len(k) + 8
			size += len(k) + 8
		}
		v++
		ck := &wire.RainstormCheckpoint{Task: c0, Incarnation: c0Inc, Version: v, Epochs: epochs, Inputs: []wire.RainstormInput{{Next: v}}}
		for g, es := range byGroup {
			ck.Groups = append(ck.Groups, wire.RainstormGroupState{Group: g, Entries: es})
		}
		if a := call(ck).(*wire.RainstormCheckpointAck); a.Refused {
			t.Fatalf("checkpoint %d refused: %s", v, a.Reason)
		}
	}
	v++
	if a := call(&wire.RainstormCheckpoint{Task: c0, Incarnation: c0Inc, Version: v, Closing: true, Epochs: epochs,
		Inputs: []wire.RainstormInput{{Next: v}}}).(*wire.RainstormCheckpointAck); a.Refused {
		t.Fatalf("closing checkpoint refused: %s", a.Reason)
	}

	want := wire.RainstormHandoverWant{Stage: 1, Index: 0, Epoch: 0}
	got := map[string]int64{}
	pages := 0
	for {
		r := call(&wire.RainstormRoutesRequest{Job: job, Workflow: "pipe", Handovers: []wire.RainstormHandoverWant{want}}).(*wire.RainstormRoutes)
		if len(r.Handovers) != 1 {
			t.Fatalf("page %d: %d handovers, want 1", pages+1, len(r.Handovers))
		}
		b, err := wire.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > wire.MaxMessageSize {
			t.Fatalf("page %d is %d bytes, over the %d-byte message cap", pages+1, len(b), wire.MaxMessageSize)
		}
		pages++
		h := r.Handovers[0]
		if h.FromGroup != want.FromGroup || h.FromEntry != want.FromEntry {
			t.Fatalf("page %d starts at %d/%d, asked from %d/%d", pages, h.FromGroup, h.FromEntry, want.FromGroup, want.FromEntry)
		}
		for _, g := range h.Groups {
			if next[g.Group] != 1 {
				t.Fatalf("page %d has group %d, which count/2 does not gain", pages, g.Group)
			}
			for _, e := range g.Entries {
				if _, dup := got[e.Key]; dup {
					t.Fatalf("key %.20s… served twice", e.Key)
				}
				got[e.Key] = e.Count
			}
		}
		if !h.More {
			break
		}
		want.FromGroup, want.FromEntry = h.NextGroup, h.NextEntry
	}
	if pages < 2 {
		t.Fatalf("a state of %d bytes came in %d page", size, pages)
	}
	if len(got) != len(given) {
		t.Fatalf("the pages hold %d keys, want the %d given", len(got), len(given))
	}
	for k, n := range given {
		if got[k] != n {
			t.Fatalf("key %.20s… counts %d in the handover, want %d", k, got[k], n)
		}
	}
	// The leader counted what moved, each page once.
	lead.rsScale.mu.Lock()
	st := lead.rsScale.pipes[rsPipeKey{job, "pipe"}].handovers[rsResizeKey{"count", 1}]
	lead.rsScale.mu.Unlock()
	if st == nil || st.keys != len(given) || st.bytes < int64(size) || st.done.IsZero() {
		t.Fatalf("the leader's handover figures %+v, want %d keys, %d bytes or more, complete", st, len(given), size)
	}
	t.Logf("%d keys (%d bytes of keys) in %d pages", len(got), size, pages)
}

// partID is the workflow id of pipeline part k of job.
func partID(t *testing.T, m *Manager, job string, k int) string {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	var parts []string
	if j := m.jobs[job]; j != nil {
		for _, w := range j.wfs {
			if w.rec.Spec.Name == "pipe" && isPipeline(w) {
				parts = append(parts, w.rec.WorkflowID)
			}
		}
	}
	if k >= len(parts) {
		t.Fatalf("job %s has %d parts", job, len(parts))
	}
	return parts[k]
}

// A ramp low → high → low → high: count/2, placed by the first grow and
// retired by the shrink (its drained checkpoint done, its part completed),
// is placed again by the second grow under a new fence token, opens from
// its drained checkpoint and carries on its chain of versions in the new
// epoch.
func TestRainstormAutoscaleRetiredTaskPlacedAgain(t *testing.T) {
	c := newRainstormCluster(t, nil)
	w1 := c.addWorker("w1", 4)
	lead := c.leader()
	sp := submitScaled(t, c, lead, rainstorm.Autoscale{Min: 1, Max: 2, Low: 1, High: 1e9})
	job, call, src, srcInc := sp.job, sp.call, sp.src, sp.srcInc
	call(&wire.RainstormOpen{Task: src, Incarnation: srcInc, HasHeader: true})
	epochs := []wire.RainstormEpoch{{Tasks: []int{1}}, {Epoch: 1, Segment: 4, Tasks: []int{2}}}
	srcV := uint64(0)
	sendIn := func(cur uint64) {
		t.Helper()
		srcV++
		seg := epochs[len(epochs)-1].Segment
		if a := call(&wire.RainstormCheckpoint{Task: src, Incarnation: srcInc, Version: srcV,
			Source: &wire.RainstormSourcePos{Segment: seg, Epochs: slices.Clone(epochs), Epoch: cur, Reserve: seg + 2}}).(*wire.RainstormCheckpointAck); a.Refused {
			t.Fatalf("source checkpoint %d refused: %s", srcV, a.Reason)
		}
	}
	c1 := wire.RainstormTask{Job: job, Workflow: "pipe", Stage: 1, Index: 1}

	// High: epoch 1 has count/2.
	sendIn(1)
	tok1 := taskToken(t, lead, job, 2, 0)
	call(&wire.RainstormOpen{Task: c1, Incarnation: tok1})

	// Low: epoch 2 retires it. Its drained checkpoint is done; its
	// worker reports the part finished.
	epochs = append(epochs, wire.RainstormEpoch{Epoch: 2, Segment: 8, Tasks: []int{1}})
	sendIn(2)
	if a := call(&wire.RainstormCheckpoint{Task: c1, Incarnation: tok1, Version: 1, Epoch: 1, Closing: true, Retired: true, Done: true,
		Epochs: slices.Clone(epochs), Inputs: []wire.RainstormInput{{Next: 2, EOS: true}}}).(*wire.RainstormCheckpointAck); a.Refused {
		t.Fatalf("count/2's drained checkpoint refused: %s", a.Reason)
	}
	w1.complete(t, partID(t, lead, job, 2), nil)
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if in := taskState(lead, job, 2); in.status != wire.WorkflowCompleted {
			return fmt.Errorf("count/2 is %s after retiring", in.status)
		}
		return nil
	})

	// High again: epoch 3 has count/2 again; it is placed anew.
	epochs = append(epochs, wire.RainstormEpoch{Epoch: 3, Segment: 12, Tasks: []int{2}})
	sendIn(3)
	tok2 := taskToken(t, lead, job, 2, tok1)
	if tok2 <= tok1 {
		t.Fatalf("count/2 placed again under token %d, not past %d", tok2, tok1)
	}
	open := call(&wire.RainstormOpen{Task: c1, Incarnation: tok2}).(*wire.RainstormOpenReply)
	if open.Checkpoint == nil || open.Checkpoint.Version != 1 || !open.Checkpoint.Retired {
		t.Fatalf("count/2 opens again from %+v, want its drained checkpoint (version 1)", open.Checkpoint)
	}
	if !slices.EqualFunc(open.Epochs, epochs, epochEqual) {
		t.Fatalf("count/2 opens again with epochs %v, want %v", open.Epochs, epochs)
	}
	if a := call(&wire.RainstormCheckpoint{Task: c1, Incarnation: tok2, Version: 2, Epoch: 3, Epochs: slices.Clone(epochs),
		Inputs: []wire.RainstormInput{{Next: 1}}}).(*wire.RainstormCheckpointAck); a.Refused {
		t.Fatalf("count/2's first checkpoint in epoch 3 refused: %s", a.Reason)
	}
	// Its route is a running task's, not a done one's: the source's
	// batches of epoch 3 are not taken as acknowledged.
	for _, r := range call(&wire.RainstormRoutesRequest{Job: job, Workflow: "pipe"}).(*wire.RainstormRoutes).Routes {
		if r.Stage == 1 && r.Index == 1 && (r.Done || r.Addr == "") {
			t.Fatalf("count/2's route %+v, want it running", r)
		}
	}
}

// A status shows every size change the source's durable epochs record:
// this leader's decisions with their inputs, and one made from the epoch
// for a change decided under an earlier leader, in epoch order.
func TestRainstormRecordedResizesSurviveTheLeader(t *testing.T) {
	spec := &rainstorm.Spec{Stages: []rainstorm.Stage{{Name: "work"}, {Name: "count"}}}
	epochs := []wire.RainstormEpoch{{Tasks: []int{1, 1}}, {Epoch: 1, Segment: 4, Tasks: []int{2, 1}},
		{Epoch: 2, Segment: 9, Tasks: []int{2, 2}}}
	mine := []api.PipelineResize{
		{At: time.Unix(5, 0), Stage: "count", From: 1, To: 2, Epoch: 2, Decision: "1 → 2 tasks: above high"},
		{At: time.Unix(9, 0), Stage: "work", From: 2, To: 3, Epoch: 3, Decision: "2 → 3 tasks: above high"},
	}
	got := rsRecordedResizes(spec, epochs, mine)
	var sum []string
	for _, r := range got {
		sum = append(sum, fmt.Sprintf("%s %d→%d e%d", r.Stage, r.From, r.To, r.Epoch))
	}
	if want := []string{"work 1→2 e1", "count 1→2 e2", "work 2→3 e3"}; !slices.Equal(sum, want) {
		t.Fatalf("resizes %v, want %v", sum, want)
	}
	if !got[0].At.IsZero() || !strings.Contains(got[0].Decision, "earlier leader") {
		t.Fatalf("the earlier leader's resize shows %+v", got[0])
	}
	if got[1].Decision != mine[0].Decision {
		t.Fatalf("this leader's decision shows %q, want its inputs", got[1].Decision)
	}
}

// A handover is complete once every moving group was served whole, an
// empty group included (it has no entries to show in a page), and a page
// served twice counts once.
func TestRainstormHandoverFiguresCountEachGroupOnce(t *testing.T) {
	var s rsScaleState
	key := rsPipeKey{"j", "pipe"}
	log := slog.New(slog.DiscardHandler)
	t0 := time.Unix(100, 0)
	s.handoverAsked(key, "count", 1, t0)
	s.handoverAsked(key, "count", 1, t0.Add(time.Second)) // asked again: the clock started at the first
	agg := []wire.RainstormAggregate{{Key: "a", Count: 1}, {Key: "b", Count: 2}}
	first := wire.RainstormHandover{Stage: 1, More: true, NextGroup: 5, NextEntry: 1,
		Groups: []wire.RainstormGroupState{{Group: 4, Entries: agg}, {Group: 5, Entries: agg[:1]}}}
	s.handedOver(key, "count", 1, 3, first, nil, t0.Add(2*time.Second), log)
	s.handedOver(key, "count", 1, 3, first, nil, t0.Add(2*time.Second), log) // served twice
	// The last page ends group 5; group 6 moves too, with no keys.
	last := wire.RainstormHandover{Stage: 1, FromGroup: 5, FromEntry: 1, Groups: []wire.RainstormGroupState{{Group: 5, Entries: agg[1:]}}}
	s.handedOver(key, "count", 1, 3, last, []int{4, 5, 6}, t0.Add(3*time.Second), log)
	st := s.pipes[key].handovers[rsResizeKey{"count", 1}]
	if st.keys != 4 || st.done.IsZero() || st.done.Sub(st.asked) != 3*time.Second {
		t.Fatalf("figures: %d keys, done after %s; want 4 keys, done after 3s", st.keys, st.done.Sub(st.asked))
	}
}

// Counting a served page's bytes costs what the page's bookkeeping does,
// not a second encoding of its entries: the count is the store's estimate,
// the one the page's budget was cut by. A page of 8,000 entries
// (about 300 kB encoded) allocated its size again under the scale lock.
func TestRainstormHandoverFiguresDoNotEncodeThePage(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	page := wire.RainstormHandover{Stage: 1, FromGroup: 0}
	want := int64(0)
	for g := range 4 {
		part := wire.RainstormGroupState{Group: g}
		for i := range 2000 {
			e := wire.RainstormAggregate{Key: fmt.Sprintf("key-%03d-%08d", g, i), Count: int64(i)}
			want += int64(16 + len(e.Key))
			part.Entries = append(part.Entries, e)
		}
		page.Groups = append(page.Groups, part)
	}
	var before, after runtime.MemStats
	var s rsScaleState
	key := rsPipeKey{"j", "pipe"}
	s.handoverAsked(key, "count", 1, time.Unix(100, 0))
	runtime.ReadMemStats(&before)
	s.handedOver(key, "count", 1, 4, page, []int{0, 1, 2, 3}, time.Unix(101, 0), log)
	runtime.ReadMemStats(&after)
	st := s.pipes[key].handovers[rsResizeKey{"count", 1}]
	if st.keys != 8000 || st.bytes != want {
		t.Fatalf("figures: %d keys, %d bytes; want 8000 keys, %d bytes", st.keys, st.bytes, want)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
		t.Fatalf("counting a page of %d bytes allocated %d bytes", want, n)
	}
}

// A decision is stored on a majority before the source hears of it, so a
// leader that dies before the source records it does not take it along:
// the next leader reads it with the store and goes on asking the source
// for it, with no load of its own to decide from (the counters stand
// still), shows it in the status with its inputs, and stops asking once
// the source's checkpoint records it.
func TestRainstormAutoscaleNewLeaderContinuesTheDecision(t *testing.T) {
	c, lead, sp := scaledAskedToGrow(t)
	job, call := sp.job, sp.call

	// The leader dies before the source records the sizes.
	c.stopManager(lead.cfg.ID)
	next := c.leader()
	call = rsCaller(t, c, "w1", next)
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		if r := call(&wire.RainstormRoutesRequest{Job: job, Workflow: "pipe"}).(*wire.RainstormRoutes).Resize; !slices.Equal(r, []int{2}) {
			return fmt.Errorf("the new leader asks the source for %v, want [2]", r)
		}
		return nil
	})
	// What it asks for is stored in its own term on a majority (both
	// managers left): the record it loaded may have been a copy only a
	// minority held, and its successor must know what the source was
	// asked.
	for _, m := range c.running() {
		if sc := m.rs.Scale(job, "pipe"); sc == nil || sc.Term != next.leading().Number() || !slices.Equal(sc.Want, []int{2}) {
			t.Fatalf("%s holds %+v while the new leader (term %d) asks the source, want [2] stored in its term", m.ID(), sc, next.leading().Number())
		}
	}
	out, err := next.PipelineOutput(context.Background(), job, "pipe", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Resizes) != 1 || out.Resizes[0].From != 1 || out.Resizes[0].To != 2 || out.Resizes[0].At.IsZero() ||
		!strings.Contains(out.Resizes[0].Decision, "records/s") {
		t.Fatalf("the new leader's status shows decisions %+v, want the dead leader's 1 → 2 with its time and inputs", out.Resizes)
	}

	// Recorded by the source: nobody asks again.
	sp.call = call
	sp.sourceRecordsTheResize(t)
}

// A paced source whose window is full reads only what the first stage
// takes in, so a backlog counted from its reads stays flat and the load
// reads as the stage's capacity. The records its schedule made due, which
// it reports as Offered, show the load it is offered: the stage, taking in
// far under high, grows because the schedule runs away from it.
func TestRainstormAutoscaleCountsTheSourcesOfferedLoad(t *testing.T) {
	c := newRainstormCluster(t, nil)
	c.addWorker("w1", 4)
	lead := c.leader()
	sp := submitScaled(t, c, lead, rainstorm.Autoscale{Min: 1, Max: 3, Low: 1, High: 100,
		Window: 1500 * time.Millisecond, Cooldown: time.Millisecond})
	job, call, srcInc, c0, c0Inc := sp.job, sp.call, sp.srcInc, sp.c0, sp.c0Inc
	sp.openSourceAndCount()
	srcID := partID(t, lead, job, 0)
	caller := c.hub.Node("w1")
	v := uint64(0)
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		v++
		// count/1 takes in 2 records a round (some 40/s, under high); the
		// source has read a window's worth more than that, and its
		// schedule has 1,000 more records due every round.
		if a := call(&wire.RainstormCheckpoint{Task: c0, Incarnation: c0Inc, Version: v, Epochs: rainstorm.SpecStartEpochs(mustSpec(t, lead, job)),
			RecordsIn: 2 * v}).(*wire.RainstormCheckpointAck); a.Refused {
			t.Fatalf("checkpoint refused: %s", a.Reason)
		}
		if _, err := caller.Call(context.Background(), lead.cfg.ID, &wire.WorkflowProgress{JobID: job, WorkflowID: srcID, WorkerID: "w1",
			FenceToken: srcInc, Status: wire.WorkflowRunning, CompletedCount: int64(2*v + 100), Offered: int64(1000 * v)}); err != nil {
			t.Fatalf("source progress: %v", err)
		}
		if r := call(&wire.RainstormRoutesRequest{Job: job, Workflow: "pipe"}).(*wire.RainstormRoutes).Resize; !slices.Equal(r, []int{2}) {
			return fmt.Errorf("the source is asked for %v, want [2]", r)
		}
		return nil
	})
}

// A stage's cooldown counts from its last change, not from when this
// leader began sampling it: a stage that never changed grows after one
// window of load over high, though its cooldown is an hour. A leader's
// scaler that counted the cooldown from its own start waited it out in
// every term, and under leader changes every few seconds (a loaded
// `tempest dev`) the example's stage never grew.
func TestRainstormAutoscaleCooldownCountsFromTheLastChange(t *testing.T) {
	c := newRainstormCluster(t, nil)
	c.addWorker("w1", 4)
	lead := c.leader()
	pol := fastDecisions()
	pol.Cooldown = time.Hour
	sp := submitScaled(t, c, lead, pol)
	sp.openSourceAndCount()
	if r := sp.loadUntilAsked(t, lead); !slices.Equal(r, []int{2}) {
		t.Fatalf("the source is asked for %v, want [2]", r)
	}
	// The decision is the stage's last change: the cooldown counts from
	// it now.
	lead.rsScale.mu.Lock()
	last := rsLastChangeLocked(lead.rsScale.pipes[rsPipeKey{sp.job, "pipe"}], "count")
	lead.rsScale.mu.Unlock()
	if last.IsZero() || time.Since(last) > time.Minute {
		t.Fatalf("the stage's last change reads %v after a decision", last)
	}
}
