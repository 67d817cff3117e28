package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"tempest/api"
	"tempest/wire"
)

// runningJob is a job with one running http workflow (10s planned) and one
// finished sleep.
func runningJob(dc string, completed, failed int64, elapsed float64) api.JobStatus {
	return api.JobStatus{JobID: "j1", Status: wire.JobRunning, Datacenter: dc,
		TotalCompleted: completed + 1, TotalFailed: failed, ElapsedSeconds: elapsed,
		Workflows: []api.WorkflowStatus{
			{Name: "get-root", WorkflowID: "w1", Status: wire.WorkflowRunning, CompletedCount: completed, FailedCount: failed,
				ElapsedSeconds: elapsed, PlannedSeconds: 10,
				Recent: &api.SeriesPoint{Completed: 180, Failed: 20, P50Ms: 3.25, P99Ms: 41}},
			{Name: "nap", WorkflowID: "w2", Status: wire.WorkflowCompleted, CompletedCount: 1},
		}}
}

func TestDisplayPlain(t *testing.T) {
	now := time.Unix(0, 0)
	var out bytes.Buffer
	d := newDisplay(&out, false, 0, func() time.Time { return now })
	d.update(runningJob("dc1", 0, 0, 0)) // first: printed
	d.update(runningJob("dc1", 100, 0, 1))
	now = now.Add(plainInterval / 2)
	d.update(runningJob("dc1", 150, 0, 1.5)) // same status, soon after: not printed
	now = now.Add(plainInterval)
	d.update(runningJob("dc1", 400, 4, 3)) // interval passed: printed
	done := runningJob("dc1", 500, 5, 4)
	done.Status, done.Workflows[0].Status = wire.JobCompleted, wire.WorkflowCompleted
	d.update(done) // status changed: printed

	got := out.String()
	if strings.ContainsAny(got, "\r\x1b") {
		t.Fatalf("plain output has carriage returns or escapes: %q", got)
	}
	want := `j1 RUNNING  elapsed 0s  remaining 10s
  -/s  completed 1  errors 0  workflows 1/2 done
  get-root  RUNNING    200.0/s  p50 3.25ms  p99 41.0ms  errors 0
  nap       COMPLETED  completed 1  errors 0
j1 RUNNING  elapsed 3s  remaining 7s
  169.3/s  completed 401  errors 4 (0.99%)  workflows 1/2 done
  get-root  RUNNING    200.0/s  p50 3.25ms  p99 41.0ms  errors 4 (0.99%)
  nap       COMPLETED  completed 1  errors 0
j1 COMPLETED  elapsed 4s
  101.0/s  completed 501  errors 5 (0.99%)  workflows 2/2 done
  get-root  COMPLETED  completed 500  errors 5 (0.99%)
  nap       COMPLETED  completed 1  errors 0
`
	if got != want {
		t.Fatalf("plain output:\n%s\nwant:\n%s", got, want)
	}
}

func TestDisplayTerminal(t *testing.T) {
	var out bytes.Buffer
	d := newDisplay(&out, true, 40, time.Now)
	d.update(runningJob("dc1", 0, 0, 0))
	first := out.Len()
	d.update(runningJob("dc1", 100, 1, 1))
	// Without the running workflow the block is a line shorter: the line
	// left below it is erased.
	st := runningJob("dc1", 100, 1, 2)
	st.Workflows = st.Workflows[1:]
	d.update(st)

	s := out.String()
	if strings.Contains(s[:first], "\x1b[4A") {
		t.Fatal("the first draw climbed above the block")
	}
	// Two running draws of 5 lines (head, totals, progress bar, two
	// workflows), then one of 3: nothing runs, so no bar.
	if n := strings.Count(s, fmt.Sprintf(ansiUp, 5)); n != 2 {
		t.Errorf("%d climbs of 5 lines, want one per redraw (2): %q", n, s)
	}
	if n := strings.Count(s, ansiClearLine); n != 5+5+3 {
		t.Errorf("%d cleared lines, want every line of every draw (13)", n)
	}
	if !strings.Contains(s, "[==>") || !strings.Contains(s, " 10%") {
		t.Errorf("no progress bar at 1s of 10s: %q", s)
	}
	if !strings.HasSuffix(s, "\n"+ansiClearDown) {
		t.Errorf("a shrunk block must erase what is left below it: %q", s[len(s)-20:])
	}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimPrefix(line[strings.LastIndex(line, ansiClearLine)+1:], ansiClearLine[1:])
		if utf8.RuneCountInString(line) >= 40 {
			t.Errorf("line %q does not fit 40 columns", line)
		}
	}
}

// A gate answers one status merged over the job's datacenters; the display
// draws a line per datacenter from its Datacenters. The status is the one
// gate's own test writes (gate/testdata), not one shaped here.
func TestDisplayGateStatus(t *testing.T) {
	raw, err := os.ReadFile("../../gate/testdata/two-dc-status.json")
	if err != nil {
		t.Fatal(err)
	}
	var st api.JobStatus
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	newDisplay(&out, false, 0, time.Now).update(st)
	want := `j1 RUNNING  elapsed 2s  remaining -
  101.0/s  completed 200  errors 2 (0.99%)  workflows 0/1 done
  dc east  RUNNING  60.0/s  completed 120  errors 0
  dc west  RUNNING  41.0/s  completed 80  errors 2 (2.44%)
  nap  RUNNING    101.0/s  p50 -  p99 -  errors 2 (0.99%)
`
	if got := out.String(); got != want {
		t.Fatalf("display of a gate's status:\n%s\nwant:\n%s", got, want)
	}
}

