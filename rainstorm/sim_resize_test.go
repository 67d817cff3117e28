package rainstorm

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"tempest/wire"
	"tempest/workflow"
)

// The simulation drives resizes as the manager leader would: it asks the
// source for new task counts (again and again until a durable source
// checkpoint records the epoch: a source that restarts before then has
// forgotten the request), places the tasks of every epoch the source has
// durably reached (a new task of a grown stage, or a retired one coming
// back), and serves handovers from the store's durable state. Everything
// else — crashes, frozen stale incarnations, drops, duplicates, reordering
// and, on the replicated store, leader changes — goes on as in every
// simulation.

type simHandover struct {
	from   wire.RainstormTask
	epoch  uint64
	groups []wire.RainstormGroupState
}

// simResize is the leader's side: a plan of task counts, each asked for
// once the source has read a given share of the input.
type simResize struct {
	plan    []simStep
	records uint64 // the input's records, for the shares
	asked   int    // resize requests the source accepted
	placed  int    // new or returning tasks placed
	auto    *simAuto
}

type simStep struct {
	share float64 // of the input read before the request
	tasks []int
}

func (z *simResize) step(s *simRun) {
	if z.auto != nil {
		z.auto.step(s, z)
	}
	epochs := s.epochs()
	// Ask for the next planned size once the previous one is recorded.
	if i := len(epochs) - 1; i < len(z.plan) {
		src := s.current(wire.RainstormTask{})
		if src != nil && !src.frozen {
			read, _ := src.src.Read()
			if (z.plan[i].share == 0 || float64(read) >= z.plan[i].share*float64(z.records)) && src.src.Resize(z.plan[i].tasks) {
				z.asked++
				s.handle(src, src.src.Ready())
			}
		}
	}
	// Place every task of the epochs the source sends in or has passed
	// that is not running in them.
	cur := s.sourceEpoch()
	for st := 1; st <= len(s.p.Stages); st++ {
		for i := range s.tasksOf(st) {
			id := wire.RainstormTask{Stage: st, Index: i}
			if s.due(id, epochs, cur) {
				s.start(id)
				z.placed++
			}
		}
	}
}

// due reports whether task id must be placed: it exists in an epoch up to
// cur, and no instance runs it there (never started, or retired before an
// epoch it exists in again). A crashed task is restarted by the fault
// schedule, as a dead worker's task is by the leader's.
func (s *simRun) due(id wire.RainstormTask, epochs []wire.RainstormEpoch, cur int) bool {
	exists := func(lo, hi int) bool {
		for e := lo; e <= hi; e++ {
			if id.Index < epochs[e].Tasks[id.Stage-1] {
				return true
			}
		}
		return false
	}
	if s.incs[id] == 0 {
		return exists(0, cur)
	}
	c := s.store.Latest(id)
	if c == nil || !c.Retired || !c.Done || !exists(int(c.Epoch)+1, cur) {
		return false
	}
	in := s.current(id)
	return in != nil && in.task.Epoch() <= int(c.Epoch)
}

func (s *simRun) deliverHandoverWant(m simMsg) {
	groups, ok := HandoverOf(s.store.Latest(m.hreq.Task), m.hreq.Epoch)
	if !ok {
		return // not durable yet: the task asks again
	}
	s.send(simMsg{to: m.to, toInc: m.toInc, hrep: &simHandover{from: m.hreq.Task, epoch: m.hreq.Epoch, groups: groups}})
}

// resizeCases are pipelines with the stage sizes each seed walks through:
// a keyed aggregate grown and shrunk (its state moves), a stateless stage
// grown and shrunk (only routing moves), and both at once.
func resizeCases(t testing.TB) []struct {
	simCase
	plan []simStep
} {
	cs := simCases(t)
	fc, gs, frp := cs[0], cs[3], cs[2]
	return []struct {
		simCase
		plan []simStep
	}{
		{fc, []simStep{{0.1, []int{3, 4}}, {0.3, []int{3, 6}}, {0.5, []int{2, 2}}, {0.7, []int{1, 1}}}},
		{gs, []simStep{{0.05, []int{3, 3}}, {0.2, []int{1, 4}}, {0.4, []int{4, 1}}, {0.6, []int{2, 2}}}},
		{frp, []simStep{{0.1, []int{2, 3, 1}}, {0.4, []int{1, 1, 4}}}},
	}
}

