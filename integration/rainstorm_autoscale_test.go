package integration

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"tempest/api"
	"tempest/internal/testutil"
	"tempest/wire"
)

// Autoscaling on the real binaries (docs/rainstorm.md, "Resizing a running
// pipeline" and "Autoscaling policy"): a generated source ramps low → high
// → low against a CPU-costly stage and a count, both with `autoscale`; the
// manager leader's scaler grows them and shrinks them back, each resize
// moving key groups with their state (the count's aggregates, both stages'
// de-duplication positions), and the counts equal the sequential pass.

// The tail at 500 records/s (the records past the peak's) lasts about
// 30 s: a shrink waits for the peak's backlog to drain first, and on a
// loaded host a resize can take 20 s to be in force when workers are
// wrongly declared dead, so a shorter tail ended the input before the
// stages were back down.
const (
	autoscaleRecords = 141000
	autoscaleKeys    = 1000
)

// autoscaleCostly is the work stage's pattern: it matches every value (one
// to three digits) and rewrites it unchanged, but its 180 optional digits
// keep hundreds of matcher states alive, so every record costs the stage's
// task CPU, the same on every run: 68 µs under the race detector these
// binaries are built with (2.7 µs in a normal build), more than half a core
// for one task at the ramp's peak.
const autoscaleCostly = `^(?:[0-9]?[0-9]?[0-9]?){60}$`

// autoscaleJob is the ramp: 1,500 records/s for 4 s, 8,000/s for 15 s,
// then 500/s for the last 10,000 records (20 s). Both stages run in tasks
// of their own (chain: false: no combiner in the source, so each takes in
// every record) and size themselves on the same watermarks, far from the
// ramp's rates: above 2,500 records/s per task for 2 s one more task,
// under 1,000 one fewer. At 8,000/s the work stage goes from 1 to its
// maximum of 3 (at 2 tasks, 4,000 per task is far over high), the count
// from 1 to its 2; at 500/s both come back to 1 (500 is half of low). At
// 1,500/s one task is well under high and over low.
func autoscaleJob(exactlyOnce bool) string {
	return fmt.Sprintf(`name: autoscale
timeout: 300s
workflows:
  - name: ramp
    type: rainstorm
    exactly_once: %t
    source:
      generate:
        records: %d
        keys: %d
        stages:
          - {duration: 1s, target: 1500}
          - {duration: 3s, target: 1500}
          - {duration: 1s, target: 8000}
          - {duration: 14s, target: 8000}
          - {duration: 1s, target: 500}
    stages:
      - name: work
        op: replace
        field: value
        pattern: '%s'
        with: '$0'
        chain: false
        autoscale: {min: 1, max: 3, low: 1000, high: 2500, window: 2s, cooldown: 1s}
      - name: count
        op: count
        key: key
        autoscale: {min: 1, max: 2, low: 1000, high: 2500, window: 2s, cooldown: 1s}
`, exactlyOnce, autoscaleRecords, autoscaleKeys, autoscaleCostly)
}

// autoscaleWatch follows a running pipeline: every size of each stage the
// source's durable checkpoint showed, in order, the decisions, and the
// work stage's records taken in over time (its tasks' durable counters).
type autoscaleWatch struct {
	sizes   [][]int // by stage, from 1
	resizes []api.PipelineResize
	taken   []autoscaleSample
}

type autoscaleSample struct {
	at      time.Time
	records int64
}

func (a *autoscaleWatch) saw(out *api.PipelineOutput) {
	for st := 1; st < len(out.StageTasks); st++ {
		for len(a.sizes) < st {
			a.sizes = append(a.sizes, nil)
		}
		sz := &a.sizes[st-1]
		if n := out.StageTasks[st]; len(*sz) == 0 || (*sz)[len(*sz)-1] != n {
			*sz = append(*sz, n)
		}
	}
	if len(out.Resizes) >= len(a.resizes) {
		a.resizes = out.Resizes
	}
	var in int64
	for _, task := range out.Tasks {
		if task.Stage == 1 {
			in += task.Records
		}
	}
	a.taken = append(a.taken, autoscaleSample{time.Now(), in})
}

