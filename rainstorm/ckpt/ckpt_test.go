package ckpt

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"tempest/wire"
)

// bigCheckpoint is a checkpoint of a task whose state, batches and rows
// together are far over budget, with one group alone larger than it.
func bigCheckpoint(rng *rand.Rand, budget int) *wire.RainstormCheckpoint {
	c := &wire.RainstormCheckpoint{Task: wire.RainstormTask{Job: "j", Workflow: "w", Stage: 2, Index: 1}, Incarnation: 7, Version: 9,
		Inputs: []wire.RainstormInput{{Next: 3}}, Outputs: []wire.RainstormOutput{{Next: 5, Acked: 2}}, Flushed: 3, RecordsIn: 11}
	for g := 0; g < KeyGroups; g += 1 + rng.IntN(3) {
		n := rng.IntN(400)
		if g == 5 {
			n = budget / 20 // alone over budget
		}
		gs := wire.RainstormGroupState{Group: g}
		for i := range n {
			gs.Entries = append(gs.Entries, wire.RainstormAggregate{Key: fmt.Sprintf("k%06d", i), Count: int64(i)})
		}
		c.Groups = append(c.Groups, gs)
	}
	for i := range 40 {
		c.PendingBlobs = append(c.PendingBlobs, wire.RainstormBatchBlob{To: i % 3, Seq: uint64(i + 3), Batch: make([]byte, budget/8)})
	}
	for i := range 3000 {
		c.Rows = append(c.Rows, wire.RainstormRecord{ID: uint64(i), Fields: []string{"row", fmt.Sprint(i)}})
	}
	return c
}

// A checkpoint over budget splits into parts each under it (encoded), and
// joins back to the same checkpoint.
func TestSplitJoin(t *testing.T) {
	const budget = 64 << 10
	rng := rand.New(rand.NewPCG(1, 2))
	c := bigCheckpoint(rng, budget)
	parts := Split(c, budget)
	if len(parts) < 10 {
		t.Fatalf("%d parts of a checkpoint of about %d bytes", len(parts), Size(c))
	}
	var j Joiner
	var got *wire.RainstormCheckpoint
	for i, p := range parts {
		b, err := wire.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > budget+budget/8 {
			t.Fatalf("part %d is %d bytes, over the budget of %d", i, len(b), budget)
		}
		if p.Part != i || p.More != (i < len(parts)-1) {
			t.Fatalf("part %d says part %d, more %v", i, p.Part, p.More)
		}
		var back wire.RainstormCheckpoint // as a receiver decodes it
		if err := wire.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		out, err := j.Add(&back)
		if err != nil {
			t.Fatal(err)
		}
		if (out != nil) != (i == len(parts)-1) {
			t.Fatalf("part %d of %d: joined %v", i, len(parts), out != nil)
		}
		got = out
	}
	want := *c
	if !reflect.DeepEqual(got, &want) {
		t.Fatalf("joined checkpoint differs: %d groups, %d blobs, %d rows; want %d, %d, %d",
			len(got.Groups), len(got.PendingBlobs), len(got.Rows), len(c.Groups), len(c.PendingBlobs), len(c.Rows))
	}
	if small := (&wire.RainstormCheckpoint{Version: 1}); Split(small, budget)[0] != small {
		t.Fatal("a checkpoint that fits was copied")
	}
}