func runResize(t testing.TB, seed uint64, f faults, spec *Spec, data []byte, plan []simStep, store simStore) (*simRun, []Record) {
	t.Helper()
	var records uint64
	if g := spec.Source.Generate; g != nil {
		records = uint64(g.Records)
	} else {
		records = uint64(len(csvRecords(t, data, spec.Source.Header)))
	}
	return runSimWith(t, seed, f, spec, data, nil, ExecOptions{}, store, &simResize{plan: plan, records: records})
}

// TestSimResizeExactlyOnce: stages grow and shrink while tasks crash,
// freeze and come back stale, messages drop, repeat and reorder; every
// seed's output equals the sequential pass, and each stage's durable
// counts agree with it.
func TestSimResizeExactlyOnce(t *testing.T) {
	var resizes, placed, crashes, stale int
	for _, c := range resizeCases(t) {
		for seed := uint64(1); seed <= uint64(simSeeds(t)); seed++ {
			s, got := runResize(t, seed, heavy, c.spec(true), c.data, c.plan, NewMemStore())
			if !reflect.DeepEqual(got, c.expect) {
				t.Fatalf("%s seed %d: output differs from the sequential pass (%d rows, want %d; %d crashes, %d resizes)\n%s",
					c.name, seed, len(got), len(c.expect), s.crashes, s.resize.asked, diffRows(got, c.expect))
			}
			if err := s.countsAgree(len(got)); err != nil {
				t.Fatalf("%s seed %d: %v", c.name, seed, err)
			}
			resizes += len(s.epochs()) - 1
			placed += s.resize.placed
			crashes += s.crashes
			stale += s.staleRefuse + s.staleSends
		}
	}
	if resizes == 0 || placed == 0 || crashes == 0 || stale == 0 {
		t.Fatalf("not exercised: %d resizes, %d tasks placed by resizes, %d crashes, %d stale refusals and sends", resizes, placed, crashes, stale)
	}
	t.Logf("%d resizes, %d tasks placed by them, %d crashes or freezes, %d stale refusals and sends", resizes, placed, crashes, stale)
}

// TestSimResizeAtLeastOnceOverCounts: the same resizes and faults without
// exactly-once lose nothing and count too much on some seed (so the
// exactly-once test can fail).
func TestSimResizeAtLeastOnceOverCounts(t *testing.T) {
	c := resizeCases(t)[0]
	want := map[string]int{}
	for _, r := range c.expect {
		var n int
		fmt.Sscan(r.Fields[1], &n)
		want[r.Fields[0]] = n
	}
	over := 0
	for seed := uint64(1); seed <= uint64(simSeeds(t)); seed++ {
		_, got := runResize(t, seed, heavy, c.spec(false), c.data, c.plan, NewMemStore())
		if len(got) != len(c.expect) {
			t.Fatalf("seed %d: %d keys, want %d", seed, len(got), len(c.expect))
		}
		for _, r := range got {
			var n int
			fmt.Sscan(r.Fields[1], &n)
			if n < want[r.Fields[0]] {
				t.Fatalf("seed %d: at-least-once lost records across a resize: %s = %d, want at least %d", seed, r.Fields[0], n, want[r.Fields[0]])
			}
		}
		if !reflect.DeepEqual(got, c.expect) {
			over++
		}
	}
	if over == 0 {
		t.Fatal("at-least-once never differed from the sequential pass under resizes and faults")
	}
}

// TestSimResizeNoFaultsMovesTheFewest: without faults, each resize moves
// only the groups Rebalance moves, and the run ends with every retired
// task done.
func TestSimResizeNoFaults(t *testing.T) {
	for _, c := range resizeCases(t) {
		s, got := runResize(t, 1, faults{maxDelay: 2}, c.spec(true), c.data, c.plan, NewMemStore())
		if !reflect.DeepEqual(got, c.expect) {
			t.Fatalf("%s: output differs\n%s", c.name, diffRows(got, c.expect))
		}
		if n := len(s.epochs()) - 1; n != len(c.plan) {
			t.Fatalf("%s: %d resizes, planned %d", c.name, n, len(c.plan))
		}
		tabs, err := NewTables(s.epochs())
		if err != nil {
			t.Fatal(err)
		}
		var moved []string
		for e := 1; e < tabs.Len(); e++ {
			for st := 1; st <= len(s.p.Stages); st++ {
				moved = append(moved, fmt.Sprint(Moved(tabs.Table(e-1, st), tabs.Table(e, st))))
			}
		}
		t.Logf("%s: %d ticks, groups moved per epoch and stage %v", c.name, s.now, moved)
	}
}

