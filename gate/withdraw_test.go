package gate

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/transport"
	"tempest/wire"
)

// countSubmissions counts the JobSubmissions east-1 receives per job.
func countSubmissions(e *fakeEast) func(id string) int {
	var mu sync.Mutex
	seen := map[string]int{}
	e.tr.Handle(wire.TypeJobSubmission, func(_ context.Context, _ transport.Peer, m wire.Message) (wire.Message, error) {
		sub := m.(*wire.JobSubmission)
		mu.Lock()
		seen[sub.JobID]++
		mu.Unlock()
		return &wire.JobAck{JobID: sub.JobID, Accepted: true}, nil
	})
	return func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return seen[id]
	}
}

// A job that reached some gates but not a majority is withdrawn from a
// majority before the client hears no_quorum, so the refusal is true: no
// later leader runs it, even one that held the first copy. A re-submission
// under the same id places it afresh, once.
func TestNoQuorumWithdrawsTheJobEverywhere(t *testing.T) {
	hub := transport.NewHub()
	ids := []string{"g1", "g2", "g3", "g4", "g5"}
	var cut atomic.Value // the leader whose first copies only one gate gets
	cut.Store("")
	var keeper atomic.Value
	keeper.Store("")
	hub.SetHook(func(from, to string, msg wire.Message) bool {
		op, ok := msg.(*wire.ReplicateGateRecord)
		if !ok || from != cut.Load().(string) || op.Record.Withdrawn {
			return true
		}
		return to == keeper.Load().(string)
	})
	hg := startHubGates(t, hub, ids, time.Minute)
	east := newFakeEast(t, hub)
	dispatched := countSubmissions(east)
	hg.observe(1)
	leader := hg.leader(10*time.Second, ids...)
	var followers []string
	for _, id := range ids {
		if id != leader.ID() {
			followers = append(followers, id)
		}
	}
	keeper.Store(followers[0])
	cut.Store(leader.ID())

	job := sleepJob()
	job.JobID = "j-withdrawn"
	_, err := leader.Submit(context.Background(), job)
	if wire.CodeOf(err) != wire.CodeNoQuorum || !strings.Contains(err.Error(), "will not run") {
		t.Fatalf("submit reaching 2 of 5 gates: %v; want no_quorum saying it will not run", err)
	}
	// Every gate that answers holds the withdrawal, the one that stored
	// the first copy included.
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		for _, id := range ids {
			rec, _, ok := hg.gates[id].record(job.JobID)
			if id == followers[0] || id == leader.ID() || ok {
				if !ok || !rec.Withdrawn || !rec.Status.Terminal() {
					return fmt.Errorf("%s holds %+v", id, rec)
				}
			}
		}
		return nil
	})
	// Whoever leads next, the gate that had the first copy among those it
	// may read, the job stays ended.
	cut.Store("")
	hg.stop[leader.ID()]()
	next := hg.leader(10*time.Second, followers...)
	if st, err := next.Job(context.Background(), job.JobID); err != nil || !strings.HasPrefix(st.Error, withdrawnPrefix) {
		t.Fatalf("after failover the job reads %+v, %v; want it withdrawn", st, err)
	}
	if n := dispatched(job.JobID); n != 0 {
		t.Fatalf("the withdrawn job reached the datacenter %d times", n)
	}
	// The client's retry places it, once.
	ack, err := next.Submit(context.Background(), job)
	if err != nil || !ack.Accepted {
		t.Fatalf("re-submission: %+v, %v", ack, err)
	}
	if rec, _, _ := next.record(job.JobID); rec.Withdrawn || rec.Status.Terminal() {
		t.Fatalf("re-submitted job %+v: want it placed afresh", rec)
	}
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if n := dispatched(job.JobID); n != 1 {
			return fmt.Errorf("dispatched %d times, want once", n)
		}
		return nil
	})
}

// When neither the job nor its withdrawal reaches a majority, the answer is
// outcome_unknown, never a refusal; the client's retry under the same id,
// once the gates are back, finds or places the one job.
func TestNoQuorumWithoutWithdrawalSaysTheOutcomeIsUnknown(t *testing.T) {
	hub := transport.NewHub()
	var cut atomic.Bool
	dropWhile[*wire.ReplicateGateRecord](hub, &cut)
	ids := []string{"g1", "g2", "g3"}
	hg := startHubGates(t, hub, ids, time.Minute)
	east := newFakeEast(t, hub)
	dispatched := countSubmissions(east)
	hg.observe(1)
	leader := hg.leader(10*time.Second, ids...)
	cut.Store(true)
	job := sleepJob()
	job.JobID = "j-unsure"
	_, err := leader.Submit(context.Background(), job)
	if wire.CodeOf(err) != wire.CodeOutcomeUnknown || !strings.Contains(err.Error(), "Idempotency-Key") {
		t.Fatalf("submit reaching no other gate: %v; want outcome_unknown naming the retry", err)
	}
	if n := dispatched(job.JobID); n != 0 {
		t.Fatalf("a job not stored on a majority reached the datacenter %d times", n)
	}
	cut.Store(false)
	if ack, err := leader.Submit(context.Background(), job); err != nil || !ack.Accepted {
		t.Fatalf("retry: %+v, %v", ack, err)
	}
	// A second retry (the first answer lost) finds the same job.
	if ack, err := leader.Submit(context.Background(), job); err != nil || !ack.Accepted {
		t.Fatalf("second retry: %+v, %v", ack, err)
	}
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if n := dispatched(job.JobID); n != 1 {
			return fmt.Errorf("dispatched %d times, want once", n)
		}
		return nil
	})
}
