package jobs

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"tempest/wire"
)

// Before the job model, shard groups were worked out in four places by three
// rules. They are kept here, as they were, to show that each former caller
// gets from Groups what it got before on every job a role accepts.

// formerManagerGroups: manager/shards.go shardGroups (statuses, results): a
// spec with Shards > 1 starts a run over the following specs of its name
// and Shards.
func formerManagerGroups(specs []wire.WorkflowSpec) [][]int {
	var out [][]int
	for i := 0; i < len(specs); {
		j := i + 1
		if specs[i].Shards > 1 {
			for j < len(specs) && specs[j].Name == specs[i].Name && specs[j].Shards == specs[i].Shards {
				j++
			}
		}
		out = append(out, span(i, j))
		i = j
	}
	return out
}

// formerGateGroups: gate jobStatus and abortReason: every spec is a group
// but a shard after the first of its name, and a group's parts are every
// report of its name.
func formerGateGroups(specs []wire.WorkflowSpec) [][]int {
	var out [][]int
	for i, spec := range specs {
		if spec.Shard > 1 && i > 0 && specs[i-1].Name == spec.Name {
			continue
		}
		out = append(out, byName(specs, spec.Name))
	}
	return out
}

// formerManagerSiblings: manager siblingWorkersLocked (placement) and
// checkAbortLocked (mid-run thresholds): a spec with Shards > 1 goes with
// every spec of its name, any other stands alone.
func formerManagerSiblings(specs []wire.WorkflowSpec, i int) []int {
	if specs[i].Shards < 2 {
		return []int{i}
	}
	return byName(specs, specs[i].Name)
}

func byName(specs []wire.WorkflowSpec, name string) []int {
	var out []int
	for i, s := range specs {
		if s.Name == name {
			out = append(out, i)
		}
	}
	return out
}

func span(from, to int) []int {
	out := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func one(name string) wire.WorkflowSpec { return wire.WorkflowSpec{Name: name, Type: "sleep"} }

// split is a workflow split into n shards.
func split(name string, n int) []wire.WorkflowSpec {
	out := make([]wire.WorkflowSpec, n)
	for i := range out {
		out[i] = wire.WorkflowSpec{Name: name, Type: "http", Shard: i + 1, Shards: n}
	}
	return out
}

func specs(parts ...any) []wire.WorkflowSpec {
	var out []wire.WorkflowSpec
	for _, p := range parts {
		switch p := p.(type) {
		case wire.WorkflowSpec:
			out = append(out, p)
		case []wire.WorkflowSpec:
			out = append(out, p...)
		}
	}
	return out
}

func TestGroupsAgreeWithFormerRules(t *testing.T) {
	for _, tc := range []struct {
		name  string
		specs []wire.WorkflowSpec
		want  [][]int
	}{
		{"one workflow", specs(one("a")), [][]int{{0}}},
		{"workflows alone", specs(one("a"), one("b"), one("c")), [][]int{{0}, {1}, {2}}},
		{"one split", specs(split("w", 3)), [][]int{{0, 1, 2}}},
		{"a split between others", specs(one("a"), split("w", 2), one("b")), [][]int{{0}, {1, 2}, {3}}},
		{"splits side by side", specs(split("w", 2), split("v", 3)), [][]int{{0, 1}, {2, 3, 4}}},
		{"most shards", specs(split("w", 64)), [][]int{span(0, 64)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if errs := checkShape(tc.specs); len(errs) > 0 {
				t.Fatalf("a valid shape refused: %v", errs)
			}
			var got [][]int
			for _, g := range Groups(tc.specs) {
				got = append(got, span(g.Start, g.End))
			}
			if !equal(got, tc.want) {
				t.Fatalf("Groups = %v, want %v", got, tc.want)
			}
			if former := formerManagerGroups(tc.specs); !equal(got, former) {
				t.Errorf("manager statuses grouped %v, Groups %v", former, got)
			}
			if former := formerGateGroups(tc.specs); !equal(got, former) {
				t.Errorf("gate statuses and aborts grouped %v, Groups %v", former, got)
			}
			for i := range tc.specs {
				g := GroupOf(tc.specs, i)
				if former := formerManagerSiblings(tc.specs, i); !slices.Equal(span(g.Start, g.End), former) {
					t.Errorf("spec %d: manager placement and aborts took %v with it, GroupOf %v", i, former, span(g.Start, g.End))
				}
			}
		})
	}
}

// Where the former rules disagreed, the job is one Validate refuses, so no
// role ever grouped it: the disagreement never showed.
func TestFormerRulesDifferOnlyOnRefusedShapes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		specs []wire.WorkflowSpec
	}{
		{"two splits of one name", specs(split("w", 2), split("w", 2))},
		{"a workflow named like a split", specs(split("w", 2), one("w"))},
		{"shards out of order", []wire.WorkflowSpec{split("w", 2)[1], split("w", 2)[0]}},
		{"a shard missing", split("w", 3)[:2]},
		{"one shard", []wire.WorkflowSpec{{Name: "w", Shard: 1, Shards: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if errs := checkShape(tc.specs); len(errs) == 0 {
				t.Fatal("shape accepted")
			}
			var got [][]int
			for _, g := range Groups(tc.specs) {
				got = append(got, span(g.Start, g.End))
			}
			t.Logf("Groups %v; former: manager %v, gate %v", got, formerManagerGroups(tc.specs), formerGateGroups(tc.specs))
		})
	}
}

