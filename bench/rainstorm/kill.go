package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"tempest/api"
	"tempest/wire"
)

// killTrial is one SIGKILL of a worker running stage tasks mid-run. Times
// are from the SIGKILL; zero means not observed before the run ended.
type killTrial struct {
	victim   string
	tasks    []string // the victim's tasks, stage/index
	atSource int64    // records the source had read at the kill
	// detect: the manager API shows the worker dead (SWIM detection plus
	// the leader's reaction). replaced: every one of its tasks is running on
	// another worker (a new attempt). flowing: every one of them has taken
	// records in since (its progress shows records in the new attempt).
	detect, replaced, flowing time.Duration
	restarts                  int
	restartsBefore            int // restarts already shown before the kill
	wall                      time.Duration
	// trace is every task's state (stage/index attempt@worker status
	// records) each time it changed after the kill, for reading where the
	// time went.
	trace []string
}

func taskLine(out *api.PipelineOutput) string {
	if out == nil {
		return " (no status)"
	}
	var b strings.Builder
	for _, t := range out.Tasks {
		w := strings.TrimPrefix(t.Worker, "dc1-")
		fmt.Fprintf(&b, " %d/%d:%d@%s:%.4s:%d", t.Stage, t.Index, t.Attempts, w, t.Status, t.Records)
	}
	return b.String()
}

type taskRef struct {
	stage, index int
	attempts     int
	records      int64
}

func findTask(out *api.PipelineOutput, ref taskRef) (api.PipelineTask, bool) {
	for _, t := range out.Tasks {
		if t.Stage == ref.stage && t.Index == ref.index {
			return t, true
		}
	}
	return api.PipelineTask{}, false
}

// chooseVictim picks a worker that runs a stage task, preferring one that
// does not run the source (so what is measured is a stage task's restart)
// and that runs a last-stage task (which holds operator state).
func chooseVictim(out *api.PipelineOutput) (string, []taskRef) {
	last := 0
	for _, t := range out.Tasks {
		last = max(last, t.Stage)
	}
	type cand struct {
		name            string
		source, lastTsk bool
		tasks           []taskRef
	}
	byWorker := map[string]*cand{}
	for _, t := range out.Tasks {
		c := byWorker[t.Worker]
		if c == nil {
			c = &cand{name: t.Worker}
			byWorker[t.Worker] = c
		}
		c.tasks = append(c.tasks, taskRef{t.Stage, t.Index, t.Attempts, t.Records})
		c.source = c.source || t.Stage == 0
		c.lastTsk = c.lastTsk || t.Stage == last
	}
	var cands []*cand
	for _, c := range byWorker {
		if c.name != "" && slices.ContainsFunc(c.tasks, func(r taskRef) bool { return r.stage > 0 }) {
			cands = append(cands, c)
		}
	}
	if len(cands) == 0 {
		return "", nil
	}
	score := func(c *cand) int {
		s := 0
		if !c.source {
			s += 2
		}
		if c.lastTsk {
			s++
		}
		return s
	}
	slices.SortFunc(cands, func(a, b *cand) int {
		if d := score(b) - score(a); d != 0 {
			return d
		}
		return strings.Compare(a.name, b.name)
	})
	return cands[0].name, cands[0].tasks
}

func (b *bench) workerDead(name string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v, err := b.client.Cluster(ctx)
	if err != nil {
		return false
	}
	for _, n := range v.Nodes {
		if n.Name == name {
			return n.State == "dead"
		}
	}
	return true // no longer listed
}