// stage is the sizes stage went through (nil before it was seen).
func (a *autoscaleWatch) stage(st int) []int {
	if st-1 < len(a.sizes) {
		return a.sizes[st-1]
	}
	return nil
}

// grewAndShrank reports whether stage reached peak tasks or more and then
// came back to 1.
func (a *autoscaleWatch) grewAndShrank(stage, peak int) bool {
	sizes := a.stage(stage)
	i := slices.IndexFunc(sizes, func(n int) bool { return n >= peak })
	return i >= 0 && slices.Contains(sizes[i:], 1)
}

// rate is the work stage's records/s taken in between from and to, from
// the samples nearest inside them (0 when fewer than two).
func (a *autoscaleWatch) rate(from, to time.Time) float64 {
	var first, last *autoscaleSample
	for i := range a.taken {
		s := &a.taken[i]
		if s.at.Before(from) || s.at.After(to) {
			continue
		}
		if first == nil {
			first = s
		}
		last = s
	}
	if first == nil || last == first || !last.at.After(first.at) {
		return 0
	}
	return float64(last.records-first.records) / last.at.Sub(first.at).Seconds()
}

// logFigures logs each resize's figures as the product shows them, and
// the work stage's throughput while its own resizes took effect against
// the 3 s before each decision.
func (a *autoscaleWatch) logFigures(t *testing.T) {
	t.Helper()
	for _, r := range a.resizes {
		line := fmt.Sprintf("%s %d → %d (epoch %d): decided %s", r.Stage, r.From, r.To, r.Epoch, r.At.Format("15:04:05.000"))
		if r.InForce > 0 {
			line += fmt.Sprintf(", in force after %s, %d groups moved", r.InForce.Round(time.Millisecond), r.GroupsMoved)
		}
		if r.KeysMoved > 0 || r.Handover > 0 {
			line += fmt.Sprintf(", %d keys / %d bytes handed over in %s", r.KeysMoved, r.BytesMoved, r.Handover.Round(time.Millisecond))
		}
		if r.Stage == "work" && r.InForce > 0 {
			// Over 2 s at least: the counters move with durable
			// checkpoints, a few a second.
			line += fmt.Sprintf("; work took in %.0f records/s from the decision to in force (2 s at least), %.0f/s in the 3 s before",
				a.rate(r.At, r.At.Add(max(r.InForce, 2*time.Second))), a.rate(r.At.Add(-3*time.Second), r.At))
		}
		t.Log(line)
	}
}

// runAutoscale submits the ramp and follows it to its end, calling during
// once with the watch so far each time it is polled until during returns
// true (nil: never). It returns the output and what the watch saw.
func runAutoscale(t *testing.T, c *cluster, exactlyOnce bool, during func(*api.PipelineOutput, *autoscaleWatch) bool) (*api.PipelineOutput, *autoscaleWatch) {
	t.Helper()
	id := c.submit(autoscaleJob(exactlyOnce))
	w := &autoscaleWatch{}
	acted := during == nil
	testutil.Eventually(t, 4*time.Minute, 200*time.Millisecond, func() error {
		out, err := c.output(id, "ramp")
		if err != nil {
			return err
		}
		w.saw(out)
		if !acted && during(out, w) {
			acted = true
		}
		if out.Status.Terminal() && out.Status != wire.JobCompleted {
			t.Fatalf("job ended %s: %+v", out.Status, out.Tasks)
		}
		if !out.Complete || out.Status != wire.JobCompleted {
			return fmt.Errorf("pipeline %s, sizes so far %v", out.Status, w.sizes)
		}
		return nil
	})
	out, err := c.output(id, "ramp")
	if err != nil {
		t.Fatal(err)
	}
	w.saw(out)
	for _, r := range w.resizes {
		t.Logf("decision at %s: %s %s", r.At.Format("15:04:05.000"), r.Stage, r.Decision)
	}
	w.logFigures(t)
	t.Logf("the stages' sizes as the source's durable checkpoints showed them: work %v, count %v; %d restarts", w.stage(1), w.stage(2), out.Restarts)
	return out, w
}