func equal(a, b [][]int) bool {
	return slices.EqualFunc(a, b, func(x, y []int) bool { return slices.Equal(x, y) })
}

func TestCanonicalize(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var n uint64
	next := func() uint64 { n++; return n }
	j := Job{}
	j.Canonicalize(now, next)
	if j.JobID != "j-0000000000000001" || j.Timeout != DefaultTimeout || j.SubmittedAt != now.UnixNano() {
		t.Fatalf("canonical %+v", j)
	}
	// Again, on another role: nothing a submission carries changes.
	before := fmt.Sprintf("%+v", j)
	j.Canonicalize(now.Add(1e9), next)
	if after := fmt.Sprintf("%+v", j); after != before || n != 1 {
		t.Fatalf("second Canonicalize changed %s to %s (ids drawn %d)", before, after, n)
	}
}

// Any shape a client sends: the shape check never panics (it once read
// specs[-1]), and on every shape it accepts, Groups agrees with each former
// rule.
func FuzzGroupsOnAcceptedShapes(f *testing.F) {
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{1, 1, 2, 1, 2, 2})
	f.Add([]byte{1, 2, 2, 1, 1, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		var specs []wire.WorkflowSpec
		for i := 0; i+2 < len(b) && len(specs) < 16; i += 3 {
			specs = append(specs, wire.WorkflowSpec{Name: string(rune('a' + b[i]%3)), Shard: int(b[i+1] % 5), Shards: int(b[i+2] % 5)})
		}
		if len(checkShape(specs)) > 0 {
			return
		}
		var got [][]int
		for _, g := range Groups(specs) {
			got = append(got, span(g.Start, g.End))
		}
		if former := formerManagerGroups(specs); !equal(got, former) {
			t.Fatalf("%+v: manager rule %v, Groups %v", specs, former, got)
		}
		if former := formerGateGroups(specs); !equal(got, former) {
			t.Fatalf("%+v: gate rule %v, Groups %v", specs, former, got)
		}
		for i := range specs {
			g := GroupOf(specs, i)
			if former := formerManagerSiblings(specs, i); !slices.Equal(span(g.Start, g.End), former) {
				t.Fatalf("%+v: spec %d: siblings rule %v, GroupOf %v", specs, i, former, span(g.Start, g.End))
			}
		}
	})
}
