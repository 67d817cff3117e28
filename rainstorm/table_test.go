package rainstorm

import (
	"slices"
	"testing"

	"tempest/wire"
)

func TestContiguousTableIsGroupTask(t *testing.T) {
	for _, n := range []int{1, 3, 7, 64} {
		tb := ContiguousTable(n)
		for task := range n {
			lo, hi := TaskGroups(task, n)
			if got := tb.Owned(task); len(got) != hi-lo || (len(got) > 0 && (got[0] != lo || got[len(got)-1] != hi-1)) {
				t.Fatalf("%d tasks: task %d owns %v, want [%d,%d)", n, task, got, lo, hi)
			}
		}
	}
}

// TestRebalanceMovesTheFewest: a resize moves only the groups over a
// task's share or of a task that goes away, and leaves shares within one
// group of each other.
func TestRebalanceMovesTheFewest(t *testing.T) {
	if got := Moved(ContiguousTable(3), Rebalance(ContiguousTable(3), 4)); got != 32 {
		t.Fatalf("3 → 4 tasks moved %d groups, want 32 (a quarter)", got)
	}
	if got := Moved(ContiguousTable(3), ContiguousTable(4)); got < 60 {
		t.Fatalf("recomputed ranges moved only %d groups: the test would not show the difference", got)
	}
	// Any walk of sizes: each step moves exactly the least any table
	// could (every group of a removed task, and what the kept tasks hold
	// over their shares when the biggest holders get the larger shares),
	// and balances the tasks within one group.
	sizes := []int{1, 2, 3, 4, 6, 5, 3, 1, 7, 128, 2, 1}
	tb := ContiguousTable(sizes[0])
	for _, n := range sizes[1:] {
		prev := tb
		tb = Rebalance(prev, n)
		counts := tb.Counts(n)
		lo, hi, total := KeyGroups, 0, 0
		for _, c := range counts {
			lo, hi, total = min(lo, c), max(hi, c), total+c
		}
		if total != KeyGroups || hi-lo > 1 {
			t.Fatalf("→ %d tasks: counts %v", n, counts)
		}
		held := prev.Counts(KeyGroups)
		least := 0
		for task := n; task < KeyGroups; task++ {
			least += held[task]
		}
		kept := slices.Clone(held[:n])
		slices.Sort(kept)
		slices.Reverse(kept)
		for k, c := range kept {
			share := KeyGroups / n
			if k < KeyGroups%n {
				share++
			}
			least += max(0, c-share)
		}
		if m := Moved(prev, tb); m != least {
			t.Fatalf("→ %d tasks moved %d groups, the least is %d", n, m, least)
		}
	}
}

func TestTablesFollowEpochs(t *testing.T) {
	tbs, err := NewTables([]wire.RainstormEpoch{{Tasks: []int{2, 3}}, {Epoch: 1, Segment: 5, Tasks: []int{2, 4}}})
	if err != nil {
		t.Fatal(err)
	}
	if Moved(tbs.Table(0, 1), tbs.Table(1, 1)) != 0 || Moved(tbs.Table(0, 2), tbs.Table(1, 2)) != 32 {
		t.Fatal("an unchanged stage moved groups, or a resized one moved other than a quarter")
	}
	for _, bad := range []wire.RainstormEpoch{
		{Epoch: 3, Segment: 9, Tasks: []int{2, 4}}, // not the next epoch
		{Epoch: 2, Segment: 5, Tasks: []int{2, 4}}, // not after the last start
		{Epoch: 2, Segment: 9, Tasks: []int{2}},    // another number of stages
		{Epoch: 2, Segment: 9, Tasks: []int{0, 4}}, // no tasks
	} {
		if err := tbs.Add(bad); err == nil {
			t.Fatalf("epoch %+v accepted", bad)
		}
	}
}

// FuzzTables: an epoch list comes from the network (a marker's Next, a
// checkpoint's Epochs): whatever it holds, building the tables either
// fails or gives every stage a table that covers every group with a task
// of that epoch.
func FuzzTables(f *testing.F) {
	f.Add([]byte{3, 3, 4, 3, 6, 2, 2, 1, 1})
	f.Add([]byte{1, 128, 0, 200})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 2 {
			return
		}
		stages := int(b[0]%4) + 1
		var epochs []wire.RainstormEpoch
		for i, seg := 1, uint64(0); i+stages <= len(b); i += stages {
			e := wire.RainstormEpoch{Epoch: uint64(len(epochs)), Segment: seg}
			for _, x := range b[i : i+stages] {
				e.Tasks = append(e.Tasks, int(int8(x)))
			}
			epochs = append(epochs, e)
			seg += uint64(b[i] % 3) // zero steps must be refused
		}
		tabs, err := NewTables(epochs)
		if err != nil {
			return
		}
		for e := range tabs.Len() {
			for st := 1; st <= stages; st++ {
				n := tabs.Tasks(e, st)
				for g, o := range tabs.Table(e, st) {
					if o < 0 || o >= n {
						t.Fatalf("epoch %d stage %d: group %d goes to task %d of %d", e, st, g, o, n)
					}
				}
			}
		}
	})
}