// A part that does not follow the parts before is refused, and part 0
// starts afresh.
func TestJoinRefusesStrayParts(t *testing.T) {
	const budget = 64 << 10
	parts := Split(bigCheckpoint(rand.New(rand.NewPCG(3, 4)), budget), budget)
	var j Joiner
	if _, err := j.Add(parts[1]); err == nil {
		t.Fatal("part 1 without part 0 accepted")
	}
	if _, err := j.Add(parts[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Add(parts[2]); err == nil {
		t.Fatal("part 2 after part 0 accepted")
	}
	other := *parts[1]
	other.Version++
	if _, err := j.Add(parts[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Add(&other); err == nil {
		t.Fatal("a part of another version accepted")
	}
	bad := *parts[len(parts)-1]
	bad.Groups = []wire.RainstormGroupState{{Group: 2}}
	j = Joiner{}
	for _, p := range parts[:len(parts)-1] {
		if _, err := j.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := j.Add(&bad); err == nil {
		t.Fatal("groups out of order accepted")
	}
}

// Paged keeps small checkpoints together, gives a large one's parts pages
// of their own, every page under the cap, and joining in order gives back
// every checkpoint.
func TestPaged(t *testing.T) {
	const budget = 64 << 10
	rng := rand.New(rand.NewPCG(5, 6))
	small := func(v uint64) *wire.RainstormCheckpoint {
		return &wire.RainstormCheckpoint{Task: wire.RainstormTask{Stage: 1, Index: int(v)}, Incarnation: 1, Version: v}
	}
	big := bigCheckpoint(rng, budget)
	cs := []*wire.RainstormCheckpoint{small(1), small(2), big, small(3)}
	pages := Paged(cs, budget)
	if len(pages) < 10 || len(pages[0]) != 2 || len(pages[len(pages)-1]) < 2 {
		t.Fatalf("%d pages, the first of %d", len(pages), len(pages[0]))
	}
	var j Joiner
	var got []*wire.RainstormCheckpoint
	for i, page := range pages {
		b, err := wire.Marshal(&wire.RainstormReplicate{Term: 1, Checkpoints: derefs(page)})
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > budget+budget/8 {
			t.Fatalf("page %d is %d bytes", i, len(b))
		}
		for _, p := range page {
			c, err := j.Add(p)
			if err != nil {
				t.Fatal(err)
			}
			if c != nil {
				got = append(got, c)
			}
		}
	}
	if len(got) != len(cs) || !reflect.DeepEqual(got[2], big) || got[3].Version != 3 {
		t.Fatalf("joined %d checkpoints", len(got))
	}
}

func derefs(cs []*wire.RainstormCheckpoint) []wire.RainstormCheckpoint {
	out := make([]wire.RainstormCheckpoint, len(cs))
	for i, c := range cs {
		out[i] = *c
	}
	return out
}

// A rows-only record (a sync page's, a new leader's spread) names the
// incarnation whose checkpoint published its rows in RowsOf. Two such
// records of one version may sit side by side in a store (a replaced
// incarnation's and its successor's), so every part names RowsOf and a
// part of the other one is refused, never joined into these rows.
func TestJoinRowsOnlyRecordKeepsItsIncarnation(t *testing.T) {
	const budget = 64 << 10
	c := &wire.RainstormCheckpoint{Task: wire.RainstormTask{Job: "j", Workflow: "w", Stage: 2}, Version: 7, RowsOf: 3}
	for i := range 2000 {
		c.Rows = append(c.Rows, wire.RainstormRecord{ID: uint64(i), Fields: []string{fmt.Sprintf("row-%04d-%s", i, strings.Repeat("x", 60))}})
	}
	parts := Split(c, budget)
	if len(parts) < 2 {
		t.Fatalf("%d parts: the test's premise is a record split", len(parts))
	}
	for i, p := range parts {
		if p.RowsOf != 3 {
			t.Fatalf("part %d names rows of incarnation %d, want 3", i, p.RowsOf)
		}
	}
	var j Joiner
	if _, err := j.Add(parts[0]); err != nil {
		t.Fatal(err)
	}
	other := *parts[1]
	other.RowsOf = 2
	if _, err := j.Add(&other); err == nil {
		t.Fatal("a part of another incarnation's rows joined")
	}
	j = Joiner{}
	var whole *wire.RainstormCheckpoint
	for _, p := range parts {
		w, err := j.Add(p)
		if err != nil {
			t.Fatal(err)
		}
		whole = w
	}
	if whole == nil || whole.RowsOf != 3 || !reflect.DeepEqual(whole.Rows, c.Rows) {
		t.Fatal("the joined rows-only record is not the one split")
	}
}
