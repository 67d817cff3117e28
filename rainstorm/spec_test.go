package rainstorm

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"tempest/internal/jobfile"
	"tempest/internal/testutil"
	"tempest/wire"
	"tempest/workflow"
)

// specType puts Parse behind jobfile as the runtime will, so the tests see
// the line-numbered problems a user sees.
type specType struct{ opts ParseOptions }

func (specType) Name() string                                   { return TypeName }
func (t specType) ParseParams(f *workflow.Fields) []byte        { return Parse(f, t.opts) }
func (specType) New(wire.WorkflowSpec) (workflow.Runner, error) { return nil, errors.New("no runner") }
func (specType) DecodeParams(b []byte) (workflow.Params, error) {
	s, err := DecodeSpec(b)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func parseJob(t *testing.T, src string, opts ParseOptions) (*Spec, error) {
	t.Helper()
	reg := workflow.NewRegistry()
	if err := reg.Register(specType{opts}); err != nil {
		t.Fatal(err)
	}
	sub, err := jobfile.Parse([]byte(src), "job.yaml", reg)
	if err != nil {
		return nil, err
	}
	return DecodeSpec(sub.Workflows[0].Params)
}

// openShared opens files named by a job file from the shared data folder.
func openShared(tb testing.TB) func(name string) (io.ReadCloser, error) {
	dir := filepath.Dir(testutil.SharedData(tb, fullCSV))
	return func(name string) (io.ReadCloser, error) {
		return os.Open(filepath.Join(dir, filepath.FromSlash(name)))
	}
}

const telespar = `name: telespar
timeout: 300s
workflows:
  - name: by-category
    type: rainstorm
    source: {file: traffic_signs_full.csv, format: csv, header: true}
    stages:
      - {name: telespar, op: filter, tasks: 3, field: Sign_Post, equals: "Punched Telespar"}
      - {name: count, op: count, tasks: 3, key: Category}
`

func TestParseSpecIssueExample(t *testing.T) {
	s, err := parseJob(t, telespar, ParseOptions{OpenFile: openShared(t)})
	if err != nil {
		t.Fatal(err)
	}
	eq := "Punched Telespar"
	want := &Spec{
		Source: Source{File: "traffic_signs_full.csv", Format: FormatCSV, Header: true},
		Stages: []Stage{
			{Name: "telespar", Op: OpFilter, Tasks: 3, Field: "Sign_Post", Equals: &eq},
			{Name: "count", Op: OpCount, Tasks: 3, Key: "Category"},
		},
	}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("spec\n got %+v\nwant %+v", s, want)
	}
}

