package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/rainstorm"
	"tempest/rsstore"
	"tempest/wire"
)

// soloStore is a store run alone: no peers, every request admitted.
type soloStore struct{}

func (soloStore) Peers() ([]string, int) { return nil, 1 }
func (soloStore) Call(context.Context, string, wire.Message) (wire.Message, error) {
	return nil, errors.New("no peers")
}
func (soloStore) Admit(*rsstore.Request) *rsstore.Result { return nil }
func (soloStore) Opened(uint64, []*wire.RainstormOpen)   {}
func (soloStore) StaleReason(string, uint64) string      { return "" }
func (soloStore) Logger() *slog.Logger                   { return slog.New(slog.DiscardHandler) }

// oldOwner is a count task of a store alone, checkpointing as a task
// does: it is the old owner of a resize's groups.
type oldOwner struct {
	t    *testing.T
	s    *rsstore.Store
	task wire.RainstormTask
	v    uint64
}

func newOldOwner(t *testing.T) *oldOwner {
	t.Helper()
	s, err := rsstore.Open(t.TempDir(), soloStore{}, rsstore.Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	o := &oldOwner{t: t, s: s, task: wire.RainstormTask{Job: "j", Workflow: "pipe", Stage: 1}}
	if err := s.Sync(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if r := s.Commit(context.Background(), 1, []*rsstore.Request{{Open: &wire.RainstormOpen{Task: o.task, Incarnation: 1}}}); r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	return o
}

// checkpoint stores the task's next version in epoch, counting count for
// keys [from, from+n) step step; past epoch 0 only those in the groups it
// keeps (evenGroups move), as an old owner never changes a group it gave
// away.
func (o *oldOwner) checkpoint(epoch uint64, closing bool, from, n, step int, count int64) {
	o.t.Helper()
	o.v++
	byGroup := map[int][]wire.RainstormAggregate{}
	for i := from; i < from+n*step; i += step {
		k := fmt.Sprintf("key-%08d", i)
		if g := rainstorm.KeyGroup(k); epoch == 0 || !evenGroups(g) {
			byGroup[g] = append(byGroup[g], wire.RainstormAggregate{Key: k, Count: count})
		}
	}
	c := &wire.RainstormCheckpoint{Task: o.task, Incarnation: 1, Version: o.v, Epoch: epoch, Closing: closing,
		Inputs: []wire.RainstormInput{{Next: o.v + 1}}}
	for g := range rainstorm.KeyGroups {
		if es := byGroup[g]; len(es) > 0 {
			slices.SortFunc(es, func(a, b wire.RainstormAggregate) int { return strings.Compare(a.Key, b.Key) })
			c.Groups = append(c.Groups, wire.RainstormGroupState{Group: g, Entries: es})
		}
	}
	r := o.s.Commit(context.Background(), 1, []*rsstore.Request{{Ckpt: c}})
	if r[0].Err != nil {
		o.t.Fatalf("checkpoint %d: %v", o.v, r[0].Err)
	}
	if a := r[0].Msg.(*wire.RainstormCheckpointAck); a.Refused {
		o.t.Fatalf("checkpoint %d refused: %s", o.v, a.Reason)
	}
}

// closedWith is an old owner holding keys distinct keys that closed
// epoch 0.
func closedWith(t *testing.T, keys int) *oldOwner {
	o := newOldOwner(t)
	for from := 0; from < keys; from += 25_000 {
		o.checkpoint(0, false, from, min(25_000, keys-from), 1, 1)
	}
	o.checkpoint(0, true, 0, 1, 1, 1)
	return o
}

// evenGroups is the groups a resize moves in these tests: half of them.
func evenGroups(g int) bool { return g%2 == 0 }

// A handover page costs what it carries, not the old owner's state: the
// first page of a 150k-key state allocates about what it does on a 50k-key
// one. Each read follows a checkpoint of the old owner (in the next epoch,
// as it goes on working while the new owner reads), so no read finds the
// state built by an earlier one. When each page was served from the old
// owner's whole state (Store.Latest), every page of a million-key
// handover built a million entries.
func TestRainstormHandoverPageCostIsItsPage(t *testing.T) {
	const small, large, runs, budget = 50_000, 150_000, 4, 64 << 10
	cost := func(keys int) float64 {
		o := closedWith(t, keys)
		var total uint64
		for i := range runs {
			o.checkpoint(1, false, i, 100, keys/100, int64(i+2))
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			page, _, ok := rsHandoverRead(o.s, o.task, wire.RainstormHandoverWant{Stage: 1, FromGroup: 2, FromEntry: 10}, evenGroups, budget)
			runtime.ReadMemStats(&after)
			if !ok || !page.More {
				t.Fatalf("%d keys: the first page (served %v) holds the whole handover", keys, ok)
			}
			total += after.TotalAlloc - before.TotalAlloc
		}
		return float64(total) / runs
	}
	ps, pl := cost(small), cost(large)
	t.Logf("bytes allocated per handover page: %.0f on %d keys, %.0f on %d", ps, small, pl, large)
	// The state grows 3×; a cost that follows it grows about that much.
	if pl > 1.5*ps {
		t.Fatalf("a handover page's cost grows with the state: %.0f → %.0f bytes on %d then %d keys", ps, pl, small, large)
	}
}

// Pages read one after another, from each page's next position, hold
// exactly the moving groups' entries of the closing state, each once and
// in order, each page within its budget, while the old owner checkpoints
// its own groups between pages; nothing is served before the closing
// checkpoint is durable.
func TestRainstormHandoverPagesJoinToTheMovedGroups(t *testing.T) {
	const keys, budget = 20_000, 16 << 10
	o := newOldOwner(t)
	o.checkpoint(0, false, 0, keys, 1, 1)
	if _, _, ok := rsHandoverRead(o.s, o.task, wire.RainstormHandoverWant{Stage: 1}, evenGroups, budget); ok {
		t.Fatal("a handover was served before the old owner's closing checkpoint")
	}
	o.checkpoint(0, true, 0, keys, 1, 7) // every key counted 7 when it closes
	want := wire.RainstormHandoverWant{Stage: 1}
	var got []string
	for pages := 1; ; pages++ {
		page, used, ok := rsHandoverRead(o.s, o.task, want, evenGroups, budget)
		if !ok {
			t.Fatalf("page %d not served", pages)
		}
		if used > budget {
			t.Fatalf("page %d counts %d bytes, over its %d", pages, used, budget)
		}
		if page.FromGroup != want.FromGroup || page.FromEntry != want.FromEntry {
			t.Fatalf("page %d starts at %d/%d, asked from %d/%d", pages, page.FromGroup, page.FromEntry, want.FromGroup, want.FromEntry)
		}
		for _, g := range page.Groups {
			if !evenGroups(g.Group) {
				t.Fatalf("page %d holds group %d, which does not move", pages, g.Group)
			}
			for _, e := range g.Entries {
				if e.Count != 7 || rainstorm.KeyGroup(e.Key) != g.Group {
					t.Fatalf("page %d: %+v in group %d", pages, e, g.Group)
				}
				got = append(got, fmt.Sprintf("%03d/%s", g.Group, e.Key))
			}
		}
		if !page.More {
			if pages < 3 {
				t.Fatalf("%d keys in %d-byte pages came in %d pages", keys, budget, pages)
			}
			break
		}
		want.FromGroup, want.FromEntry = page.NextGroup, page.NextEntry
		// The old owner goes on in epoch 1 with groups it keeps.
		o.checkpoint(1, false, 1, 50, 2, int64(100+pages))
	}
	var moved []string
	for i := range keys {
		k := fmt.Sprintf("key-%08d", i)
		if g := rainstorm.KeyGroup(k); evenGroups(g) {
			moved = append(moved, fmt.Sprintf("%03d/%s", g, k))
		}
	}
	slices.Sort(moved)
	if !slices.Equal(got, moved) {
		t.Fatalf("the pages hold %d entries, want the %d moved, each once in order", len(got), len(moved))
	}
}

// A resize's handover figures are on its durable decision: the leader
// that served the handover stores them, and the next leader, which served
// none of it, shows the keys and bytes moved and how long the handover
// took. Held in the leader's memory alone, they read zero after it died.
func TestRainstormHandoverFiguresSurviveTheLeader(t *testing.T) {
	c, lead, sp := scaledAskedToGrow(t)
	job, call := sp.job, sp.call
	// The source records the epoch and sends in it: count/2 is placed.
	epochs := sp.sendInTheGrow(t, lead, 2)
	// count/1 closes epoch 0 holding a key in every group.
	var groups []wire.RainstormGroupState
	for g := range rainstorm.KeyGroups {
		groups = append(groups, wire.RainstormGroupState{Group: g, Entries: []wire.RainstormAggregate{{Key: fmt.Sprint("k", g), Count: 1}}})
	}
	if a := call(&wire.RainstormCheckpoint{Task: sp.c0, Incarnation: sp.c0Inc, Version: lead.rs.Head(sp.c0).Version + 1, Closing: true,
		Groups: groups, Epochs: epochs}).(*wire.RainstormCheckpointAck); a.Refused {
		t.Fatalf("closing checkpoint refused: %s", a.Reason)
	}
	tabs, err := rainstorm.NewTables(epochs)
	if err != nil {
		t.Fatal(err)
	}
	moved := len(tabs.Table(1, 1).Owned(1))
	r := call(&wire.RainstormRoutesRequest{Job: job, Workflow: "pipe",
		Handovers: []wire.RainstormHandoverWant{{Stage: 1, Index: 0, Epoch: 0}}}).(*wire.RainstormRoutes)
	if len(r.Handovers) != 1 || r.Handovers[0].More || len(r.Handovers[0].Groups) != moved {
		t.Fatalf("handovers %+v, want one page of the %d groups that move", r.Handovers, moved)
	}

	// The figures reach a peer's store with the decision.
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		for _, m := range c.running() {
			if m == lead {
				continue
			}
			if sc := m.rs.Scale(job, "pipe"); sc != nil && len(sc.Resizes) > 0 && sc.Resizes[0].Handover > 0 {
				return nil
			}
		}
		return errors.New("no peer stores the handover's figures")
	})
	c.stopManager(lead.cfg.ID)
	next := c.leader()
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		out, err := next.PipelineOutput(context.Background(), job, "pipe", false)
		if err != nil {
			return err
		}
		for _, rz := range out.Resizes {
			if rz.Epoch != 1 {
				continue
			}
			if rz.KeysMoved != moved || rz.BytesMoved <= 0 || rz.Handover <= 0 {
				return fmt.Errorf("the new leader shows the 1 → 2 resize with %d keys, %d bytes moved in %s; want %d keys, some bytes and time",
					rz.KeysMoved, rz.BytesMoved, rz.Handover, moved)
			}
			return nil
		}
		return fmt.Errorf("the new leader shows no resize into epoch 1: %+v", out.Resizes)
	})
}
