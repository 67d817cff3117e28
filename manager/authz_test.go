package manager

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/rainstorm"
	"tempest/security"
	"tempest/transport"
	"tempest/wire"
)

// rsTwoWorkers runs a pipeline whose count stage has two tasks on two
// one-core workers: slot 0 (the source and count/0) on one, slot 1
// (count/1) on the other. It returns the leader, the job id, and the
// worker and token of the source and of count/1, the "sink" the tests
// address (sinkTask).
func rsTwoWorkers(t *testing.T, blob string) (c *testCluster, lead *Manager, job string, workers [2]string, tokens [2]uint64) {
	t.Helper()
	c = newRainstormCluster(t, nil)
	c.addWorker("w1", 1)
	c.addWorker("w2", 1)
	lead = waitCores(t, c, 2)
	sub := rsSpecJob(t, rainstorm.Source{Generate: &rainstorm.Generate{Records: 10, Keys: 2}}, "")
	if blob != "" {
		sub = rsFileJob(t, blob)
	}
	ack, err := lead.Submit(context.Background(), sub)
	if err != nil {
		t.Fatal(err)
	}
	job = ack.JobID
	for k, order := range [2]int{0, 2} { // task order: source, count/0, count/1
		tokens[k] = taskToken(t, lead, job, order, 0)
	}
	workers[0] = lead.rsTaskInfo(wire.RainstormTask{Job: job, Workflow: "pipe"}).worker
	workers[1] = lead.rsTaskInfo(sinkTask(job)).worker
	if workers[0] == workers[1] {
		t.Fatalf("both tasks on %s", workers[0])
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		_, err := lead.rsReady()
		return err
	})
	return c, lead, job, workers, tokens
}

// sinkTask is the task of rsTwoWorkers's pipeline alone in its slot.
func sinkTask(job string) wire.RainstormTask {
	return wire.RainstormTask{Job: job, Workflow: "pipe", Stage: 1, Index: 1}
}

// rsSpecJob is a pipeline reading source, counted by two tasks (two
// slots), with blob the file source's blob ("" for none).
func rsSpecJob(t *testing.T, source rainstorm.Source, blob string) *wire.JobSubmission {
	t.Helper()
	return expandJob(t, "rs", "pipe", &rainstorm.PipelineParams{Blob: blob, Spec: rainstorm.Spec{
		Source: source,
		Stages: []rainstorm.Stage{{Name: "count", Op: rainstorm.OpCount, Tasks: 2, Key: "key"}},
	}})
}

// rsFileJob is rsTwoWorkers's pipeline reading a `file:` source uploaded
// as blob sum.
func rsFileJob(t *testing.T, sum string) *wire.JobSubmission {
	t.Helper()
	return rsSpecJob(t, rainstorm.Source{File: "in.csv", Header: true}, sum)
}

func callFrom(t *testing.T, tr transport.Transport, to string, msg wire.Message) (wire.Message, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return tr.Call(ctx, to, msg)
}

