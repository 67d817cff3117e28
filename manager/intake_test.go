package manager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/leadership"
	"tempest/transport"
	"tempest/wire"
)

// lossMode is how lossyTransport treats one kind of call to one peer.
type lossMode int

const (
	lossNone  lossMode = iota
	lossDrop           // never delivered, and the caller cannot know: it times out
	lossReply          // delivered and handled, but the answer is lost: it times out
)

// lossControl holds the loss rules every manager's lossyTransport follows.
type lossControl struct {
	mu    sync.Mutex
	rules map[string]lossMode // "type/to"
	calls map[wire.MsgType]int
}

// sent counts the calls of type typ made so far.
func (l *lossControl) sent(typ wire.MsgType) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[typ]
}

func (l *lossControl) set(typ wire.MsgType, to string, mode lossMode) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rules == nil {
		l.rules = make(map[string]lossMode)
	}
	l.rules[fmt.Sprintf("%d/%s", typ, to)] = mode
}

func (l *lossControl) clear() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rules = nil
}

func (l *lossControl) mode(typ wire.MsgType, to string) lossMode {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.calls == nil {
		l.calls = make(map[wire.MsgType]int)
	}
	l.calls[typ]++
	return l.rules[fmt.Sprintf("%d/%s", typ, to)]
}

// lossyTransport loses calls the way a real network does, with outcomes
// the caller cannot tell apart: the hub's own faults are always certain
// (the message provably never left).
type lossyTransport struct {
	transport.Transport
	c *lossControl
}

func (l *lossyTransport) Call(ctx context.Context, addr string, req wire.Message, opts ...transport.CallOption) (wire.Message, error) {
	switch l.c.mode(req.Type(), addr) {
	case lossDrop:
		<-ctx.Done()
		return nil, fmt.Errorf("call %s to %s: %w", req.Type(), addr, ctx.Err())
	case lossReply:
		l.Transport.Call(ctx, addr, req, opts...)
		<-ctx.Done()
		return nil, fmt.Errorf("call %s to %s: %w", req.Type(), addr, ctx.Err())
	}
	return l.Transport.Call(ctx, addr, req, opts...)
}

func others(c *testCluster, not string) []string {
	var out []string
	for _, id := range c.ids {
		if id != not {
			out = append(out, id)
		}
	}
	return out
}

// The black-box failure of the issue on the in-memory network: the
// submission reaches no peer (as a submission over the message size limit
// did), and the leader dies right after answering. A 201 must mean the new
// leader knows the job; a refusal must mean it never runs anywhere.
func TestAckedJobSurvivesLeaderKill(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	w := c.addWorker("w1", 4)
	l := c.leader()
	c.hub.SetHook(func(from, to string, msg wire.Message) bool {
		return msg.Type() != wire.TypeReplicateJob || from != l.ID()
	})
	sub := sleepJob(t, "fragile", 1, 1, 300*time.Millisecond)
	sub.JobID = "j-fragile"
	_, err := l.Submit(context.Background(), sub)
	c.stopManager(l.ID())
	c.hub.SetHook(nil)
	nl := c.leader()
	if err == nil {
		// Acknowledged: the successor must know it and run it to its end.
		waitJob(t, nl, sub.JobID, wire.JobCompleted, 15*time.Second)
		return
	}
	if !errors.Is(err, wire.ErrNoQuorum) {
		t.Fatalf("Submit = %v, want no quorum", err)
	}
	// Refused: nobody ever runs it.
	if _, err := nl.Job(context.Background(), sub.JobID); wire.CodeOf(err) != wire.CodeNotFound {
		t.Fatalf("a refused job is known to the new leader: %v", err)
	}
	if toks := w.dispatchTokens(workflowID(sub.JobID, 0)); len(toks) != 0 {
		t.Fatalf("a refused job was dispatched: %v", toks)
	}
}

// When peers may hold the job but did not confirm, the answer says the
// outcome is unknown, nothing runs yet, and a resubmission with the same id
// (Idempotency-Key) finds the job and, once a majority holds it, answers
// that it is accepted; it then runs exactly once.
func TestOutcomeUnknownThenResubmitFindsIt(t *testing.T) {
	loss := &lossControl{}
	c := newLossyCluster(t, 3, nil, loss)
	w := c.addWorker("w1", 4)
	l := c.leader()
	for _, id := range others(c, l.ID()) {
		loss.set(wire.TypeReplicateJob, id, lossReply)
	}
	sub := sleepJob(t, "maybe", 1, 1, 200*time.Millisecond)
	sub.JobID = "j-maybe"
	_, err := l.Submit(context.Background(), sub)
	if !errors.Is(err, wire.ErrOutcomeUnknown) || !strings.Contains(err.Error(), "outcome unknown") {
		t.Fatalf("Submit with every answer lost = %v, want no quorum with the outcome unknown", err)
	}
	if toks := w.dispatchTokens(workflowID(sub.JobID, 0)); len(toks) != 0 {
		t.Fatalf("a job no majority confirmed was dispatched: %v", toks)
	}
	loss.clear()
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		ack, err := c.leader().Submit(context.Background(), sub)
		if err != nil {
			return err
		}
		if ack.JobID != sub.JobID || !ack.Accepted {
			return fmt.Errorf("ack %+v", ack)
		}
		return nil
	})
	waitJob(t, c.leader(), sub.JobID, wire.JobCompleted, 10*time.Second)
	if toks := w.dispatchTokens(workflowID(sub.JobID, 0)); len(toks) != 1 {
		t.Fatalf("dispatches of the job: %v, want exactly one", toks)
	}
}

