package manager

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/leadership"
	"tempest/wire"
)

// foldProgress keeps what a peer's monotonic merge would end with: the
// later job fields, an ended job ended, and per workflow the ended entry or
// the newer fence token, whichever order the statuses were taken in.
func TestFoldProgress(t *testing.T) {
	for _, tc := range []struct {
		name       string
		first, sec wire.JobProgress
		wantJob    wire.JobStatus
		wantToken  uint64
		want       []string
	}{
		{
			name: "later status wins",
			first: wire.JobProgress{JobID: "j", Timestamp: 1, Status: wire.JobRunning, Workflows: []wire.WorkflowProgress{
				{WorkflowID: "a", Status: wire.WorkflowAssigned, FenceToken: 1},
				{WorkflowID: "b", Status: wire.WorkflowAssigned, FenceToken: 2},
			}},
			sec: wire.JobProgress{JobID: "j", Timestamp: 2, Status: wire.JobCompleted, Workflows: []wire.WorkflowProgress{
				{WorkflowID: "b", Status: wire.WorkflowCompleted, FenceToken: 2},
				{WorkflowID: "c", Status: wire.WorkflowRunning, FenceToken: 3},
			}},
			wantJob: wire.JobCompleted,
			want:    []string{"a:ASSIGNED@1", "b:COMPLETED@2", "c:RUNNING@3"},
		},
		{
			name: "queued out of order: the ended job and workflow stay ended",
			first: wire.JobProgress{JobID: "j", Timestamp: 5, Status: wire.JobCompleted, FenceToken: 9, Workflows: []wire.WorkflowProgress{
				{WorkflowID: "a", Status: wire.WorkflowCompleted, FenceToken: 1},
			}},
			sec: wire.JobProgress{JobID: "j", Timestamp: 4, Status: wire.JobRunning, FenceToken: 7, Workflows: []wire.WorkflowProgress{
				{WorkflowID: "a", Status: wire.WorkflowRunning, FenceToken: 1},
			}},
			wantJob: wire.JobCompleted, wantToken: 9,
			want: []string{"a:COMPLETED@1"},
		},
		{
			name: "a newer attempt over an ended older one",
			first: wire.JobProgress{JobID: "j", Timestamp: 1, Status: wire.JobRunning, Workflows: []wire.WorkflowProgress{
				{WorkflowID: "a", Status: wire.WorkflowFailed, FenceToken: 1},
			}},
			sec: wire.JobProgress{JobID: "j", Timestamp: 2, Status: wire.JobRunning, Workflows: []wire.WorkflowProgress{
				{WorkflowID: "a", Status: wire.WorkflowAssigned, FenceToken: 4},
			}},
			wantJob: wire.JobRunning,
			want:    []string{"a:ASSIGNED@4"},
		},
		{
			name: "an older attempt never replaces a newer one",
			first: wire.JobProgress{JobID: "j", Timestamp: 1, Status: wire.JobRunning, Workflows: []wire.WorkflowProgress{
				{WorkflowID: "a", Status: wire.WorkflowRunning, FenceToken: 4},
			}},
			sec: wire.JobProgress{JobID: "j", Timestamp: 2, Status: wire.JobRunning, Workflows: []wire.WorkflowProgress{
				{WorkflowID: "a", Status: wire.WorkflowCompleted, FenceToken: 3},
			}},
			wantJob: wire.JobRunning,
			want:    []string{"a:RUNNING@4"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &statusQueue{pending: map[string]*wire.JobProgress{}}
			if !q.add(tc.first) {
				t.Fatal("first add did not ask for a sender")
			}
			if q.add(tc.sec) {
				t.Fatal("second add asked for a second sender")
			}
			q.add(wire.JobProgress{JobID: "k", Status: wire.JobRunning})
			batch := q.take()
			if len(batch) != 2 || batch[0].JobID != "j" || batch[1].JobID != "k" {
				t.Fatalf("batch %+v, want j then k", batch)
			}
			j := batch[0]
			if j.Status != tc.wantJob || j.FenceToken != tc.wantToken {
				t.Errorf("job %s under lease token %d, want %s, %d", j.Status, j.FenceToken, tc.wantJob, tc.wantToken)
			}
			var got []string
			for _, w := range j.Workflows {
				got = append(got, fmt.Sprintf("%s:%s@%d", w.WorkflowID, w.Status, w.FenceToken))
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("folded workflows %v, want %v", got, tc.want)
			}
			if more := q.take(); len(more) != 0 || q.sending {
				t.Fatalf("queue not drained: %v, sending %v", more, q.sending)
			}
		})
	}
}