// A pipeline task's open, checkpoint and route request are served only to
// the worker the task is dispatched to: another node, even one holding the
// task's token and running another task of the same pipeline, is refused
// without learning a token, and each refusal is counted.
func TestRainstormRequestsOnlyFromTheTaskWorker(t *testing.T) {
	c, lead, job, workers, tokens := rsTwoWorkers(t, "")
	sink := sinkTask(job)
	noToken := func(what, text string) {
		t.Helper()
		for _, tok := range tokens {
			if strings.Contains(text, strconv.FormatUint(tok, 10)) {
				t.Errorf("%s names a fence token: %q", what, text)
			}
		}
	}
	for _, sender := range []string{"evil-not-a-worker", workers[0]} {
		tr := c.hub.Node(sender)
		_, err := callFrom(t, tr, lead.cfg.ID, &wire.RainstormOpen{Task: sink, Incarnation: tokens[1]})
		if !errors.Is(err, wire.ErrStaleFence) {
			t.Fatalf("%s opened the sink task: %v", sender, err)
		}
		noToken("the open's refusal", err.Error())
		forged := &wire.RainstormCheckpoint{Task: sink, Incarnation: tokens[1], Version: 1,
			State: []wire.RainstormAggregate{{Key: "k", Count: 31337000}}}
		resp, err := callFrom(t, tr, lead.cfg.ID, forged)
		if err != nil {
			t.Fatal(err)
		}
		a := resp.(*wire.RainstormCheckpointAck)
		if !a.Refused || a.Current != tokens[1]+1 {
			t.Fatalf("%s's forged checkpoint: %+v, want refused as fenced, naming no token", sender, a)
		}
		noToken("the checkpoint's refusal", a.Reason)
	}
	if l := lead.rs.Latest(sink); l != nil {
		t.Fatalf("a forged checkpoint was stored: %+v", l)
	}
	_, err := callFrom(t, c.hub.Node("evil-not-a-worker"), lead.cfg.ID, &wire.RainstormRoutesRequest{Job: job, Workflow: "pipe"})
	if wire.CodeOf(err) != wire.CodeRejected {
		t.Fatalf("routes to a node running no task: %v", err)
	}
	got := lead.refused.Snapshot()
	want := map[wire.MsgType]uint64{wire.TypeRainstormOpen: 2, wire.TypeRainstormCheckpoint: 2, wire.TypeRainstormRoutesRequest: 1}
	for typ, n := range want {
		if got[typ] != n {
			t.Errorf("%s refusals counted %d, want %d (all: %v)", typ, got[typ], n, got)
		}
	}

	// The sink's own worker with a stale incarnation is fenced, and told
	// nothing of the current one.
	sinkTr := c.hub.Node(workers[1])
	_, err = callFrom(t, sinkTr, lead.cfg.ID, &wire.RainstormOpen{Task: sink, Incarnation: tokens[1] - 1})
	if !errors.Is(err, wire.ErrStaleFence) {
		t.Fatalf("a stale incarnation opened: %v", err)
	}
	if strings.Contains(err.Error(), strconv.FormatUint(tokens[1], 10)) {
		t.Errorf("a stale open's refusal names the current token: %v", err)
	}

	// The sink's own worker opens and checkpoints as before.
	if _, err := callFrom(t, sinkTr, lead.cfg.ID, &wire.RainstormOpen{Task: sink, Incarnation: tokens[1]}); err != nil {
		t.Fatalf("the sink's worker cannot open it: %v", err)
	}
	resp, err := callFrom(t, sinkTr, lead.cfg.ID, &wire.RainstormCheckpoint{Task: sink, Incarnation: tokens[1], Version: 1})
	if err != nil || resp.(*wire.RainstormCheckpointAck).Refused {
		t.Fatalf("the sink's worker's checkpoint: %+v, %v", resp, err)
	}
}

// The routes a task's worker gets hold what its tasks need: its own, its
// downstream tasks' with their incarnations, its upstream tasks' addresses
// without them.
func TestRainstormRoutesShowOnlyNeighbours(t *testing.T) {
	c, lead, job, workers, tokens := rsTwoWorkers(t, "")
	routes := func(worker string) map[int]wire.RainstormRoute {
		t.Helper()
		var out map[int]wire.RainstormRoute
		testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
			resp, err := callFrom(t, c.hub.Node(worker), lead.cfg.ID, &wire.RainstormRoutesRequest{Job: job, Workflow: "pipe"})
			if err != nil {
				return err
			}
			out = map[int]wire.RainstormRoute{}
			for _, r := range resp.(*wire.RainstormRoutes).Routes {
				out[r.Stage*10+r.Index] = r
			}
			if out[0].Addr == "" || out[11].Addr == "" {
				return fmt.Errorf("routes %+v", out)
			}
			return nil
		})
		return out
	}
	// Routes are keyed stage*10+index: 0 the source, 10 and 11 count/0 and
	// count/1.
	src := routes(workers[0])
	if src[0].Incarnation != tokens[0] || src[11].Incarnation != tokens[1] {
		t.Errorf("the source's worker sees %+v: want its own and its downstream's incarnations", src)
	}
	sink := routes(workers[1])
	if sink[11].Incarnation != tokens[1] || sink[0].Incarnation != 0 || sink[0].Addr == "" {
		t.Errorf("the sink's worker sees %+v: want its own incarnation and its upstream's address alone", sink)
	}
}