// TestSimResizeReplicatedStore runs the resizes against the model of the
// managers' replicated store, with its lost answers, missed groups and
// leader changes: handovers are read from the leader's state.
func TestSimResizeReplicatedStore(t *testing.T) {
	seeds := simSeeds(t)
	if os.Getenv("TEMPEST_RS_SIM_SEEDS") == "" {
		seeds = min(seeds, 10) // each seed costs several MemStore ones
	}
	for _, c := range resizeCases(t)[:2] {
		for seed := uint64(1); seed <= uint64(seeds); seed++ {
			st := newReplStore(t, seed, storeHeavy)
			s, got := runResize(t, seed, heavy, c.spec(true), c.data, c.plan, st)
			if !reflect.DeepEqual(got, c.expect) {
				t.Fatalf("%s seed %d: output differs (%d crashes, %d resizes)\n%s", c.name, seed, s.crashes, len(s.epochs())-1, diffRows(got, c.expect))
			}
			st.Close()
		}
	}
}

// simTick is how much time one tick of the simulation stands for when a
// source is paced and a policy reads rates.
const simTick = 100 * time.Millisecond

// simAuto is the manager leader's policy loop in the simulation: every
// second it samples the stage's durable counters and its backlog, feeds
// its Scaler, and turns each decision into a resize request.
type simAuto struct {
	stage     int
	gen       *Generate // the paced source, when the stage is the first
	scaler    *Scaler
	decisions []ScaleDecision
	sizes     []int // the stage's size after each decision
	// decidedAt and inForceAt are the ticks of each decision and of the
	// source's durable checkpoint sending in its epoch.
	decidedAt, inForceAt []int
	// A manager leader change forgets everything the leader held: its
	// scaler's window and a request the source has not recorded yet.
	// The new leader starts from the replicated state alone, the
	// source's durable epochs.
	pol           Autoscale
	leaderChanges int
}

func (a *simAuto) step(s *simRun, z *simResize) {
	if n := len(a.inForceAt); n < len(a.decidedAt) && s.sourceEpoch() > n {
		a.inForceAt = append(a.inForceAt, s.now)
	}
	if s.r.Float64() < 0.005 {
		a.leaderChanges++
		recorded := len(s.epochs()) - 1
		z.plan = z.plan[:recorded]
		a.decisions, a.sizes, a.decidedAt = a.decisions[:recorded], a.sizes[:recorded], a.decidedAt[:recorded]
		a.inForceAt = a.inForceAt[:min(len(a.inForceAt), recorded)]
		a.scaler = NewScaler(a.pol, time.Unix(0, 0).Add(time.Duration(s.now)*simTick))
	}
	if s.now%10 != 0 {
		return
	}
	epochs := s.epochs()
	tasks := epochs[len(epochs)-1].Tasks[a.stage-1]
	var in, offered uint64
	for i := range s.tasksOf(a.stage) {
		if c := s.store.Latest(wire.RainstormTask{Stage: a.stage, Index: i}); c != nil {
			in += c.RecordsIn
		}
	}
	if a.stage == 1 && a.gen != nil {
		// A paced source's demand is its schedule: what is due by now,
		// read or not (the source lags behind it when the pipeline is
		// slow, or while its task is down), so a stall reads as backlog,
		// not as a fall in load. Every record goes to the first stage.
		now := time.Duration(s.now) * simTick
		offered = uint64(sort.Search(int(a.gen.Records), func(k int) bool { return a.gen.DueAt(uint64(k)) > now }))
	} else {
		for i := range s.tasksOf(a.stage - 1) {
			if c := s.store.Latest(wire.RainstormTask{Stage: a.stage - 1, Index: i}); c != nil {
				offered += c.RecordsOut
			}
		}
	}
	x := ScaleSample{At: time.Unix(0, 0).Add(time.Duration(s.now) * simTick), Tasks: tasks, In: in,
		Backlog: offered - min(offered, in), Resizing: len(z.plan) > len(epochs)-1 || s.sourceEpoch() < len(epochs)-1}
	d, ok := a.scaler.Observe(x)
	if !ok {
		return
	}
	next := slices.Clone(epochs[len(epochs)-1].Tasks)
	next[a.stage-1] = d.To
	z.plan = append(z.plan, simStep{tasks: next})
	a.decisions = append(a.decisions, d)
	a.sizes = append(a.sizes, d.To)
	a.decidedAt = append(a.decidedAt, s.now)
}

