package rainstorm

import (
	"reflect"
	"slices"
	"testing"
)

func recs(rows ...[]string) []Record {
	out := make([]Record, len(rows))
	for i, r := range rows {
		out[i] = Record{ID: uint64(i), Fields: r}
	}
	return out
}

func compileStage(t *testing.T, header []string, st Stage) *CompiledStage {
	t.Helper()
	p, err := Compile(&Spec{Source: Source{Path: "/in", Header: header != nil}, Stages: []Stage{st}}, header)
	if err != nil {
		t.Fatal(err)
	}
	return p.Stages[0]
}

func apply(t *testing.T, cs *CompiledStage, in []Record) ([]Record, []error) {
	t.Helper()
	tr, err := cs.NewTransform()
	if err != nil {
		t.Fatal(err)
	}
	var bad []error
	in = slices.Clone(in)
	for i := range in {
		in[i] = cs.Narrow(in[i]) // as the stage's tasks receive them
	}
	out, err := tr.Apply(in, nil, func(e error) { bad = append(bad, e) })
	if err != nil {
		t.Fatal(err)
	}
	return out, bad
}

func TestBuiltinTransforms(t *testing.T) {
	h := []string{"a", "b", "c"}
	in := recs([]string{"x", "Punched Telespar", "1"}, []string{"y", "U-Channel", "2"}, []string{"z", "with,comma", "3"}, []string{"short"})
	eq := "U-Channel"
	for _, tc := range []struct {
		st   Stage
		want [][]string
		bad  int
	}{
		{Stage{Name: "f", Op: OpFilter, Field: "b", Equals: &eq}, [][]string{{"y", "U-Channel", "2"}}, 1},
		{Stage{Name: "f", Op: OpFilter, Field: "b", Matches: "^Punched"}, [][]string{{"x", "Punched Telespar", "1"}}, 1},
		// Whole-record matches see the record as a CSV line, quotes included.
		{Stage{Name: "f", Op: OpFilter, Matches: `^z,"with,comma",3$`}, [][]string{{"z", "with,comma", "3"}}, 0},
		{Stage{Name: "p", Op: OpProject, Fields: []string{"c", "a"}}, [][]string{{"1", "x"}, {"2", "y"}, {"3", "z"}}, 1},
		{Stage{Name: "r", Op: OpReplace, Field: "b", Pattern: `(\w+)-(\w+)`, With: "$2/$1"}, [][]string{{"x", "Punched Telespar", "1"}, {"y", "Channel/U", "2"}, {"z", "with,comma", "3"}}, 1},
	} {
		out, bad := apply(t, compileStage(t, h, tc.st), in)
		var got [][]string
		for _, r := range out {
			got = append(got, r.Fields)
		}
		if !reflect.DeepEqual(got, tc.want) || len(bad) != tc.bad {
			t.Errorf("%s %+v: got %q (bad %v), want %q (bad %d)", tc.st.Op, tc.st, got, bad, tc.want, tc.bad)
		}
	}
}

// TestSumExactInAnyOrder adds the same values in two orders: decimal sums
// must print identically (float64 addition would not).
func TestSumExactInAnyOrder(t *testing.T) {
	cs := compileStage(t, []string{"k", "v"}, Stage{Name: "s", Op: OpSum, Key: "k", Field: "v"})
	vals := []string{"0.1", "0.2", "0.3", "9223372036854775807", "5", "-1.25", "1e3", ""}
	var rows [][]string
	for _, v := range vals {
		rows = append(rows, []string{"a", v})
	}
	rows = append(rows, []string{"b", "7"}, []string{"b", "8"})
	in := recs(rows...)
	run := func(order []Record) ([]Record, int) {
		a, err := cs.NewAggregate()
		if err != nil {
			t.Fatal(err)
		}
		bad := 0
		a.Add(order, func(error) { bad++ })
		// Through a snapshot, as after a restart.
		b, _ := cs.NewAggregate()
		if err := b.Restore(a.Snapshot(), nil); err != nil {
			t.Fatal(err)
		}
		return b.Rows(), bad
	}
	fwd, bad := run(in)
	rev := make([]Record, len(in))
	for i := range in {
		rev[i] = in[len(in)-1-i]
	}
	back, _ := run(rev)
	want := [][]string{{"a", "9223372036854775811.35"}, {"b", "15"}}
	var got [][]string
	for _, r := range fwd {
		got = append(got, r.Fields)
	}
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(fwd, back) || bad != 2 {
		t.Fatalf("sum rows %q (reversed %v), bad %d; want %q, bad 2 (1e3 and empty)", got, back, bad, want)
	}
}

