package rainstorm

import (
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"tempest/wire"
)

// Aggregate is a count or sum stage's per-key state in one task, kept key
// group by key group (the groups routing assigns): the unit a checkpoint
// composes, a resize would move and a combiner would pre-aggregate. Sums
// are exact (integers in an int64 until they overflow, else rationals), so
// the order in which records arrive — which differs between runs — cannot
// change a result.
type Aggregate struct {
	cs     *CompiledStage
	groups [KeyGroups]map[string]*aggValue
	// changed lists, per group, the keys changed since the last Delta, so
	// that a checkpoint carries what changed rather than every key.
	changed [KeyGroups][]string
	// changedBytes estimates the encoded size of the next Delta.
	changedBytes int
}

// NewAggregate returns the state of an aggregate stage for one task.
func (cs *CompiledStage) NewAggregate() (*Aggregate, error) {
	if !cs.Op.Aggregate() {
		return nil, fmt.Errorf("stage %s: %s is not an aggregate", cs.Name, cs.Op)
	}
	return &Aggregate{cs: cs}, nil
}

// value returns key's entry, created (and its group's map) when new.
func (a *Aggregate) value(key string) (*aggValue, int) {
	g := KeyGroup(key)
	m := a.groups[g]
	if m == nil {
		m = map[string]*aggValue{}
		a.groups[g] = m
	}
	v := m[key]
	if v == nil {
		v = &aggValue{}
		// A copy: a received batch's fields share one string, which a
		// key kept from it would hold whole for the task's life.
		m[strings.Clone(key)] = v
	}
	return v, g
}

// touch records that key's value changed since the last Delta.
func (a *Aggregate) touch(key string, v *aggValue, g int) {
	if !v.changed {
		v.changed = true
		a.changed[g] = append(a.changed[g], key)
		a.changedBytes += 24 + len(key)
	}
}

// Add folds in records; a record without the key or with a sum field that
// is not a decimal number goes to bad.
func (a *Aggregate) Add(in []Record, bad func(error)) {
	cs := a.cs
	if cs.merge {
		a.mergeAdd(in, bad)
		return
	}
	for i := range in {
		rec := &in[i]
		if cs.keyIdx >= len(rec.Fields) || cs.fieldIdx >= len(rec.Fields) {
			bad(&FieldError{Stage: cs.Name, Record: rec.ID, Msg: fmt.Sprintf("has %d fields, too few for key %s", len(rec.Fields), cs.Key)})
			continue
		}
		key := rec.Fields[cs.keyIdx]
		if cs.Op == OpSum {
			text := strings.TrimSpace(rec.Fields[cs.fieldIdx])
			// Checked before the entry exists, so a bad first value
			// leaves no key behind.
			if err := checkAddend(text); err != nil {
				bad(&FieldError{Stage: cs.Name, Record: rec.ID, Msg: fmt.Sprintf("field %s: %v", cs.Field, err)})
				continue
			}
			v, g := a.value(key)
			_ = v.add(text) // checked above
			v.count++
			a.touch(key, v, g)
			continue
		}
		v, g := a.value(key)
		v.count++
		a.touch(key, v, g)
	}
}

// checkAddend reports whether add would refuse text.
func checkAddend(text string) error {
	if _, err := strconv.ParseInt(text, 10, 64); err == nil {
		return nil
	}
	if !isDecimal(text) {
		return fmt.Errorf("%q is not a decimal number", truncate(text, 40))
	}
	return nil
}

func (a *Aggregate) entry(key string, v *aggValue) wire.RainstormAggregate {
	e := wire.RainstormAggregate{Key: key, Count: v.count}
	if a.cs.Op == OpSum {
		e.Sum = v.text()
	}
	return e
}

func sortEntries(es []wire.RainstormAggregate) {
	slices.SortFunc(es, func(x, y wire.RainstormAggregate) int { return strings.Compare(x.Key, y.Key) })
}

// Delta returns the entries changed since the previous Delta, per group
// in group order and sorted by key within a group, and starts the next
// delta: what one checkpoint carries.
func (a *Aggregate) Delta() []wire.RainstormGroupState {
	var out []wire.RainstormGroupState
	for g := range a.changed {
		keys := a.changed[g]
		if len(keys) == 0 {
			continue
		}
		es := make([]wire.RainstormAggregate, len(keys))
		for i, k := range keys {
			v := a.groups[g][k]
			v.changed = false
			es[i] = a.entry(k, v)
		}
		sortEntries(es)
		out = append(out, wire.RainstormGroupState{Group: g, Entries: es})
		a.changed[g] = keys[:0]
	}
	a.changedBytes = 0
	return out
}