// Status batches are split within the size budget and the round bound.
func TestStatusChunks(t *testing.T) {
	var jps []wire.JobProgress
	for i := range 2*maxRoundBatch + 3 {
		jps = append(jps, wire.JobProgress{JobID: fmt.Sprint(i)})
	}
	chunks := statusChunks(jps)
	if len(chunks) != 3 || len(chunks[0]) != maxRoundBatch || len(chunks[2]) != 3 {
		t.Fatalf("%d chunks (first %d); want 3 of at most %d", len(chunks), len(chunks[0]), maxRoundBatch)
	}
	// Statuses whose series alone fill the budget travel one by one.
	big := make([]wire.SecondStats, statusBatchBudget/64)
	jps = []wire.JobProgress{
		{JobID: "a", Workflows: []wire.WorkflowProgress{{WorkflowID: "a-0", Series: big}}},
		{JobID: "c"},
		{JobID: "d"},
		{JobID: "b", Workflows: []wire.WorkflowProgress{{WorkflowID: "b-0", Series: big}}},
		{JobID: "e"},
	}
	var sizes []int
	for _, c := range statusChunks(jps) {
		sizes = append(sizes, len(c))
	}
	if !slices.Equal(sizes, []int{1, 2, 1, 1}) {
		t.Fatalf("chunks of sizes %v; want [1 2 1 1] (each big status alone, the small ones together)", sizes)
	}
}

// quorumTraffic counts, per follower, the quorum, commit and status
// messages the leader sends it, and holds the first of each kind for a
// moment, so that the placements running meanwhile have to queue behind
// the rounds in flight.
type quorumTraffic struct {
	mu       sync.Mutex
	leader   string
	rounds   map[string]int // ProvisionRequest + ProvisionBatch
	commits  map[string]int // ProvisionCommit + ProvisionCommitBatch
	statuses map[string]int // ReplicateJobStatus + ReplicateJobStatusBatch
	largest  int            // most requests in one ProvisionBatch
	held     map[wire.MsgType]int
}