// TestSimAutoscaleFollowsARamp is the policy and the protocol together: a
// generated source ramps 100 → 400 → 10 records/s; the filter stage,
// starting at one task, grows to at least three and shrinks back to one,
// each step decided by its Scaler from the stage's durable counters and
// backlog, while tasks crash and come back stale, messages are lost and
// the manager leader changes (forgetting its scaler and any request the
// source has not recorded); the counts equal the sequential pass.
func TestSimAutoscaleFollowsARamp(t *testing.T) {
	// Rates a tenth of a second's tick carries well under the source's
	// window, so the source keeps to its schedule at the peak.
	const records, keys = 10500, 23
	gen := &Generate{Records: records, Keys: keys, Stages: []workflow.Stage{
		{Duration: 5 * time.Second, Target: 100}, {Duration: 5 * time.Second, Target: 400},
		{Duration: 20 * time.Second, Target: 400}, {Duration: time.Second, Target: 10}}}
	pol := Autoscale{Min: 1, Max: 6, Low: 40, High: 120, Window: 2 * time.Second, Cooldown: 3 * time.Second}
	spec := &Spec{Source: Source{Generate: gen}, Stages: []Stage{
		{Name: "odd", Op: OpFilter, Autoscale: &pol, Field: "value", Matches: "[13579]$"},
		{Name: "sum", Op: OpSum, Tasks: 2, Key: "key", Field: "value"}}}
	want := expectGenerated(records, keys)
	leaderChanges, shaped := 0, 0
	seeds := simSeeds(t)
	if os.Getenv("TEMPEST_RS_SIM_SEEDS") == "" {
		seeds = min(seeds, 5)
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		auto := &simAuto{stage: 1, gen: gen, pol: pol, scaler: NewScaler(pol, time.Unix(0, 0))}
		z := &simResize{auto: auto}
		var s *simRun
		paced := func(idx uint64) bool {
			return gen.DueAt(idx*256) <= time.Duration(s.now)*simTick
		}
		s, got := runSimPaced(t, seed, heavy, spec, z, func(r *simRun) { s = r; r.paced = paced })
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d: output differs from the sequential pass (%d crashes, sizes %v)\n%s", seed, s.crashes, auto.sizes, diffRows(got, want))
		}
		if err := s.countsAgree(len(got)); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if slices.Max(append([]int{1}, auto.sizes...)) >= 3 && auto.sizes[len(auto.sizes)-1] == 1 {
			shaped++
		} else {
			// The faults can cost enough time that the input ends
			// before the last shrink (seed 12 of 100): the output is
			// still exact, which is checked above on every seed.
			t.Logf("seed %d: the stage went through sizes %v", seed, auto.sizes)
		}
		if seed == 1 {
			for i, d := range auto.decisions {
				took := "never (the input ended first)"
				if i < len(auto.inForceAt) {
					took = fmt.Sprintf("%d ticks", auto.inForceAt[i]-auto.decidedAt[i])
				}
				t.Logf("at %s: %s; the source sent in the new epoch after %s", d.At.Sub(time.Unix(0, 0)), d, took)
			}
			t.Logf("%d ticks, %d crashes or freezes, %d manager leader changes", s.now, s.crashes, auto.leaderChanges)
		}
		leaderChanges += auto.leaderChanges
	}
	if shaped*5 < seeds*4 {
		t.Fatalf("the stage grew to 3 or more and shrank back to 1 on %d of %d seeds, want at least 80 %%", shaped, seeds)
	}
	if leaderChanges == 0 {
		t.Fatal("no manager leader changed: the test does not show a new leader carrying on")
	}
}