// A leader that stored a job on its own disk only, and was then replaced,
// must not resurrect it when it rejoins: whoever leads next withdraws it.
func TestRejoiningLeaderDoesNotResurrectUnackedJob(t *testing.T) {
	loss := &lossControl{}
	c := newLossyCluster(t, 3, nil, loss)
	w := c.addWorker("w1", 4)
	a := c.leader()
	for _, id := range others(c, a.ID()) {
		loss.set(wire.TypeReplicateJob, id, lossDrop)
	}
	sub := sleepJob(t, "ghost", 1, 1, 100*time.Millisecond)
	sub.JobID = "j-ghost"
	if _, err := a.Submit(context.Background(), sub); !errors.Is(err, wire.ErrOutcomeUnknown) {
		t.Fatalf("Submit = %v, want outcome unknown (the submissions were lost, not refused)", err)
	}
	aID := a.ID()
	c.stopManager(aID)
	loss.clear()
	b := c.leader()
	if _, err := b.Job(context.Background(), sub.JobID); wire.CodeOf(err) != wire.CodeNotFound {
		t.Fatalf("the job reached %s: %v; the test proves nothing", b.ID(), err)
	}
	c.startManager(aID)
	// A is back, holding the job on its disk alone. The next leader reads it.
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if c.manager(aID).elector.Status().Leader == "" {
			return errors.New("rejoined manager follows nobody yet")
		}
		return nil
	})
	c.stopManager(b.ID())
	nl := c.leader()
	st, err := nl.Job(context.Background(), sub.JobID)
	switch {
	case wire.CodeOf(err) == wire.CodeNotFound:
	case err != nil:
		t.Fatal(err)
	case st.Status != wire.JobFailed || !strings.Contains(st.Error, "withdrawn"):
		t.Fatalf("job on the new leader %s: %s (%s), want it withdrawn", nl.ID(), st.Status, st.Error)
	}
	if toks := w.dispatchTokens(workflowID(sub.JobID, 0)); len(toks) != 0 {
		t.Fatalf("a never-acknowledged job was dispatched: %v", toks)
	}
}