func TestCountRows(t *testing.T) {
	cs := compileStage(t, nil, Stage{Name: "c", Op: OpCount, Key: "2"})
	a, _ := cs.NewAggregate()
	in := recs([]string{"x", "b"}, []string{"y", "a"}, []string{"z", "b"}, []string{"w"})
	for i := range in {
		in[i] = cs.Narrow(in[i]) // the key alone, as the count's tasks receive it
	}
	a.Add(in, func(error) {})
	got := a.Rows()
	if len(got) != 2 || got[0].Fields[0] != "a" || got[0].Fields[1] != "1" || got[1].Fields[1] != "2" {
		t.Fatalf("rows %v", got)
	}
}

// Narrow hands a stage exactly the columns it and later stages read, in a
// compact record (whole width, the unread ones empty, after an exec and
// where a later stage may read any), from its sender's layout, and never
// changes its argument.
func TestNarrowKeepsWhatLaterStagesRead(t *testing.T) {
	h := []string{"a", "b", "c", "d"}
	eq := "x"
	compile := func(stages ...Stage) *Pipeline {
		t.Helper()
		p, err := Compile(&Spec{Source: Source{Path: "/in", Header: true}, Stages: stages}, h)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	filter := Stage{Name: "f", Op: OpFilter, Field: "b", Equals: &eq}
	in := Record{ID: 7, Fields: []string{"1", "2", "3", "4"}}
	for _, tc := range []struct {
		name string
		p    *Pipeline
		want [][]string // per stage, the record as that stage receives it
	}{
		{"filter→count", compile(filter, Stage{Name: "c", Op: OpCount, Key: "d"}),
			[][]string{{"2", "4"}, {"4"}}},
		{"filter→sum", compile(filter, Stage{Name: "s", Op: OpSum, Key: "a", Field: "c"}),
			[][]string{{"1", "2", "3"}, {"1", "3"}}},
		{"filter→filter→count", compile(filter, Stage{Name: "g", Op: OpFilter, Field: "c", Equals: &eq}, Stage{Name: "c", Op: OpCount, Key: "a"}),
			[][]string{{"1", "2", "3"}, {"1", "3"}, {"1"}}},
		{"filter outputs records", compile(filter),
			[][]string{{"1", "2", "3", "4"}}},
		{"project→count", compile(Stage{Name: "p", Op: OpProject, Fields: []string{"c", "a"}}, Stage{Name: "c", Op: OpCount, Key: "a"}),
			[][]string{{"1"}, {"1"}}},
		{"exec reads everything", compile(Stage{Name: "e", Op: OpExec, Command: []string{"cat"}}, Stage{Name: "c", Op: OpCount, Key: "1"}),
			[][]string{{"1", "2", "3", "4"}, {"1", "", "", ""}}},
		{"whole-record match", compile(Stage{Name: "f", Op: OpFilter, Matches: "x"}, Stage{Name: "c", Op: OpCount, Key: "d"}),
			[][]string{{"1", "2", "3", "4"}, {"4"}}},
	} {
		// Each stage receives the stage before's output as its sender
		// narrows it (a filter passes its record on, exec here too, a
		// project its projection).
		rec := in
		for i, cs := range tc.p.Stages {
			got := cs.Narrow(rec)
			if !reflect.DeepEqual(got.Fields, tc.want[i]) || got.ID != 7 {
				t.Errorf("%s: stage %d receives %q, want %q", tc.name, i, got.Fields, tc.want[i])
			}
			rec = got
			if cs.Op == OpProject {
				out, err := (&builtin{cs: cs}).Apply([]Record{got}, nil, func(err error) { t.Fatal(err) })
				if err != nil || len(out) != 1 {
					t.Fatalf("%s: project gave %v, %v", tc.name, out, err)
				}
				rec = out[0]
			}
		}
		if !reflect.DeepEqual(in.Fields, []string{"1", "2", "3", "4"}) {
			t.Fatalf("%s: Narrow changed its argument: %q", tc.name, in.Fields)
		}
	}
}