func TestParseSpecEveryOp(t *testing.T) {
	src := `name: all
workflows:
  - name: p
    type: rainstorm
    exactly_once: false
    on_bad_record: fail
    source: {path: /data/in.csv}
    stages:
      - {name: a, op: filter, matches: "Telespar"}
      - {name: b, op: filter, field: "7", matches: "^Punched"}
      - {name: c, op: replace, field: "9", pattern: "[aeiou]", with: "_"}
      - {name: d, op: project, fields: ["3", "9"]}
      - {name: e, op: exec, command: "./upper.sh --x"}
      - {name: f, op: sum, key: "1", field: "2", tasks: 2}
`
	s, err := parseJob(t, src, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !s.AtLeastOnce || !s.FailOnBadRecord || s.Source.Path != "/data/in.csv" || len(s.Stages) != 6 {
		t.Fatalf("spec %+v", s)
	}
	if got := s.Stages[4].Command; !reflect.DeepEqual(got, []string{"./upper.sh", "--x"}) {
		t.Fatalf("command %q", got)
	}
	if s.Stages[0].Equals != nil || s.Stages[0].Matches != "Telespar" || s.Stages[5].TaskCount() != 2 {
		t.Fatalf("stages %+v", s.Stages)
	}
}

func TestParseSpecGenerate(t *testing.T) {
	src := `name: gen
workflows:
  - name: g
    type: rainstorm
    source: {generate: {records: 1000, rate: 500, keys: 7}}
    stages: [{name: c, op: count, key: key}]
`
	s, err := parseJob(t, src, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if g := s.Source.Generate; g == nil || !reflect.DeepEqual(*g, Generate{Records: 1000, Rate: 500, Keys: 7}) {
		t.Fatalf("generate %+v", s.Source.Generate)
	}
}

// TestParseSpecProblems checks each bad input is reported at its line with
// its path.
func TestParseSpecProblems(t *testing.T) {
	testutil.SharedData(t, fullCSV)
	head := "name: bad\nworkflows:\n  - name: p\n    type: rainstorm\n"
	for _, tc := range []struct {
		name, body string
		line       int
		want       string
	}{
		{"unknown op", "    source: {path: /x}\n    stages:\n      - {name: a, op: grep}\n", 7, `stages[0].op: unknown op "grep"`},
		{"tasks zero", "    source: {path: /x}\n    stages:\n      - {name: a, op: count, key: k,\n         tasks: 0}\n", 8, "stages[0].tasks: must be between 1 and 64, got 0"},
		{"bad regex", "    source: {path: /x}\n    stages:\n      - {name: a, op: filter, matches: \"(\"}\n", 7, "stages[0].matches: bad regular expression"},
		{"unknown field", "    source: {path: /x}\n    stages:\n      - {name: a, op: count, key: k, colour: red}\n", 7, `unknown key "colour"`},
		{"other op's key", "    source: {path: /x}\n    stages:\n      - {name: a, op: count, key: k, pattern: x}\n", 7, `unknown key "pattern"`},
		{"key not in header", "    source: {file: traffic_signs_full.csv, header: true}\n    stages:\n      - {name: a, op: filter, field: Sign_Post, equals: x}\n      - {name: b, op: count, key: Categroy}\n", 8, `stages[1].key: field "Categroy" is not in the input's columns (X, Y, OBJECTID`},
		{"field gone after project", "    source: {file: traffic_signs_full.csv, header: true}\n    stages:\n      - {name: a, op: project, fields: [Category]}\n      - {name: b, op: filter, field: Sign_Post, equals: x}\n", 8, `stages[1].field: field "Sign_Post" is not in the input's columns (Category)`},
		{"no header: names are numbers", "    source: {path: /x}\n    stages:\n      - {name: a, op: count, key: Category}\n", 7, "fields are named by column number from 1"},
		{"aggregate not last", "    source: {path: /x}\n    stages:\n      - {name: a, op: count, key: \"1\"}\n      - {name: b, op: filter, matches: x}\n", 7, "count must be the last stage"},
		{"two sources", "    source: {path: /x, file: y.csv}\n    stages: [{name: a, op: count, key: \"1\"}]\n", 5, "exactly one of file, path or generate"},
		{"relative path", "    source: {path: x.csv}\n    stages: [{name: a, op: count, key: \"1\"}]\n", 5, "source.path: must be an absolute path"},
		{"equals and matches", "    source: {path: /x}\n    stages:\n      - {name: a, op: filter, field: \"1\", equals: a, matches: b}\n", 7, "give equals or matches, not both"},
		{"bad policy", "    on_bad_record: ignore\n    source: {path: /x}\n    stages: [{name: a, op: count, key: \"1\"}]\n", 5, "on_bad_record: must be skip or fail"},
		{"duplicate stage", "    source: {path: /x}\n    stages:\n      - {name: a, op: filter, matches: x}\n      - {name: a, op: filter, matches: y}\n", 8, `duplicate stage name "a"`},
		{"missing program", "    source: {path: /x}\n    stages:\n      - {name: a, op: exec, command: /no/such/program}\n", 7, `program "/no/such/program"`},
		{"unreadable file", "    source: {file: nope.csv, header: true}\n    stages: [{name: a, op: count, key: \"1\"}]\n", 5, "source.file: cannot read"},
		{"no stages", "    source: {path: /x}\n", 3, "stages: is required"},
		{"split zero", "    source: {path: /x, split: 0}\n    stages: [{name: a, op: count, key: \"1\"}]\n", 5, "source.split: must be between 1 and 16, got 0"},
		{"split generate", "    source: {generate: {records: 10}, split: 2}\n    stages: [{name: a, op: count, key: key}]\n", 5, "source.split: applies to a file or path input"},
		{"split autoscale", "    source: {path: /x, split: 2}\n    stages: [{name: a, op: count, key: \"1\", autoscale: {min: 1, max: 2, low: 1, high: 2}}]\n", 5, "source.split: a split source cannot be combined with autoscale"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := ParseOptions{OpenFile: openShared(t), LookCommand: func(name string) error {
				_, err := os.Stat(name)
				return err
			}}
			_, err := parseJob(t, head+tc.body, opts)
			var je *jobfile.Error
			if !errors.As(err, &je) {
				t.Fatalf("error %v, want a *jobfile.Error", err)
			}
			for _, p := range je.Problems {
				if p.Line == tc.line && strings.Contains(p.String(), tc.want) {
					return
				}
			}
			t.Fatalf("problems:\n%v\nwant at line %d: %s", err, tc.line, tc.want)
		})
	}
}

func TestDecodeSpecRefusesInvalid(t *testing.T) {
	b, err := wire.Marshal(&Spec{Source: Source{Path: "relative"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeSpec(b); err == nil {
		t.Fatal("invalid params decoded")
	}
	if _, err := DecodeSpec([]byte{0xff}); err == nil {
		t.Fatal("garbage decoded")
	}
}

func FuzzDecodeSpec(f *testing.F) {
	b, _ := wire.Marshal(&Spec{Source: Source{Path: "/x"}, Stages: []Stage{{Name: "a", Op: OpCount, Key: "1"}}})
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := DecodeSpec(data)
		if err == nil {
			if _, err := Compile(s, []string{"a", "b", "c"}); err != nil {
				return // a compile-time refusal is fine; a panic is not
			}
		}
	})
}

// TestExampleJobFiles parses every examples/rainstorm-*.yaml.
func TestExampleJobFiles(t *testing.T) {
	testutil.SharedData(t, fullCSV) // the examples' headers are checked against it
	paths, err := filepath.Glob("../examples/rainstorm-*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		reg := workflow.NewRegistry()
		if err := reg.Register(specType{ParseOptions{OpenFile: openShared(t)}}); err != nil {
			t.Fatal(err)
		}
		if _, err := jobfile.Parse(data, p, reg); err != nil {
			t.Errorf("%v", err)
		}
	}
}