// After its state sync a leader has read a majority of managers, so a
// workflow of a job it does not know was never acknowledged: the worker is
// told to stop it rather than left to load the target unseen.
func TestProgressOfUnknownJobIsFenced(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.leader()
	resp, err := c.hub.Node("stray").Call(context.Background(), l.ID(), &wire.WorkflowProgress{
		JobID: "j-nobody", WorkflowID: "j-nobody-0", Status: wire.WorkflowRunning, WorkerID: "stray", FenceToken: 1 << 32,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.(*wire.ProgressAck).Cancel {
		t.Fatal("progress of a job no manager holds was not told to stop")
	}
}

// A store failure on submit runs nothing: the client sees the error, and
// the job is neither kept in memory nor placed.
func TestStoreFailureOnSubmitRunsNothing(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	w := c.addWorker("w1", 4)
	l := c.leader()
	if err := l.store.Close(); err != nil {
		t.Fatal(err)
	}
	sub := sleepJob(t, "unstored", 1, 1, 50*time.Millisecond)
	sub.JobID = "j-unstored"
	if _, err := l.Submit(context.Background(), sub); err == nil {
		t.Fatal("Submit succeeded with a closed store")
	}
	l.mu.Lock()
	_, kept := l.jobs[sub.JobID]
	l.mu.Unlock()
	if kept {
		t.Fatal("a job whose store write failed is kept in memory, where the scheduler places it")
	}
	if _, err := l.Job(context.Background(), sub.JobID); wire.CodeOf(err) != wire.CodeNotFound {
		t.Fatalf("Job after a failed submit: %v, want not found", err)
	}
	if toks := w.dispatchTokens(workflowID(sub.JobID, 0)); len(toks) != 0 {
		t.Fatalf("dispatched after a failed store: %v", toks)
	}
}

// Commits for jobs whose submission never arrives are bounded in number
// and age out.
func TestOrphanCommitsBounded(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	l := c.leader()
	for i := range maxOrphanCommits + 100 {
		if err := l.applyCommit(&wire.ProvisionCommit{JobID: "j-lost", WorkflowID: fmt.Sprintf("j-lost-%d", i), TargetWorker: "w", FenceToken: 1}); err != nil {
			t.Fatal(err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.orphanCommits); n > maxOrphanCommits {
		t.Fatalf("%d orphan commits kept, bound is %d", n, maxOrphanCommits)
	}
	l.pruneOrphanCommitsLocked(time.Now().Add(orphanCommitTTL + time.Minute))
	if n := len(l.orphanCommits); n != 0 {
		t.Fatalf("%d orphan commits survive their TTL", n)
	}
}

// A worker forgets a workflow once its final progress is acknowledged, so
// the leader acknowledges a final that ends the workflow only once the end
// is on a majority of managers: otherwise a successor reading a stale
// majority would run the ended workflow again.
func TestFinalAckedOnlyOnceEndIsOnMajority(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.addWorker("w1", 2)
	l := c.leader()
	ack, err := l.Submit(context.Background(), sleepJob(t, "ending", 1, 1, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	worker, token := workflowOn(t, c, ack.JobID)
	c.hub.SetHook(func(from, to string, msg wire.Message) bool {
		return msg.Type() != wire.TypeReplicateJobStatus || from != l.ID()
	})
	final := &wire.WorkflowProgress{JobID: ack.JobID, WorkflowID: workflowID(ack.JobID, 0), Status: wire.WorkflowCompleted,
		WorkerID: worker, FenceToken: token, Final: true, CompletedCount: 1}
	if _, err := c.hub.Node(worker).Call(context.Background(), l.ID(), final); wire.CodeOf(err) != wire.CodeUnavailable {
		t.Fatalf("final acknowledged with its end on the leader's disk alone: %v", err)
	}
	c.hub.SetHook(nil)
	if _, err := c.hub.Node(worker).Call(context.Background(), l.ID(), final); err != nil {
		t.Fatalf("final once peers can store it: %v", err)
	}
	for _, m := range c.running() {
		waitJob(t, m, ack.JobID, wire.JobCompleted, 5*time.Second)
	}
}

// A cancel is answered as done only once the job's end is on a majority of
// managers; asked again, it confirms.
func TestCancelEndsOnMajority(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.addWorker("w1", 2)
	l := c.leader()
	ack, err := l.Submit(context.Background(), sleepJob(t, "stop-me", 1, 1, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	workflowOn(t, c, ack.JobID)
	c.hub.SetHook(func(from, to string, msg wire.Message) bool {
		return msg.Type() != wire.TypeReplicateJobStatus || from != l.ID()
	})
	if _, err := l.Cancel(context.Background(), ack.JobID, ""); !errors.Is(err, wire.ErrNoQuorum) {
		t.Fatalf("cancel with its end on the leader's disk alone: %v, want no quorum", err)
	}
	c.hub.SetHook(nil)
	if _, err := l.Cancel(context.Background(), ack.JobID, ""); err != nil {
		t.Fatalf("cancel asked again: %v", err)
	}
	for _, m := range c.running() {
		waitJob(t, m, ack.JobID, wire.JobCancelled, 5*time.Second)
	}
}

// A manager that missed a job's submission (the intake's majority was the
// others) and missed its end learns the ended job from a peer's snapshot
// when it leads, instead of answering 404 for a job the client was told
// ran; the job is recorded ended and never placed.
func TestSuccessorLearnsEndedJobItNeverStored(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	w := c.addWorker("w1", 4)
	l := c.leader()
	late := others(c, l.ID())[0]
	c.hub.Isolate(late)
	sub := sleepJob(t, "missed", 1, 1, 50*time.Millisecond)
	sub.JobID = "j-missed"
	if _, err := l.Submit(context.Background(), sub); err != nil {
		t.Fatal(err)
	}
	waitJob(t, l, sub.JobID, wire.JobCompleted, 20*time.Second)
	c.hub.Heal()
	m := c.manager(late)
	if _, err := m.Job(context.Background(), sub.JobID); err == nil {
		t.Fatalf("%s knows the job though it was cut off the whole time", late)
	}
	snap := l.managerSnapshot(0, "")
	lt := leadership.NewTerm(context.Background(), snap.Term+1, nil)
	defer lt.End()
	m.applyPeerSnapshots(lt, []*wire.ManagerStateSnapshot{snap})
	st, err := m.Job(context.Background(), sub.JobID)
	if err != nil || st.Status != wire.JobCompleted {
		t.Fatalf("successor's view of an ended job it never stored: %v %v, want COMPLETED", st, err)
	}
	if toks := w.dispatchTokens(workflowID(sub.JobID, 0)); len(toks) != 1 {
		t.Fatalf("the ended job was dispatched %d times, want once: %v", len(toks), toks)
	}
}