// countsAgree checks a finished pipeline's counters: the work stage took
// in every record the source sent and passed each on, and the count
// passed on one record per row.
func countsAgree(t *testing.T, out *api.PipelineOutput) {
	t.Helper()
	var in, passed, counted, rows int64
	for _, task := range out.Tasks {
		switch task.Stage {
		case 1:
			in += task.Records
			passed += task.RecordsOut
		case 2:
			counted += task.Records
			rows += task.RecordsOut
		}
	}
	if in != autoscaleRecords || passed != autoscaleRecords || counted != autoscaleRecords || rows != int64(len(out.Rows)) {
		t.Errorf("work took in %d records and passed on %d, count took in %d (want %d each) and passed on %d (want %d)",
			in, passed, counted, autoscaleRecords, rows, len(out.Rows))
	}
}

func wantAutoscale(t *testing.T) [][]string {
	return generated(t, autoscaleRecords, autoscaleKeys, func(int) bool { return true })
}

// TestRainstormAutoscaleGrowsAndShrinks: the costly stage follows the
// ramp up to 3 tasks and back to 1, the count grows too (its state moves),
// every resize shows its figures, and the output is the sequential pass.
// make chaos runs it five times more. It left make test for a while: on a
// loaded machine about one run in eight stalled for good ("the source
// records epoch 5 and still sends in 4") because a task closing an epoch
// read a retired receiver's whole-channel ack as not drained
// (TestClosingTaskDrainsOnADoneReceiversAck).
func TestRainstormAutoscaleGrowsAndShrinks(t *testing.T) {
	want := wantAutoscale(t)
	c := startCluster(t, 1, 3, 2)
	keepLogsOnFailure(t, c)
	out, w := runAutoscale(t, c, true, nil)
	if !w.grewAndShrank(1, 3) {
		t.Errorf("the work stage went through sizes %v: want 3, then 1", w.stage(1))
	}
	if !slices.Contains(w.stage(2), 2) {
		t.Errorf("the count stage went through sizes %v: want 2", w.stage(2))
	}
	diffRows(t, "after growing and shrinking", out.Rows, want)
	countsAgree(t, out)
	var countMoved bool
	for _, r := range w.resizes {
		if r.InForce > 0 && r.GroupsMoved == 0 {
			t.Errorf("resize %s %d → %d in force with no groups moved", r.Stage, r.From, r.To)
		}
		// Keys moved is the proof; the handover's time may be 0, when the
		// old owner's closing checkpoint was durable at the first request.
		countMoved = countMoved || (r.Stage == "count" && r.KeysMoved > 0)
	}
	if !countMoved {
		t.Errorf("no resize of the count shows state handed over: %+v", w.resizes)
	}
	// The finished job's status still has the decisions, not only the
	// sizes the source recorded.
	if !slices.ContainsFunc(out.Resizes, func(r api.PipelineResize) bool { return !r.At.IsZero() && r.InForce > 0 }) {
		t.Errorf("the finished pipeline's status lost its decisions: %+v", out.Resizes)
	}
}

func chaosGate(t *testing.T) {
	if os.Getenv("CHAOS_DURATION") == "" {
		t.Skip("autoscaling under faults runs with make chaos (CHAOS_DURATION set)")
	}
}