// Statuses of several datacenters interleaved in one stream (each with its
// own Datacenter) render as one job with a line each.
func TestDisplayDatacenters(t *testing.T) {
	var out bytes.Buffer
	d := newDisplay(&out, false, 0, time.Now)
	d.update(runningJob("us-east", 100, 0, 2))
	d.update(runningJob("eu-west", 50, 5, 3))
	lines := strings.Split(out.String(), "\n")
	last := lines[len(lines)-9 : len(lines)-1] // the second block
	want := []string{
		"j1 RUNNING  elapsed 3s  remaining 8s",
		"  69.2/s  completed 152  errors 5 (3.18%)  workflows 2/4 done",
		"  dc us-east  RUNNING  50.5/s  completed 101  errors 0",
		"    get-root  RUNNING    200.0/s  p50 3.25ms  p99 41.0ms  errors 0",
		"    nap       COMPLETED  completed 1  errors 0",
		"  dc eu-west  RUNNING  18.7/s  completed 51  errors 5 (8.93%)",
		"    get-root  RUNNING    200.0/s  p50 3.25ms  p99 41.0ms  errors 5 (9.09%)",
		"    nap       COMPLETED  completed 1  errors 0",
	}
	if strings.Join(last, "\n") != strings.Join(want, "\n") {
		t.Fatalf("block:\n%s\nwant:\n%s", strings.Join(last, "\n"), strings.Join(want, "\n"))
	}
}

func TestDisplayRemaining(t *testing.T) {
	tests := []struct {
		name string
		mut  func(*api.JobStatus)
		want string
	}{
		{"planned", func(*api.JobStatus) {}, "remaining 8s"},
		{"overrun", func(st *api.JobStatus) { st.Workflows[0].ElapsedSeconds = 12 }, "remaining 0s"},
		{"iterations: unknown", func(st *api.JobStatus) { st.Workflows[0].PlannedSeconds = 0 }, "remaining -"},
		{"pending counts from its plan", func(st *api.JobStatus) {
			st.Workflows[0].Status, st.Workflows[0].ElapsedSeconds = wire.WorkflowPending, 0
		}, "remaining 10s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := runningJob("dc1", 10, 0, 2)
			tt.mut(&st)
			var out bytes.Buffer
			newDisplay(&out, false, 0, time.Now).update(st)
			if head, _, _ := strings.Cut(out.String(), "\n"); !strings.HasSuffix(head, tt.want) {
				t.Fatalf("headline %q, want it to end in %q", head, tt.want)
			}
		})
	}
}

// A workflow that loses its worker: the display says which worker its
// attempt ended on and why, then where the next attempt runs; a status
// stream that skips the waiting state gets the move in one line.
func TestDisplayTellsRetries(t *testing.T) {
	at := func(st wire.WorkflowStatus, attempts int, worker, err string) api.JobStatus {
		j := runningJob("dc1", 10, 0, 1)
		wf := &j.Workflows[0]
		wf.Status, wf.Attempts, wf.Worker, wf.Error = st, attempts, worker, err
		return j
	}
	notes := func(sts ...api.JobStatus) []string {
		var out bytes.Buffer
		d := newDisplay(&out, false, 0, func() time.Time { return time.Unix(0, 0) })
		for _, st := range sts {
			d.update(st)
		}
		var got []string
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(l, "get-root: ") {
				got = append(got, l)
			}
		}
		return got
	}
	lost := "worker dc1-worker-1 lost: declared dead"
	got := notes(at(wire.WorkflowRunning, 1, "dc1-worker-1", ""), at(wire.WorkflowPending, 1, "", lost),
		at(wire.WorkflowPending, 1, "", lost), at(wire.WorkflowRunning, 2, "dc1-worker-2", ""), at(wire.WorkflowRunning, 2, "dc1-worker-2", ""))
	want := []string{"get-root: attempt 1 on dc1-worker-1 ended: " + lost + "; it will run again", "get-root: attempt 2 runs on dc1-worker-2"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("notes %q, want %q", got, want)
	}
	got = notes(at(wire.WorkflowRunning, 1, "dc1-worker-1", ""), at(wire.WorkflowRunning, 2, "dc1-worker-3", ""))
	want = []string{"get-root: attempt 1 on dc1-worker-1 ended; attempt 2 runs on dc1-worker-3"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("skipped waiting: notes %q, want %q", got, want)
	}
	if got := notes(at(wire.WorkflowRunning, 1, "dc1-worker-1", ""), at(wire.WorkflowRunning, 1, "dc1-worker-1", "")); len(got) != 0 {
		t.Errorf("no retry, notes %q", got)
	}
	// A load workflow's lost attempt: whose counts are kept, said once,
	// before where the rest went.
	kept := at(wire.WorkflowPending, 1, "", lost)
	kept.Workflows[0].LostAttempts = []api.LostAttempt{{Attempt: 1, Worker: "dc1-worker-1", Reason: lost, CompletedCount: 988}}
	moved := at(wire.WorkflowRunning, 2, "dc1-worker-2", "")
	moved.Workflows[0].LostAttempts = kept.Workflows[0].LostAttempts
	got = notes(at(wire.WorkflowRunning, 1, "dc1-worker-1", ""), kept, moved, moved)
	want = []string{
		"get-root: attempt 1 on dc1-worker-1 was lost (" + lost + "); its 988 completed and 0 failed requests are kept in the counts, and only the rest of the load runs again",
		"get-root: attempt 1 on dc1-worker-1 ended: " + lost + "; it will run again",
		"get-root: attempt 2 runs on dc1-worker-2"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("lost attempt: notes %q, want %q", got, want)
	}
}