// A worker reads by BlobChunkGet only a blob named by work dispatched to
// it; a peer manager reads any (replication and repair), and a node that
// runs nothing is refused and counted.
func TestBlobReadOnlyForDispatchedWork(t *testing.T) {
	c := newRainstormCluster(t, nil)
	lead := c.leader()
	sum, err := putBlob(t, lead, []byte("key\na\nb\n"))
	if err != nil {
		t.Fatal(err)
	}
	c.addWorker("w1", 1)
	c.addWorker("w2", 1)
	lead = waitCores(t, c, 2)
	ack, err := lead.Submit(context.Background(), rsFileJob(t, sum))
	if err != nil {
		t.Fatal(err)
	}
	taskToken(t, lead, ack.JobID, 0, 0)
	taskToken(t, lead, ack.JobID, 1, 0)
	src := lead.rsTaskInfo(wire.RainstormTask{Job: ack.JobID, Workflow: "pipe"}).worker
	raw, err := hex.DecodeString(sum)
	if err != nil {
		t.Fatal(err)
	}
	get := &wire.BlobChunkGet{Sum: raw, Length: 64}
	if resp, err := callFrom(t, c.hub.Node(src), lead.cfg.ID, get); err != nil || string(resp.(*wire.BlobChunk).Data) != "key\na\nb\n" {
		t.Fatalf("the source's worker reads its blob: %v, %v", resp, err)
	}
	for _, m := range c.running() {
		if m != lead {
			if _, err := callFrom(t, c.hub.Node(m.cfg.ID), lead.cfg.ID, get); err != nil {
				t.Fatalf("peer %s cannot read a blob: %v", m.cfg.ID, err)
			}
			break
		}
	}
	if _, err := callFrom(t, c.hub.Node("evil-not-a-worker"), lead.cfg.ID, get); wire.CodeOf(err) != wire.CodeRejected {
		t.Fatalf("a node running nothing read the blob: %v", err)
	}
	if n := lead.refused.Snapshot()[wire.TypeBlobChunkGet]; n != 1 {
		t.Fatalf("blob read refusals counted %d, want 1", n)
	}
}

// A split `file:` source's later ranges are parts whose stored params
// refer to the first task's for the blob: their workers read the blob all
// the same (judged on the whole params, as dispatched).
func TestBlobReadBySplitSourceRange(t *testing.T) {
	c := newRainstormCluster(t, nil)
	lead := c.leader()
	sum, err := putBlob(t, lead, []byte("key\na\nb\n"))
	if err != nil {
		t.Fatal(err)
	}
	c.addWorker("w1", 1)
	c.addWorker("w2", 1)
	lead = waitCores(t, c, 2)
	ack, err := lead.Submit(context.Background(), rsSpecJob(t, rainstorm.Source{File: "in.csv", Header: true, Split: 2}, sum))
	if err != nil {
		t.Fatal(err)
	}
	taskToken(t, lead, ack.JobID, 1, 0) // the second range's source
	src := lead.rsTaskInfo(wire.RainstormTask{Job: ack.JobID, Workflow: "pipe", Index: 1}).worker
	raw, err := hex.DecodeString(sum)
	if err != nil {
		t.Fatal(err)
	}
	get := &wire.BlobChunkGet{Sum: raw, Length: 64}
	if resp, err := callFrom(t, c.hub.Node(src), lead.cfg.ID, get); err != nil || string(resp.(*wire.BlobChunk).Data) != "key\na\nb\n" {
		t.Fatalf("the second range's worker reads the pipeline's blob: %v, %v", resp, err)
	}
}

