package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"tempest/wire"
)

var updateFixtures = flag.Bool("update", false, "rewrite testdata fixtures from the gate's output")

// mergedStatusFixture is the status a gate answers for a job running in two
// datacenters. cmd/tempest's display tests read it, so the CLI is tested
// against the shape a gate really sends (one merged status whose
// Datacenter is "east,west", a line per datacenter in Datacenters), not one
// the test imagines.
const mergedStatusFixture = "testdata/two-dc-status.json"

func TestMergedStatusFixture(t *testing.T) {
	_, g, east, west := oneGate(t, time.Minute)
	id := twoDCJob(t, g)
	report := func(f *fakeDC, done, failed int64) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		jp := &wire.JobProgress{JobID: id, Datacenter: f.dc, Status: wire.JobRunning, TotalCompleted: done, TotalFailed: failed,
			OverallRate: float64(done) / 2, FenceToken: lease(g, id, f.dc).FenceToken,
			Workflows: []wire.WorkflowProgress{{JobID: id, WorkflowID: id + "-" + f.dc + "-w0", WorkflowName: "nap",
				Status: wire.WorkflowRunning, CompletedCount: done, FailedCount: failed, Elapsed: 2 * time.Second}}}
		if _, err := f.tr.Call(ctx, g.ID(), jp); err != nil {
			t.Fatalf("%s reports: %v", f.dc, err)
		}
	}
	report(east, 120, 0)
	report(west, 80, 2)
	st, err := g.Job(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Datacenters) != 2 || st.Datacenter != "east,west" {
		t.Fatalf("status %+v: want one merged status over east and west", st)
	}
	// What varies from run to run is pinned, so the fixture is stable.
	st.JobID, st.SubmittedAt, st.ElapsedSeconds = "j1", "", 2
	for i := range st.Datacenters {
		st.Datacenters[i].LeaseExpiresIn = 0
	}
	for i := range st.Workflows {
		st.Workflows[i].WorkflowID = "j1-w0"
	}
	got, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	if *updateFixtures {
		if err := os.WriteFile(mergedStatusFixture, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(filepath.Clean(mergedStatusFixture))
	if err != nil {
		t.Fatalf("%v (run go test ./gate -run TestMergedStatusFixture -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the gate's merged status changed shape; if on purpose, run with -update and check the CLI's display tests.\ngot:\n%s\nwant:\n%s", got, want)
	}
}
