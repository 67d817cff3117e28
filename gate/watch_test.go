package gate

import (
	"context"
	"slices"
	"testing"
	"time"

	"tempest/transport"
	"tempest/wire"
	"tempest/workflow"
)

// A job's watchers share one merge of its workflows per change: however many
// streams read a change, its reports' histograms are decoded once.
func TestWatchersShareOneStatusPerChange(t *testing.T) {
	hub := transport.NewHub()
	hg := startHubGates(t, hub, []string{"g1"}, time.Minute)
	g := hg.gates["g1"]

	h := workflow.NewHistogram()
	h.Record(time.Millisecond)
	hist, err := h.Encode()
	if err != nil {
		t.Fatal(err)
	}
	steps := []wire.StepStats{{StepName: "sleep", CompletedCount: 1, Histogram: hist}}
	rec := &wire.GateJobRecord{
		Submission: wire.JobSubmission{JobID: "j-done", Name: "nap", Workflows: sleepJob().Workflows},
		Status:     wire.JobCompleted,
		Datacenters: []wire.JobProgress{{JobID: "j-done", Datacenter: "east", Status: wire.JobCompleted,
			Workflows: []wire.WorkflowProgress{{WorkflowName: "nap", Status: wire.WorkflowCompleted, CompletedCount: 1, StepStats: steps}}}},
		CreatedAt: time.Now().UnixNano(),
		Version:   1,
	}
	if g.adopt(rec) == nil {
		t.Fatal("gate did not take the record")
	}
	const streams = 5
	for range streams {
		watch, err := g.Watch(context.Background(), "j-done")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for st := range watch {
			n++
			if st.Status != wire.JobCompleted || len(st.Workflows) != 1 || len(st.Workflows[0].Steps) != 1 {
				t.Fatalf("status %+v", st)
			}
		}
		if n != 1 {
			t.Fatalf("a finished job's stream sent %d statuses, want 1", n)
		}
	}
	g.mu.Lock()
	builds := g.jobs["j-done"].statuses.Builds()
	g.mu.Unlock()
	if builds != 1 {
		t.Fatalf("%d streams of one unchanged job merged its workflows %d times, want once", streams, builds)
	}
}

// A job's thresholds are parsed once and kept with it: every copy of its
// record reads the same model, and a newer record (which may carry another
// submission) gets its own.
func TestJobModelKeptWithTheJob(t *testing.T) {
	hub := transport.NewHub()
	hg := startHubGates(t, hub, []string{"g1"}, time.Minute)
	g := hg.gates["g1"]
	rec := &wire.GateJobRecord{Submission: wire.JobSubmission{JobID: "j-1", Workflows: sleepJob().Workflows}, Status: wire.JobRunning, Version: 1}
	if g.adopt(rec) == nil {
		t.Fatal("gate did not take the record")
	}
	a, _, _ := g.record("j-1")
	b, _, _ := g.record("j-1")
	if g.modelOf(&a) != g.modelOf(&b) {
		t.Fatal("two reads of one job worked its model out twice")
	}
	newer := *rec
	newer.Version = 2
	newer.Submission.Workflows = append(slices.Clone(rec.Submission.Workflows), wire.WorkflowSpec{Name: "more", Type: "sleep"})
	if g.adopt(&newer) == nil {
		t.Fatal("gate did not take the newer record")
	}
	c, _, _ := g.record("j-1")
	if m := g.modelOf(&c); m == g.modelOf(&a) || len(m.Groups()) != 2 {
		t.Fatalf("the newer record read the old model (%d groups)", len(m.Groups()))
	}
}