// DeltaBytes estimates the encoded size of the next Delta.
func (a *Aggregate) DeltaBytes() int { return a.changedBytes }

// Snapshot returns the whole state per group, for a store to compare with
// what it composed from deltas.
func (a *Aggregate) Snapshot() []wire.RainstormGroupState {
	var out []wire.RainstormGroupState
	for g := range a.groups {
		if es := a.groupEntries(g); len(es) > 0 {
			out = append(out, wire.RainstormGroupState{Group: g, Entries: es})
		}
	}
	return out
}

func (a *Aggregate) groupEntries(g int) []wire.RainstormAggregate {
	es := make([]wire.RainstormAggregate, 0, len(a.groups[g]))
	for k, v := range a.groups[g] {
		es = append(es, a.entry(k, v))
	}
	sortEntries(es)
	return es
}

// Restore replaces the state with a checkpoint's: its groups, and the
// single list older checkpoints kept (state). Entries from groups do not
// count as changed; entries from the old list do, so the next checkpoint
// carries them into groups (a store composing groups keeps no old list).
func (a *Aggregate) Restore(groups []wire.RainstormGroupState, state []wire.RainstormAggregate) error {
	a.groups = [KeyGroups]map[string]*aggValue{}
	a.changed = [KeyGroups][]string{}
	a.changedBytes = 0
	put := func(e wire.RainstormAggregate) (*aggValue, int, error) {
		v, g := a.value(e.Key)
		*v = aggValue{count: e.Count}
		if a.cs.Op == OpSum {
			if err := v.add(e.Sum); err != nil {
				return nil, 0, fmt.Errorf("restore sum of %q: %w", e.Key, err)
			}
		}
		return v, g, nil
	}
	for _, e := range state {
		v, g, err := put(e)
		if err != nil {
			return err
		}
		a.touch(e.Key, v, g)
	}
	for _, gs := range groups {
		for _, e := range gs.Entries {
			if g := KeyGroup(e.Key); g != gs.Group {
				return fmt.Errorf("restore: key %q is in group %d, not %d", truncate(e.Key, 40), g, gs.Group)
			}
			if _, _, err := put(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// GroupRows returns the final rows, key and value, of groups [lo, hi): in
// group order, by key within a group. A row's id is its group and its
// place in the group, so the rows of a group have the same ids however
// the groups are emitted.
func (a *Aggregate) GroupRows(lo, hi int) []Record {
	var out []Record
	for g := lo; g < hi; g++ {
		for i, e := range a.groupEntries(g) {
			val := strconv.FormatInt(e.Count, 10)
			if a.cs.Op == OpSum {
				val = e.Sum
			}
			out = append(out, Record{ID: uint64(g)<<32 | uint64(i), Fields: []string{e.Key, val}})
		}
	}
	return out
}

// Rows returns every final row sorted by key and numbered in that order:
// the form of the sequential pass and of a pipeline's output (SortRows).
func (a *Aggregate) Rows() []Record {
	rows := a.GroupRows(0, KeyGroups)
	slices.SortFunc(rows, func(x, y Record) int { return strings.Compare(x.Fields[0], y.Fields[0]) })
	for i := range rows {
		rows[i].ID = uint64(i)
	}
	return rows
}

// FlushEnd returns where the next step of a final flush from group lo
// ends: groups up to about rows rows and MaxDeltaBytes of keys (at least
// one group), so that one checkpoint's share of the final output stays
// well under a message.
func (a *Aggregate) FlushEnd(lo, rows int) int {
	n, size, hi := 0, 0, lo
	for hi < KeyGroups {
		gs := 0
		for k := range a.groups[hi] {
			gs += 24 + len(k)
		}
		if hi > lo && (n+len(a.groups[hi]) > rows || size+gs > MaxDeltaBytes) {
			break
		}
		n += len(a.groups[hi])
		size += gs
		hi++
	}
	return hi
}

type aggValue struct {
	count   int64
	n       int64    // integer sum while it fits and every value was an integer
	rat     *big.Rat // the sum once a value had a fraction or n overflowed
	scale   int      // most digits after the decimal point seen
	changed bool     // listed in Aggregate.changed
}