// TestRainstormAutoscaleWorkerKillMidResize: a worker running a count task
// is SIGKILLed while the stage resizes (a decision taken, the source not
// yet sending at the new size); its tasks are placed again and the counts
// are still exact.
func TestRainstormAutoscaleWorkerKillMidResize(t *testing.T) {
	chaosGate(t)
	want := wantAutoscale(t)
	c := startCluster(t, 1, 3, 2)
	keepLogsOnFailure(t, c)
	out, w := runAutoscale(t, c, true, func(out *api.PipelineOutput, w *autoscaleWatch) bool {
		if len(w.resizes) == 0 {
			return false
		}
		last := w.resizes[len(w.resizes)-1]
		st := 1
		if last.Stage == "count" {
			st = 2
		}
		if len(out.StageTasks) <= st || out.StageTasks[st] == last.To {
			return false
		}
		for _, task := range out.Tasks {
			if task.Stage == st && task.Status == wire.WorkflowRunning && task.Worker != "" {
				t.Logf("resizing %s to %d (at %d): SIGKILL %s, which runs %s/%d", last.Stage, last.To, out.StageTasks[st], task.Worker, last.Stage, task.Index+1)
				if err := c.Kill(task.Worker); err != nil {
					t.Fatal(err)
				}
				return true
			}
		}
		return false
	})
	if out.Restarts == 0 {
		t.Errorf("the kill restarted no task: %+v", out.Tasks)
	}
	diffRows(t, "after a worker's SIGKILL mid-resize", out.Rows, want)
	countsAgree(t, out)
	if !w.grewAndShrank(1, 3) {
		t.Logf("the work stage went through sizes %v (the kill cost it the full shape)", w.stage(1))
	}
}

// TestRainstormAutoscaleLeaderKillAfterDecision: the manager leader is
// SIGKILLed right after its first resize decision; the new leader carries
// on from the source's durable epochs, and the counts are exact.
func TestRainstormAutoscaleLeaderKillAfterDecision(t *testing.T) {
	chaosGate(t)
	want := wantAutoscale(t)
	c := startCluster(t, 3, 3, 2)
	keepLogsOnFailure(t, c)
	var first api.PipelineResize
	out, w := runAutoscale(t, c, true, func(out *api.PipelineOutput, w *autoscaleWatch) bool {
		if len(w.resizes) == 0 {
			return false
		}
		first = w.resizes[0]
		leader := c.leader()
		t.Logf("after the decision %q: SIGKILL the leader %s", first.Decision, leader)
		if err := c.Kill(leader); err != nil {
			t.Fatal(err)
		}
		return true
	})
	diffRows(t, "after the leader's SIGKILL after a decision", out.Rows, want)
	countsAgree(t, out)
	if slices.Max(append([]int{1}, w.stage(1)...)) < 2 {
		t.Errorf("the work stage never resized: sizes %v", w.stage(1))
	}
	// A status shows a decision only once it is on a majority, so the dead
	// leader's survives it, with its time and inputs.
	kept := false
	for _, r := range out.Resizes {
		kept = kept || (r.Decision == first.Decision && r.At.Equal(first.At))
	}
	if !kept {
		t.Errorf("the dead leader's decision %q (%s) is not in the final status: %+v", first.Decision, first.At, out.Resizes)
	}
}

// TestRainstormAutoscaleAtLeastOnceCanOverCount: the same worker kill
// mid-resize without exactly-once may count records twice, so the tests
// above are not exact by luck.
func TestRainstormAutoscaleAtLeastOnceCanOverCount(t *testing.T) {
	chaosGate(t)
	c := startCluster(t, 1, 4, 2)
	for attempt := range 3 {
		var victim string
		out, _ := runAutoscale(t, c, false, func(out *api.PipelineOutput, w *autoscaleWatch) bool {
			if len(w.resizes) == 0 {
				return false
			}
			for _, task := range out.Tasks {
				if task.Stage == 0 && task.Worker != "" { // the source: its unacked output is resent
					victim = task.Worker
					if err := c.Kill(victim); err != nil {
						t.Fatal(err)
					}
					return true
				}
			}
			return false
		})
		got := countTotal(out.Rows)
		t.Logf("attempt %d: at-least-once counted %d records, exactly %d", attempt+1, got, autoscaleRecords)
		if got > autoscaleRecords {
			return
		}
		if got < autoscaleRecords {
			t.Fatalf("at-least-once lost records: %d < %d", got, autoscaleRecords)
		}
		if victim != "" {
			if err := c.Restart(victim); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Fatal("at-least-once never over-counted under a worker SIGKILL mid-resize")
}