// A worker-key holder cannot make itself a task's worker by reporting
// progress for it under a made-up token of the leader's term: the leader
// placed every attempt of its own term, so it ignores (and counts) such a
// report, and the task's open stays refused to that node.
func TestForgedProgressDoesNotMakeATaskWorker(t *testing.T) {
	c, lead, job, _, tokens := rsTwoWorkers(t, "")
	c.addWorker("evil", 1) // registered, runs nothing
	sink := sinkTask(job)
	var wfID string
	lead.mu.Lock()
	for _, w := range lead.jobs[job].wfs {
		if w.rec.FenceToken == tokens[1] {
			wfID = w.rec.WorkflowID
		}
	}
	lead.mu.Unlock()
	lt := lead.leading()
	if wfID == "" || lt == nil {
		t.Fatalf("sink workflow %q, leading %v", wfID, lt)
	}
	forged := lt.Number()<<32 | 0xffff
	evil := c.hub.Node("evil")
	if _, err := callFrom(t, evil, lead.cfg.ID, &wire.WorkflowProgress{JobID: job, WorkflowID: wfID, WorkerID: "evil",
		FenceToken: forged, Status: wire.WorkflowRunning}); err != nil {
		t.Fatalf("progress: %v", err)
	}
	if in := lead.rsTaskInfo(sink); in.worker == "evil" || in.token != tokens[1] {
		t.Fatalf("a forged progress report took the task over: worker %s, token %d", in.worker, in.token)
	}
	if _, err := callFrom(t, evil, lead.cfg.ID, &wire.RainstormOpen{Task: sink, Incarnation: forged}); !errors.Is(err, wire.ErrStaleFence) {
		t.Fatalf("open under the forged token: %v", err)
	}
	if n := lead.refused.Snapshot()[wire.TypeWorkflowProgress]; n != 1 {
		t.Fatalf("forged progress reports counted %d, want 1", n)
	}
}

// A leader takes a report of an attempt it has no record of (placed by an
// older term's leader it did not sync with, or of a workflow still
// pending) only with the placing manager's proof, signed with the manager
// key for that very worker. Without one, any worker-key holder could
// claim a pending workflow, or one placed before the last election, by
// naming a token of an older term: it became the workflow's worker.
func TestOlderTermProgressNeedsAPlacementProof(t *testing.T) {
	c := newTestCluster(t, 1, nil) // no worker: the job stays pending
	lead := c.leader()
	ack, err := lead.Submit(context.Background(), sleepJob(t, "unplaced", 1, 1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	wfID := workflowID(ack.JobID, 0)
	lt := lead.leading()
	if lt == nil || lt.Number() == 0 {
		t.Fatalf("leading %v: no older term to forge a token of", lt)
	}
	older := (lt.Number()-1)<<32 | 7
	holder := func() (string, wire.WorkflowStatus) {
		lead.mu.Lock()
		defer lead.mu.Unlock()
		w := lead.wfs[wfID]
		return w.rec.Worker, w.rec.Status
	}
	report := func(proof *wire.PlacementProof) {
		t.Helper()
		if _, err := callFrom(t, c.hub.Node("evil"), lead.cfg.ID, &wire.WorkflowProgress{JobID: ack.JobID, WorkflowID: wfID,
			WorkerID: "evil", FenceToken: older, Status: wire.WorkflowRunning, Placement: proof}); err != nil {
			t.Fatalf("progress: %v", err)
		}
	}
	workerKey, err := security.DeriveRoleSecret(c.secret, security.TierWorker)
	if err != nil {
		t.Fatal(err)
	}
	workerRing, err := security.NewKeyring(workerKey, "")
	if err != nil {
		t.Fatal(err)
	}
	id, mac, err := workerRing.Prove(security.TierWorker, placementTranscript(ack.JobID, wfID, "evil", older))
	if err != nil {
		t.Fatal(err)
	}
	forW1 := lead.placementProof(ack.JobID, wfID, "w1", older) // a real proof, for another worker
	for i, proof := range []*wire.PlacementProof{nil, {KeyID: id, MAC: mac}, forW1} {
		report(proof)
		if w, st := holder(); w != "" || st != wire.WorkflowPending {
			t.Fatalf("report %d took the pending workflow: worker %q, status %s", i, w, st)
		}
		if n := lead.refused.Snapshot()[wire.TypeWorkflowProgress]; n != uint64(i+1) {
			t.Fatalf("after report %d, refused progress counted %d, want %d", i, n, i+1)
		}
	}
	// The leader's own proof for this sender: an attempt a manager placed
	// and this leader missed, which it adopts.
	report(lead.placementProof(ack.JobID, wfID, "evil", older))
	if w, st := holder(); w != "evil" || st != wire.WorkflowRunning {
		t.Fatalf("a proven attempt was not adopted: worker %q, status %s", w, st)
	}
}
