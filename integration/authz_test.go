package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"regexp"
	"testing"
	"time"

	"tempest/integration/attack"
	"tempest/internal/devcluster"
	"tempest/security"
	"tempest/wire"
)

// A stolen worker key used under a node id that runs nothing of a live
// pipeline (the insider of docs/security.md) against the real manager
// leader: it guesses the running count task's fence token from the term
// /metrics shows, and tries to open the task (which would hand it the
// task's state), to store a forged checkpoint (the next version, an
// invented count), to read the route table (every task's token) and to
// read a blob no work of its own names. Every request is refused without a
// token in the answer, each refusal is counted in /metrics, and the
// pipeline's output stays exact.
func TestStolenWorkerKeyCannotTouchAPipeline(t *testing.T) {
	const records = 20000
	want := generated(t, records, 17, keepLow)
	c := startCluster(t, 1, 2, 3)
	leader := c.leader()
	ln, _ := c.Node(leader)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	secret := []byte("a blob no work of the attacker names\n")
	h := sha256.Sum256(secret)
	sum := hex.EncodeToString(h[:])
	if _, err := c.client.UploadBlob(ctx, sum, bytes.NewReader(secret), int64(len(secret)), nil); err != nil {
		t.Fatal(err)
	}

	id := c.submit(pacedJob(records, 4000, true))
	c.taskWorker(id, "paced", 3) // the count task runs, records flow

	metrics, err := scrape("http://" + ln.API)
	if err != nil {
		t.Fatal(err)
	}
	term := uint64(metrics["tempest_manager_term"])
	if term == 0 {
		t.Fatalf("no term in the leader's /metrics")
	}
	workerSecret, err := security.DeriveRoleSecret(c.Secret(), security.TierWorker)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := security.NewKeyring(workerSecret, "")
	if err != nil {
		t.Fatal(err)
	}
	evil, err := (&attack.Attacker{Source: "127.0.0.1"}).Hello(ctx, ln.QUIC, "evil-not-a-worker", keys)
	if err != nil {
		t.Fatalf("hello with the worker key: %v", err)
	}
	defer evil.Close()
	call := func(msg wire.Message) (wire.Message, error) {
		t.Helper()
		resp, err := evil.Call(ctx, 5*time.Second, msg)
		var we *wire.Error
		if err != nil && !errors.As(err, &we) {
			t.Fatalf("%s: %v", msg.Type(), err)
		}
		return resp, err
	}
	// A fence token is term<<32 | seq: ten digits or more.
	token := regexp.MustCompile(`[0-9]{10,}`)
	noToken := func(what, text string, guessed uint64) {
		t.Helper()
		for _, tok := range token.FindAllString(text, -1) {
			if tok != fmt.Sprint(guessed) { // its own guess, echoed, tells it nothing
				t.Fatalf("%s names %s: %q", what, tok, text)
			}
		}
	}

	task := wire.RainstormTask{Job: id, Workflow: "paced", Stage: 2}
	const guesses = 16 // a pipeline of five tasks drew its tokens among the term's first few
	for seq := uint64(1); seq <= guesses; seq++ {
		inc := term<<32 | seq
		resp, err := call(&wire.RainstormOpen{Task: task, Incarnation: inc})
		if err == nil {
			t.Fatalf("open under incarnation %d served: %+v", inc, resp)
		}
		if wire.CodeOf(err) != wire.CodeStaleFence {
			t.Fatalf("open under incarnation %d: %v, want stale_fence", inc, err)
		}
		noToken("a refused open", err.Error(), inc)
		version := uint64(1)
		for range 2 { // a refusal naming the stored version is followed up once
			forged := &wire.RainstormCheckpoint{Task: task, Incarnation: inc, Version: version,
				State: []wire.RainstormAggregate{{Key: "k0", Count: 31337000}}}
			resp, err = call(forged)
			if err != nil {
				t.Fatalf("forged checkpoint: %v", err)
			}
			a := resp.(*wire.RainstormCheckpointAck)
			if !a.Refused {
				t.Fatalf("forged checkpoint version %d under %d accepted: %+v", version, inc, a)
			}
			if a.Current != inc+1 {
				t.Fatalf("a refused checkpoint names %d as current: %+v", a.Current, a)
			}
			noToken("a refused checkpoint", a.Reason, inc)
			var stored uint64
			if _, err := fmt.Sscanf(a.Reason, "version %d does not follow the stored %d", new(uint64), &stored); err != nil {
				break
			}
			version = stored + 1
		}
	}
	_, err = call(&wire.RainstormRoutesRequest{Job: id, Workflow: "paced"})
	if wire.CodeOf(err) != wire.CodeRejected {
		t.Fatalf("routes to a node running no task: %v", err)
	}
	noToken("a refused route request", err.Error(), 0)
	_, err = call(&wire.BlobChunkGet{Sum: h[:], Length: 1 << 10})
	if wire.CodeOf(err) != wire.CodeRejected {
		t.Fatalf("foreign blob read: %v", err)
	}

	metrics, err = scrape("http://" + ln.API)
	if err != nil {
		t.Fatal(err)
	}
	for typ, n := range map[string]float64{"RainstormOpen": guesses, "RainstormCheckpoint": guesses, "RainstormRoutesRequest": 1, "BlobChunkGet": 1} {
		if got := metrics[`tempest_manager_unauthorized_total{type="`+typ+`"}`]; got < n {
			t.Errorf("%s refusals counted %v, want at least %v", typ, got, n)
		}
	}
	out := c.finish(id, "paced")
	diffRows(t, "the pipeline's output after the attack", out.Rows, want)
}