func (q *quorumTraffic) hook(from, to string, msg wire.Message) bool {
	if from != q.leader {
		return true
	}
	q.mu.Lock()
	var kind wire.MsgType
	switch m := msg.(type) {
	case *wire.ProvisionRequest:
		q.rounds[to]++
		kind = wire.TypeProvisionRequest
	case *wire.ProvisionBatch:
		q.rounds[to]++
		q.largest = max(q.largest, len(m.Requests))
		kind = wire.TypeProvisionRequest
	case *wire.ProvisionCommit, *wire.ProvisionCommitBatch:
		q.commits[to]++
		kind = wire.TypeProvisionCommit
	case *wire.ReplicateJobStatus, *wire.ReplicateJobStatusBatch:
		q.statuses[to]++
		kind = wire.TypeReplicateJobStatus
	}
	// The first rounds of each kind (as many as may be in flight, to each
	// peer) are slow.
	hold := kind != 0 && q.held[kind] < 2*roundsInFlight
	if hold {
		q.held[kind]++
	}
	q.mu.Unlock()
	if hold {
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// Placements running at the same time share their quorum and commit
// rounds, and a burst of status changes reaches each peer folded into a few
// messages; every placement is still confirmed, committed on the peers
// under its own fence token, and dispatched.
func TestPlacementsShareQuorumRounds(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.addWorker("w1", 64)
	l := c.leader()
	q := &quorumTraffic{leader: l.ID(), rounds: map[string]int{}, commits: map[string]int{}, statuses: map[string]int{}, held: map[wire.MsgType]int{}}
	c.hub.SetHook(q.hook)
	defer c.hub.SetHook(nil)

	const n = 40
	ack, err := l.Submit(context.Background(), sleepJob(t, "burst", n, 1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, l, ack.JobID, wire.JobRunning, 10*time.Second)

	// Every follower stored every placement under the leader's token.
	l.mu.Lock()
	tokens := map[string]uint64{}
	for _, w := range l.jobs[ack.JobID].wfs {
		tokens[w.rec.WorkflowID] = w.rec.FenceToken
	}
	l.mu.Unlock()
	for _, id := range others(c, l.ID()) {
		f := c.manager(id)
		testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
			f.mu.Lock()
			defer f.mu.Unlock()
			for wf, tok := range tokens {
				w, ok := f.wfs[wf]
				if !ok || w.rec.FenceToken != tok || w.rec.Worker != "w1" {
					return fmt.Errorf("%s: workflow %s not stored as placed on w1 under token %d", id, wf, tok)
				}
			}
			return nil
		})
	}

	q.mu.Lock()
	defer q.mu.Unlock()
	if q.largest < 2 {
		t.Errorf("no ProvisionBatch carried more than one placement (largest %d)", q.largest)
	}
	for _, id := range others(c, l.ID()) {
		if q.rounds[id] == 0 || q.rounds[id] >= n || q.commits[id] >= n {
			t.Errorf("%s: %d quorum rounds and %d commit rounds for %d placements, want 1..%d each", id, q.rounds[id], q.commits[id], n, n-1)
		}
		// Each placement changes the job's status at least twice
		// (ASSIGNED, RUNNING): fewer messages than that means folded.
		if q.statuses[id] == 0 || q.statuses[id] >= 2*n {
			t.Errorf("%s: %d status messages for %d placements, want 1..%d", id, q.statuses[id], n, 2*n-1)
		}
	}
	t.Logf("per follower: rounds %v, commits %v, statuses %v; largest batch %d", q.rounds, q.commits, q.statuses, q.largest)
}

// A batch's placements are each judged on their own: a worker one peer
// refuses costs only the placements aimed at it, which go elsewhere.
func TestProvisionBatchJudgesEachPlacement(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.addWorker("w1", 8)
	l := c.leader()
	fs := others(c, l.ID())
	f := c.manager(fs[0])
	waitWorkerKnown(t, f, "w1")
	tok := nextToken(t, l)
	resp, err := c.hub.Node(l.ID()).Call(context.Background(), f.ID(), &wire.ProvisionBatch{Requests: []wire.ProvisionRequest{
		{JobID: "j", WorkflowID: "j-0", TargetWorker: "w1", CoresRequired: 1, FenceToken: tok},
		{JobID: "j", WorkflowID: "j-1", TargetWorker: "w1", CoresRequired: 9, FenceToken: tok + 1},
		{JobID: "j", WorkflowID: "j-2", TargetWorker: "w-unknown", CoresRequired: 1, FenceToken: tok + 2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := resp.(*wire.ProvisionBatchConfirm).Confirms
	if len(got) != 3 || !got[0].Confirmed || got[1].Confirmed || !got[2].Confirmed {
		t.Fatalf("confirms %+v; want j-0 confirmed, j-1 refused (9 of 8 cores), j-2 confirmed (a worker the peer does not know)", got)
	}
	for i, c := range got {
		if c.WorkflowID != fmt.Sprintf("j-%d", i) {
			t.Errorf("confirm %d is for %s", i, c.WorkflowID)
		}
	}
	// From a peer that does not lead this term: each refused as stale.
	resp, err = c.hub.Node(fs[1]).Call(context.Background(), f.ID(), &wire.ProvisionBatch{Requests: []wire.ProvisionRequest{
		{JobID: "j", WorkflowID: "j-0", TargetWorker: "w1", CoresRequired: 1, FenceToken: tok},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if c := resp.(*wire.ProvisionBatchConfirm).Confirms; len(c) != 1 || c[0].Confirmed {
		t.Fatalf("a batch from a peer that does not lead was confirmed: %+v", c)
	}
}

// waitWorkerKnown waits until m's worker table holds id.
func waitWorkerKnown(t *testing.T, m *Manager, id string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if _, ok := m.workers.get(id); !ok {
			return fmt.Errorf("%s does not know worker %s", m.ID(), id)
		}
		return nil
	})
}

// Batched commits obey the same fencing as lone ones: from a configured
// peer that does not lead the term they are refused and nothing is stored;
// from outside the managers, rejected. A status batch from outside the
// managers is rejected too.
func TestCommitBatchFenced(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.addWorker("w1", 4)
	l := c.leader()
	ack, err := l.Submit(context.Background(), sleepJob(t, "fenced", 2, 1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, l, ack.JobID, wire.JobRunning, 10*time.Second)
	fs := others(c, l.ID())
	f := c.manager(fs[0])
	wf := ack.JobID + "-0"
	l.mu.Lock()
	tok := l.wfs[wf].rec.FenceToken
	l.mu.Unlock()
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.wfs[wf] == nil || f.wfs[wf].rec.FenceToken != tok {
			return fmt.Errorf("follower does not have the placement yet")
		}
		return nil
	})

	batch := &wire.ProvisionCommitBatch{Commits: []wire.ProvisionCommit{
		{JobID: ack.JobID, WorkflowID: wf, TargetWorker: "w-usurper", FenceToken: tok + 1},
	}}
	// The other follower is a configured peer but does not lead this term.
	if _, err := c.hub.Node(fs[1]).Call(context.Background(), f.ID(), batch); wire.CodeOf(err) != wire.CodeStaleFence {
		t.Errorf("commit batch from a non-leading peer: %v, want stale_fence", err)
	}
	if _, err := c.hub.Node("g1").Call(context.Background(), f.ID(), batch); wire.CodeOf(err) != wire.CodeRejected {
		t.Errorf("commit batch from a gate: %v, want rejected", err)
	}
	if _, err := c.hub.Node("g1").Call(context.Background(), f.ID(), &wire.ProvisionBatch{Requests: []wire.ProvisionRequest{{JobID: ack.JobID, WorkflowID: wf, TargetWorker: "w1", FenceToken: tok + 1}}}); wire.CodeOf(err) != wire.CodeRejected {
		t.Errorf("provision batch from a gate: %v, want rejected", err)
	}
	if _, err := c.hub.Node("g1").Call(context.Background(), f.ID(), &wire.ReplicateJobStatusBatch{Statuses: []wire.JobProgress{{JobID: ack.JobID, Status: wire.JobCompleted}}}); wire.CodeOf(err) != wire.CodeRejected {
		t.Errorf("status batch from a gate: %v, want rejected", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if w := f.wfs[wf]; w.rec.Worker == "w-usurper" || w.rec.FenceToken != tok || f.jobs[ack.JobID].rec.Status.Terminal() {
		t.Fatalf("a refused batch changed the follower: worker %s token %d (want %d), job %s", w.rec.Worker, w.rec.FenceToken, tok, f.jobs[ack.JobID].rec.Status)
	}
}

// A status batch stores the jobs the peer knows and names the others, so a
// leader counting stores on a majority does not count it for them.
func TestStatusBatchNamesUnknownJobs(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.addWorker("w1", 4)
	l := c.leader()
	ack, err := l.Submit(context.Background(), sleepJob(t, "known", 1, 1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, l, ack.JobID, wire.JobRunning, 10*time.Second)
	f := c.manager(others(c, l.ID())[0])
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.jobs[ack.JobID] == nil {
			return fmt.Errorf("follower does not have the job yet")
		}
		return nil
	})
	resp, err := c.hub.Node(l.ID()).Call(context.Background(), f.ID(), &wire.ReplicateJobStatusBatch{Statuses: []wire.JobProgress{
		{JobID: "j-never-submitted", Status: wire.JobCompleted},
		{JobID: ack.JobID, Status: wire.JobCancelled, Error: "from the batch"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.(*wire.StatusBatchAck).Unknown; !slices.Equal(got, []string{"j-never-submitted"}) {
		t.Errorf("unknown %v, want [j-never-submitted]", got)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if j := f.jobs[ack.JobID]; j.rec.Status != wire.JobCancelled {
		t.Errorf("known job is %s, want the batch's CANCELLED", j.rec.Status)
	}
}

// Workflows that end together share the rounds that store their ends on a
// majority, and each end is acknowledged to its worker only once stored:
// with both followers unreachable, no final report is acknowledged (the
// worker keeps it and retries), and once one is back every end is stored
// on it.
func TestEndsShareMajorityRounds(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.leader()
	w := c.addWorker("w1", 64)
	fs := others(c, l.ID())
	var mu sync.Mutex
	cut := true
	endRounds := 0
	c.hub.SetHook(func(from, to string, msg wire.Message) bool {
		if from != l.ID() {
			return true
		}
		switch msg.(type) {
		case *wire.ReplicateJobStatus, *wire.ReplicateJobStatusBatch:
			mu.Lock()
			defer mu.Unlock()
			endRounds++
			return !cut
		}
		return true
	})
	defer c.hub.SetHook(nil)

	const n = 20
	ack, err := l.Submit(context.Background(), sleepJob(t, "ends", n, 1, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, l, ack.JobID, wire.JobRunning, 10*time.Second)
	var wg sync.WaitGroup
	acked := make([]bool, n)
	for i := range n {
		wg.Go(func() {
			p := &wire.WorkflowProgress{JobID: ack.JobID, WorkflowID: workflowID(ack.JobID, i), WorkerID: "w1", Status: wire.WorkflowCompleted, Final: true}
			l.mu.Lock()
			p.FenceToken = l.wfs[p.WorkflowID].rec.FenceToken
			l.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := w.tr.Call(ctx, l.ID(), p)
			acked[i] = err == nil
		})
	}
	wg.Wait()
	for i, a := range acked {
		if a {
			t.Fatalf("final of workflow %d acknowledged with no follower reachable", i)
		}
	}

	mu.Lock()
	cut, endRounds = false, 0
	mu.Unlock()
	for i := range n {
		wg.Go(func() {
			p := &wire.WorkflowProgress{JobID: ack.JobID, WorkflowID: workflowID(ack.JobID, i), WorkerID: "w1", Status: wire.WorkflowCompleted, Final: true}
			l.mu.Lock()
			p.FenceToken = l.wfs[p.WorkflowID].rec.FenceToken
			l.mu.Unlock()
			_, err := w.tr.Call(context.Background(), l.ID(), p)
			acked[i] = err == nil
		})
	}
	wg.Wait()
	for i, a := range acked {
		if !a {
			t.Fatalf("final of workflow %d not acknowledged with both followers back", i)
		}
	}
	// Each acknowledged end is stored on a follower (a majority with the
	// leader).
	stored := 0
	for _, id := range fs {
		f := c.manager(id)
		f.mu.Lock()
		all := true
		for i := range n {
			if wf := f.wfs[workflowID(ack.JobID, i)]; wf == nil || wf.rec.Status != wire.WorkflowCompleted {
				all = false
			}
		}
		f.mu.Unlock()
		if all {
			stored++
		}
	}
	if stored == 0 {
		t.Fatal("no follower stored every acknowledged end")
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d status messages to the followers for %d ends", endRounds, n)
}

// nextToken is a fresh fence token of l's term.
func nextToken(t *testing.T, l *Manager) uint64 {
	t.Helper()
	tok, err := leadingTerm(t, l).NextToken()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// leadingTerm waits for l's term of leadership to be established.
func leadingTerm(t *testing.T, l *Manager) *leadership.Term {
	t.Helper()
	var lt *leadership.Term
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if lt = l.leading(); lt == nil {
			return fmt.Errorf("%s does not lead yet", l.ID())
		}
		return nil
	})
	return lt
}

// With one follower down, placements running at the same time still share
// rounds, and each is confirmed by the majority that is left (the leader
// and the other follower), committed there under its own token, and
// dispatched.
func TestSharedRoundsWithAPeerDown(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.leader()
	leadingTerm(t, l)
	fs := others(c, l.ID())
	c.stopManager(fs[0])
	up := c.manager(fs[1])
	c.addWorker("w1", 64)
	waitWorkerKnown(t, up, "w1")
	var mu sync.Mutex
	rounds, largest := 0, 0
	c.hub.SetHook(func(from, to string, msg wire.Message) bool {
		if from == l.ID() && to == up.ID() {
			mu.Lock()
			defer mu.Unlock()
			switch m := msg.(type) {
			case *wire.ProvisionRequest:
				rounds++
			case *wire.ProvisionBatch:
				rounds++
				largest = max(largest, len(m.Requests))
			}
		}
		return true
	})
	defer c.hub.SetHook(nil)

	const n = 40
	ack, err := l.Submit(context.Background(), sleepJob(t, "onedown", n, 1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, l, ack.JobID, wire.JobRunning, 30*time.Second)
	testutil.Eventually(t, 30*time.Second, 10*time.Millisecond, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		for i := range n {
			w := l.wfs[workflowID(ack.JobID, i)]
			if w.rec.Status != wire.WorkflowRunning || w.rec.Worker != "w1" {
				return fmt.Errorf("workflow %d is %s on %q", i, w.rec.Status, w.rec.Worker)
			}
		}
		return nil
	})
	l.mu.Lock()
	tokens := map[string]uint64{}
	for i := range n {
		w := l.wfs[workflowID(ack.JobID, i)]
		tokens[w.rec.WorkflowID] = w.rec.FenceToken
	}
	l.mu.Unlock()
	seen := map[uint64]bool{}
	for wf, tok := range tokens {
		if seen[tok] {
			t.Errorf("%s shares fence token %d with another placement", wf, tok)
		}
		seen[tok] = true
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		up.mu.Lock()
		defer up.mu.Unlock()
		for wf, tok := range tokens {
			if w := up.wfs[wf]; w == nil || w.rec.FenceToken != tok || w.rec.Worker != "w1" {
				return fmt.Errorf("%s: %s not committed on w1 under token %d", up.ID(), wf, tok)
			}
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d quorum rounds to the live follower for %d placements, largest %d", rounds, n, largest)
}

// In a shared round a peer judges each placement on its own: the one it
// refuses (more cores than the worker has) falls short of a majority, the
// others in the same round are confirmed by every manager.
func TestSharedRoundRefusesOnlyTheRefused(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.addWorker("w1", 8)
	l := c.leader()
	for _, id := range others(c, l.ID()) {
		waitWorkerKnown(t, c.manager(id), "w1")
	}
	reqs := []wire.ProvisionRequest{
		{JobID: "j", WorkflowID: "j-0", TargetWorker: "w1", CoresRequired: 1, FenceToken: nextToken(t, l)},
		{JobID: "j", WorkflowID: "j-1", TargetWorker: "w1", CoresRequired: 9, FenceToken: nextToken(t, l)},
		{JobID: "j", WorkflowID: "j-2", TargetWorker: "w1", CoresRequired: 2, FenceToken: nextToken(t, l)},
	}
	out := l.provisionRound(context.Background(), reqs)
	if len(out) != 3 {
		t.Fatalf("%d answers for 3 requests", len(out))
	}
	for _, i := range []int{0, 2} {
		if out[i].confirmed < l.group.Load().Quorum || len(out[i].refusals) != 0 {
			t.Errorf("%s: %d confirmations (quorum %d), refusals %v; want confirmed by a majority, refused by none", reqs[i].WorkflowID, out[i].confirmed, l.group.Load().Quorum, out[i].refusals)
		}
	}
	if a := out[1]; a.confirmed != 1 || a.answered != 3 || len(a.refusals) != 2 {
		t.Errorf("j-1 (9 of 8 cores): %d confirmed of %d answered, refusals %v; want only the leader's own, both peers refusing", a.confirmed, a.answered, a.refusals)
	}
}

// A placement whose caller leaves while its request waits in a shared
// round: the round runs on for the others in it, which are placed, while
// the one whose caller left is neither committed nor dispatched, stays
// PENDING with no attempt counted, and leaves no cores reserved.
func TestCancelledCallerInASharedRound(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.leader()
	lt := leadingTerm(t, l)

	// A job that waits: no worker yet. The test claims its workflow, as
	// place would, so the scheduler leaves it alone.
	held, err := l.Submit(context.Background(), sleepJob(t, "held", 1, 1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	wfID := workflowID(held.JobID, 0)
	var w *workflowState
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		w = l.wfs[wfID]
		if w == nil || w.placing || w.rec.Status != wire.WorkflowPending {
			return fmt.Errorf("%s not pending and free to claim", wfID)
		}
		w.placing = true
		return nil
	})

	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseAll() // a failed check must not leave calls held
	var mu sync.Mutex
	committed := map[string]bool{}
	c.hub.SetHook(func(from, to string, msg wire.Message) bool {
		if from != l.ID() {
			return true
		}
		switch m := msg.(type) {
		case *wire.ProvisionRequest, *wire.ProvisionBatch:
			<-release // the rounds in flight are held; the placements behind them queue
		case *wire.ProvisionCommit:
			mu.Lock()
			committed[m.WorkflowID] = true
			mu.Unlock()
		case *wire.ProvisionCommitBatch:
			mu.Lock()
			for _, c := range m.Commits {
				committed[c.WorkflowID] = true
			}
			mu.Unlock()
		}
		return true
	})
	defer c.hub.SetHook(nil)
	c.addWorker("w1", 64)
	waitWorkerKnown(t, l, "w1")

	// Other placements fill the rounds in flight and the queue behind them
	// (a submission places its workflows before it answers).
	busyAck := make(chan *wire.JobAck, 1)
	go func() {
		ack, err := l.Submit(context.Background(), sleepJob(t, "busy", 6, 1, time.Minute))
		if err != nil {
			t.Errorf("submit busy: %v", err)
		}
		busyAck <- ack
	}()
	queued := func(id string) (running int, in bool, n int) {
		r := l.batch.provision
		running, n = r.Load()
		in = r.Waiting(func(req wire.ProvisionRequest) bool { return req.WorkflowID == id })
		return running, in, n
	}
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if running, _, n := queued(""); running < roundsInFlight || n == 0 {
			return fmt.Errorf("%d rounds running, %d placements queued", running, n)
		}
		return nil
	})

	wv, ok := l.pickFor(w, 1, nil)
	if !ok {
		t.Fatal("no worker picked")
	}
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan placeResult, 1)
	go func() {
		r, _ := l.placeOn(ctx, lt, w, wv, 1)
		res <- r
	}()
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if _, in, _ := queued(wfID); !in {
			return fmt.Errorf("%s not queued for a round yet", wfID)
		}
		return nil
	})
	cancel()
	releaseAll()

	r := <-res
	if r.outcome != outcomeSkipped || !errors.Is(r.err, context.Canceled) {
		t.Errorf("cancelled placement: outcome %d, err %v; want skipped with its caller's cancellation", r.outcome, r.err)
	}
	busy := <-busyAck
	if busy == nil {
		t.FailNow()
	}
	waitJob(t, l, busy.JobID, wire.JobRunning, 30*time.Second)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		for i := range 6 {
			if s := l.wfs[workflowID(busy.JobID, i)].rec.Status; s != wire.WorkflowRunning {
				return fmt.Errorf("busy workflow %d is %s", i, s)
			}
		}
		return nil
	})
	// Every other placement acked: nothing reserved may be left.
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		l.workers.mu.Lock()
		defer l.workers.mu.Unlock()
		if n := l.workers.w["w1"].reserved; n != 0 {
			return fmt.Errorf("%d cores still reserved on w1", n)
		}
		return nil
	})
	mu.Lock()
	if committed[wfID] {
		t.Errorf("the cancelled placement of %s was committed to the peers", wfID)
	}
	mu.Unlock()
	l.mu.Lock()
	if w.rec.Status != wire.WorkflowPending || w.rec.Attempts != 0 || w.rec.Worker != "" {
		t.Errorf("cancelled placement left %s %s on %q after %d attempts; want PENDING, none", wfID, w.rec.Status, w.rec.Worker, w.rec.Attempts)
	}
	w.placing, w.provisioning = false, false // handed back to the scheduler
	l.mu.Unlock()
	l.kick()
	waitJob(t, l, held.JobID, wire.JobRunning, 30*time.Second)
}

// statusSize estimates a status's encoded size without encoding it; the
// estimate must never fall short, or a batch could outgrow its budget.
// Every field is filled with its largest kind of value.
func TestStatusSizeBoundsTheEncoding(t *testing.T) {
	long := strings.Repeat("x", 128)
	max64 := int64(math.MaxInt64)
	hist := make([]byte, 5000)
	series := make([]wire.SecondStats, 300)
	for i := range series {
		series[i] = wire.SecondStats{Second: max64, Completed: max64, Failed: max64, Dropped: max64,
			VUs: math.MaxInt, P50: time.Duration(max64), P99: time.Duration(max64)}
	}
	step := wire.StepStats{StepName: long, CompletedCount: max64, FailedCount: max64, TotalCount: max64,
		Histogram: hist, CorrectedHistogram: hist, BytesReceived: max64, BytesSent: max64,
		Errors:   map[string]int64{"status": max64, "timeout": max64, "connect": max64, "body": max64, "transport": max64, "cancelled": max64},
		Statuses: map[int]int64{200: max64, 404: max64, 500: max64, 503: max64}}
	wf := wire.WorkflowProgress{JobID: long, WorkflowID: long + "-12345", WorkflowName: long, Status: wire.WorkflowCompleted,
		CompletedCount: max64, FailedCount: max64, RatePerSecond: math.MaxFloat64, Elapsed: time.Duration(max64),
		StepStats: []wire.StepStats{step, step}, Timestamp: max64, AssignedCores: []int{0, 1, 2, 3, 1 << 30},
		WorkerID: long, FenceToken: math.MaxUint64, Error: long, Final: true, DroppedIterations: max64,
		Series: series, Attempts: math.MaxInt, Waiting: long}
	for _, jp := range []wire.JobProgress{
		{JobID: long},
		{JobID: long, Datacenter: long, Status: wire.JobRunning, Workflows: []wire.WorkflowProgress{wf, wf, wf},
			TotalCompleted: max64, TotalFailed: max64, OverallRate: math.MaxFloat64, Elapsed: time.Duration(max64),
			Timestamp: max64, FenceToken: math.MaxUint64, Error: long, LeaseHolder: long},
	} {
		b, err := wire.Marshal(&jp)
		if err != nil {
			t.Fatal(err)
		}
		if est := statusSize(&jp); est < len(b) {
			t.Errorf("status of %d workflows: estimated %d bytes, encoded %d", len(jp.Workflows), est, len(b))
		}
	}
}