func (b *bench) killTrial(i int) (*killTrial, error) {
	tr := &killTrial{}
	var (
		killed time.Time
		refs   []taskRef
	)
	watch := func(out *api.PipelineOutput) error {
		if killed.IsZero() {
			if len(out.Tasks) == 0 || float64(out.Tasks[0].Records) < b.o.killAt*float64(b.records) {
				return nil
			}
			for _, t := range out.Tasks {
				if t.Status != wire.WorkflowRunning || t.Worker == "" {
					return nil
				}
			}
			tr.victim, refs = chooseVictim(out)
			if tr.victim == "" {
				return fmt.Errorf("no worker runs a stage task: %+v", out.Tasks)
			}
			for _, r := range refs {
				tr.tasks = append(tr.tasks, fmt.Sprintf("%d/%d", r.stage, r.index))
			}
			tr.atSource = out.Tasks[0].Records
			tr.restartsBefore = out.Restarts
			tr.trace = append(tr.trace, "before kill:"+taskLine(out))
			killed = time.Now()
			return b.c.Kill(tr.victim)
		}
		since := time.Since(killed)
		if line := taskLine(out); len(tr.trace) == 0 || !strings.HasSuffix(tr.trace[len(tr.trace)-1], line) {
			tr.trace = append(tr.trace, fmt.Sprintf("+%6.2fs%s", since.Seconds(), line))
		}
		if tr.detect == 0 && b.workerDead(tr.victim) {
			tr.detect = since
		}
		replaced, flowing := true, true
		for _, r := range refs {
			t, ok := findTask(out, r)
			moved := ok && t.Attempts > r.attempts && t.Worker != "" && t.Worker != tr.victim && t.Status == wire.WorkflowRunning
			replaced = replaced && moved
			flowing = flowing && moved && t.Records > 0 && t.Records != r.records
		}
		if tr.replaced == 0 && replaced {
			tr.replaced = since
		}
		if tr.flowing == 0 && flowing {
			tr.flowing = since
		}
		return nil
	}
	r, out, err := b.pipeline(true, watch)
	if err != nil {
		return nil, err
	}
	if killed.IsZero() {
		return nil, fmt.Errorf("the run ended before the source read %.0f%% of the input: raise -records", 100*b.o.killAt)
	}
	tr.wall, tr.restarts = r.wall, out.Restarts
	if tr.restarts == 0 {
		return nil, fmt.Errorf("killing %s restarted no task: %+v", tr.victim, out.Tasks)
	}
	logf("kill %d: %s (tasks %s) at %d source records: dead after %v, replaced after %v, flowing after %v; output exact, %d restarts (%d before the kill)",
		i, tr.victim, strings.Join(tr.tasks, " "), tr.atSource, tr.detect.Round(time.Millisecond),
		tr.replaced.Round(time.Millisecond), tr.flowing.Round(time.Millisecond), tr.restarts, tr.restartsBefore)
	if b.o.trace {
		for _, l := range tr.trace {
			fmt.Fprintln(os.Stderr, "   ", l)
		}
	}
	if err := b.heal(); err != nil {
		return nil, fmt.Errorf("after restarting %s: %w", tr.victim, err)
	}
	return tr, nil
}

func reportKills(o options, trials []*killTrial) {
	typical, bound, err := detectionBound(o)
	fmt.Printf("\n== recovery after a worker SIGKILL (exactly-once, %d records, kill at %.0f%% of the source; polled every %v)\n",
		o.records, 100*o.killAt, o.poll)
	if err == nil {
		fmt.Printf("SWIM profile %q, %d nodes: detection about %v (probe interval + failed probe + suspicion minimum), bound %v\n",
			o.swimProfile, o.managers+o.workers, typical, bound)
	}
	fmt.Printf("%-5s %-16s %-18s %9s %9s %9s %14s %8s %8s\n", "trial", "victim", "tasks", "detect", "replaced", "flowing", "flowing-detect", "restarts", "wall")
	var d, f, fd []float64
	show := func(x time.Duration) string {
		if x == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fs", x.Seconds())
	}
	for i, t := range trials {
		diff := "-"
		if t.detect > 0 && t.flowing > 0 {
			diff = fmt.Sprintf("%.2fs", (t.flowing - t.detect).Seconds())
			fd = append(fd, (t.flowing - t.detect).Seconds())
		}
		if t.detect > 0 {
			d = append(d, t.detect.Seconds())
		}
		if t.flowing > 0 {
			f = append(f, t.flowing.Seconds())
		}
		fmt.Printf("%-5d %-16s %-18s %9s %9s %9s %14s %8d %7.2fs\n", i+1, t.victim, strings.Join(t.tasks, ","),
			show(t.detect), show(t.replaced), show(t.flowing), diff, t.restarts-t.restartsBefore, t.wall.Seconds())
	}
	if len(f) > 0 {
		fmt.Printf("median: detect %.2fs, kill → flowing %.2fs, flowing − detect %.2fs   aim (recovery ≤ detection + 2 s): %s\n",
			median(d), median(f), median(fd), verdict(len(fd) > 0 && median(fd) <= 2))
	}
}
