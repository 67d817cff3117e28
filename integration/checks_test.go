package integration

import (
	"context"
	"encoding/csv"
	"fmt"
	"strings"
	"testing"
	"time"

	"tempest/internal/target"
	"tempest/wire"
)

// Checks of a workflow split over three workers merge exactly: against a
// target that answers one request in ten with 500 (seeded, so the count is
// the target's to tell), a status check passes once per 200 and fails once
// per 500 the target reports; the JSON status, the CSV results and a check
// threshold all read the merged counts.
func TestShardedChecksMergeExactly(t *testing.T) {
	c := startCluster(t, 1, 3, 2)
	cfg := target.DefaultConfig()
	cfg.ErrorRate, cfg.Seed = 0.1, 7
	tgt := startTarget(t, cfg)
	url := "http://" + tgt.Addr()
	id := c.submit(fmt.Sprintf(`name: checks
timeout: 90s
workflows:
  - name: checked
    type: http
    cores: 1
    vus: 6
    iterations: 600
    shards: 3
    steps:
      - name: root
        url: "%s/"
        expect_status: [200, 500]
        checks:
          - {name: ok, status: 200}
          - {name: answered, duration_below: 5m}
    thresholds:
      - "check: ok > 50%%"
      - "checks > 99%%"
`, url))
	st := c.waitStatus(id, 60*time.Second, terminal)
	if st.Status != wire.JobCompleted || len(st.Workflows) != 1 || len(st.Workflows[0].Steps) != 1 {
		t.Fatalf("job ended %s with %+v (%s), want COMPLETED with one merged workflow of one step", st.Status, st.Workflows, st.Error)
	}
	wf := st.Workflows[0]
	if workers := strings.Split(wf.Worker, ","); len(workers) != 3 {
		t.Errorf("shards ran on %q, want three workers", wf.Worker)
	}
	stats := tgt.Stats()
	ok, bad := int64(stats.ByStatus[200]), int64(stats.ByStatus[500])
	if ok+bad != 600 || bad == 0 {
		t.Fatalf("target answered %d 200s and %d 500s, want 600 with some 500s", ok, bad)
	}
	want := fmt.Sprint([]any{"ok", ok, bad, "answered", int64(600), int64(0)})
	var got []any
	for _, ch := range wf.Steps[0].Checks {
		got = append(got, ch.Name, ch.Passed, ch.Failed)
	}
	if fmt.Sprint(got) != want {
		t.Errorf("merged checks %v, want %v (the target's 200s and 500s)", got, want)
	}
	// check: ok passes (about 90%); checks, over both, is about 95%: fails.
	if len(wf.Thresholds) != 2 || !wf.Thresholds[0].Passed || wf.Thresholds[1].Passed {
		t.Errorf("thresholds %+v, want the first to pass and the second to fail", wf.Thresholds)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body, err := c.client.Results(ctx, id, "csv")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(strings.NewReader(string(body))).ReadAll()
	if err != nil || len(rows) != 2 {
		t.Fatalf("csv %q: %v", body, err)
	}
	wantRow := fmt.Sprintf("%d,%d,ok=%d/%d; answered=600/0", ok+600, bad, ok, bad)
	if got := strings.Join(rows[1][8:11], ","); got != wantRow || rows[0][8] != "checks_passed" || rows[0][10] != "checks" {
		t.Errorf("csv checks columns %q, want %q", got, wantRow)
	}
}
