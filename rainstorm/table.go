package rainstorm

import (
	"cmp"
	"fmt"
	"slices"

	"tempest/wire"
)

// GroupTable is a stage's explicit key group → task table: entry g is the
// task that owns group g. A stage's first table is the contiguous layout
// (GroupTask); each resize derives the next table from the one before
// with Rebalance, so the table of any epoch is a function of the epochs'
// task counts alone and every task computes the same one.
type GroupTable []int

// ContiguousTable is the table of a stage of tasks tasks before any
// resize: task i owns TaskGroups(i, tasks).
func ContiguousTable(tasks int) GroupTable {
	t := make(GroupTable, KeyGroups)
	for g := range t {
		t[g] = GroupTask(g, tasks)
	}
	return t
}

// Counts returns how many groups each of tasks tasks owns.
func (t GroupTable) Counts(tasks int) []int {
	n := make([]int, tasks)
	for _, o := range t {
		if o < tasks {
			n[o]++
		}
	}
	return n
}

// Owned returns the groups task owns, in group order.
func (t GroupTable) Owned(task int) []int {
	var gs []int
	for g, o := range t {
		if o == task {
			gs = append(gs, g)
		}
	}
	return gs
}

// Rebalance returns the table of the stage resized to tasks tasks, moving
// the fewest groups: every task keeps as many of its groups as its share
// allows (the lowest-numbered ones), and only the groups over a task's
// share, or of a task that goes away, move, to the tasks under their
// share. Shares differ by at most one group; the tasks that already hold
// the most get the larger ones. Growing 3 → 4 moves 32 of 128 groups
// (a quarter), where recomputing contiguous ranges would move 64.
func Rebalance(prev GroupTable, tasks int) GroupTable {
	if tasks < 1 || tasks > KeyGroups {
		panic(fmt.Sprintf("rainstorm: rebalance to %d tasks", tasks))
	}
	held := prev.Counts(tasks)
	order := make([]int, tasks)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(held[b], held[a]) })
	share := make([]int, tasks)
	for k, i := range order {
		share[i] = KeyGroups / tasks
		if k < KeyGroups%tasks {
			share[i]++
		}
	}
	next := make(GroupTable, KeyGroups)
	kept := make([]int, tasks)
	var free []int
	for g, o := range prev {
		if o < tasks && kept[o] < share[o] {
			next[g] = o
			kept[o]++
			continue
		}
		free = append(free, g)
	}
	i := 0
	for _, g := range free {
		for kept[i] == share[i] {
			i++
		}
		next[g] = i
		kept[i]++
	}
	return next
}

// Moved counts the groups whose owner differs between two tables.
func Moved(a, b GroupTable) int {
	n := 0
	for g := range a {
		if a[g] != b[g] {
			n++
		}
	}
	return n
}

// Tables holds every stage's table at every epoch of a pipeline: the
// fold of Rebalance over the epochs' task counts.
type Tables struct {
	epochs []wire.RainstormEpoch
	tables [][]GroupTable // [epoch][stage-1]
}

// NewTables computes the tables of the epochs given, oldest first; the
// first is the pipeline's start (epoch 0, segment 0).
func NewTables(epochs []wire.RainstormEpoch) (*Tables, error) {
	t := &Tables{}
	for _, e := range epochs {
		if err := t.Add(e); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// Add appends the next epoch's tables.
func (t *Tables) Add(e wire.RainstormEpoch) error {
	if int(e.Epoch) != len(t.epochs) {
		return fmt.Errorf("rainstorm: epoch %d follows %d epochs", e.Epoch, len(t.epochs))
	}
	if len(t.epochs) > 0 {
		last := t.epochs[len(t.epochs)-1]
		if len(e.Tasks) != len(last.Tasks) || e.Segment <= last.Segment {
			return fmt.Errorf("rainstorm: epoch %d (segment %d, %d stages) does not follow epoch %d (segment %d, %d stages)",
				e.Epoch, e.Segment, len(e.Tasks), last.Epoch, last.Segment, len(last.Tasks))
		}
	}
	row := make([]GroupTable, len(e.Tasks))
	for s, n := range e.Tasks {
		if n < 1 || n > KeyGroups {
			return fmt.Errorf("rainstorm: epoch %d gives stage %d %d tasks", e.Epoch, s+1, n)
		}
		if len(t.tables) == 0 {
			row[s] = ContiguousTable(n)
		} else {
			row[s] = Rebalance(t.tables[len(t.tables)-1][s], n)
		}
	}
	t.epochs = append(t.epochs, e)
	t.tables = append(t.tables, row)
	return nil
}

// Len is the number of epochs known.
func (t *Tables) Len() int { return len(t.epochs) }

// Epoch returns epoch e's record.
func (t *Tables) Epoch(e int) wire.RainstormEpoch { return t.epochs[e] }

// Epochs returns the records, oldest first (shared: do not change).
func (t *Tables) Epochs() []wire.RainstormEpoch { return t.epochs }

// Table returns stage's table at epoch e (stages count from 1).
func (t *Tables) Table(e, stage int) GroupTable { return t.tables[e][stage-1] }

// Tasks returns how many tasks stage has at epoch e; the source (stage 0)
// is one task.
func (t *Tables) Tasks(e, stage int) int {
	if stage == 0 {
		return 1
	}
	return t.epochs[e].Tasks[stage-1]
}

// StartEpochs is the epoch list of a pipeline that has not resized: epoch
// 0 with the stages' task counts.
func StartEpochs(p *Pipeline) []wire.RainstormEpoch {
	tasks := make([]int, len(p.Stages))
	for i, cs := range p.Stages {
		tasks[i] = cs.TaskCount()
	}
	return []wire.RainstormEpoch{{Tasks: tasks}}
}

// SpecStartEpochs is StartEpochs of a spec as the managers store it
// (chained): epoch 0 with each stage's starting size.
func SpecStartEpochs(s *Spec) []wire.RainstormEpoch {
	tasks := make([]int, len(s.Stages))
	for i := range s.Stages {
		tasks[i] = s.Stages[i].TaskCount()
	}
	return []wire.RainstormEpoch{{Tasks: tasks}}
}

// RouteBy returns the task of this stage that rec goes to under table:
// by its key's group for a keyed stage, else by its input id's group.
func (cs *CompiledStage) RouteBy(rec *Record, table GroupTable) int {
	if cs.keyIdx >= 0 && cs.keyIdx < len(rec.Fields) {
		return table[KeyGroup(rec.Fields[cs.keyIdx])]
	}
	return table[IDGroup(rec.ID)]
}