// A stolen worker key said hello to the workers running a live pipeline's
// tasks, under a node id that runs nothing: it feeds the count task forged
// batches (every upstream index, the term's first incarnations, sequence
// numbers upwards, an end of stream) and tells the filter task its
// downstream acknowledged everything, which would make it drop batches the
// count never got. Every one is refused by the worker, which counts it in
// /metrics (tempest_worker_unauthorized_total), and the output stays exact.
func TestStolenWorkerKeyCannotFeedAPipeline(t *testing.T) {
	const records = 20000
	want := generated(t, records, 17, keepLow)
	c := startCluster(t, 1, 2, 3)
	ln, _ := c.Node(c.leader())
	id := c.submit(pacedJob(records, 4000, true))
	// Task order: the source, low/0, low/1, count/0, count/1.
	filter, err := nodeOf(c, c.taskWorker(id, "paced", 1))
	if err != nil {
		t.Fatal(err)
	}
	count, err := nodeOf(c, c.taskWorker(id, "paced", 3))
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := scrape("http://" + ln.API)
	if err != nil {
		t.Fatal(err)
	}
	term := uint64(metrics["tempest_manager_term"])
	workerSecret, err := security.DeriveRoleSecret(c.Secret(), security.TierWorker)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := security.NewKeyring(workerSecret, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	send := func(to string, msgs []wire.Message) {
		t.Helper()
		evil, err := (&attack.Attacker{Source: "127.0.0.1"}).Hello(ctx, to, "evil-not-a-worker", keys)
		if err != nil {
			t.Fatalf("hello with the worker key: %v", err)
		}
		defer evil.Close()
		for _, m := range msgs {
			// One-way on a worker: a request of it is answered "no reply",
			// whether it was taken or not.
			var we *wire.Error
			if _, err := evil.Call(ctx, 5*time.Second, m); err != nil && !errors.As(err, &we) {
				t.Fatalf("%s: %v", m.Type(), err)
			}
		}
	}
	const guesses = 8
	var batches, acks []wire.Message
	for seq := uint64(1); seq <= guesses; seq++ {
		inc := term<<32 | seq
		for from := range 2 {
			for n := uint64(1); n <= 4; n++ {
				batches = append(batches, &wire.RainstormBatch{From: wire.RainstormTask{Job: id, Workflow: "paced", Stage: 1, Index: from},
					To: 0, Incarnation: inc, Seq: n, EOS: n == 4,
					Records: []wire.RainstormRecord{{ID: 1<<62 + n, Fields: []string{"k0", "1"}}}})
			}
		}
		acks = append(acks, &wire.RainstormBatchAck{From: wire.RainstormTask{Job: id, Workflow: "paced", Stage: 2, Index: 0},
			To: 0, Incarnation: inc, UpTo: math.MaxUint64})
	}
	send(count.QUIC, batches)
	send(filter.QUIC, acks)

	refused := func(n *devcluster.Node, typ string) float64 {
		t.Helper()
		m, err := scrape("http://" + n.Metrics)
		if err != nil {
			t.Fatal(err)
		}
		return m[`tempest_worker_unauthorized_total{type="`+typ+`"}`]
	}
	if got := refused(count, "RainstormBatch"); got < float64(len(batches)) {
		t.Errorf("the count task's worker refused %v forged batches, want %d", got, len(batches))
	}
	if got := refused(filter, "RainstormBatchAck"); got < float64(len(acks)) {
		t.Errorf("the filter task's worker refused %v forged acks, want %d", got, len(acks))
	}
	out := c.finish(id, "paced")
	diffRows(t, "the pipeline's output after forged batches and acks", out.Rows, want)
}

// nodeOf is the cluster's node named name.
func nodeOf(c *cluster, name string) (*devcluster.Node, error) {
	n, ok := c.Node(name)
	if !ok {
		return nil, fmt.Errorf("no node %s", name)
	}
	return n, nil
}
