package rainstorm

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"tempest/wire"
	"tempest/workflow"
)

// TypeName is the job file's `type:` value for a pipeline.
const TypeName = "rainstorm"

// Limits of a pipeline spec.
const (
	MaxStages = 16
	MaxTasks  = 64
	// MaxGenerateRecords bounds a generate source.
	MaxGenerateRecords = 1 << 40
)

// Op names a stage's operator.
type Op string

// The operators.
const (
	OpFilter  Op = "filter"
	OpProject Op = "project"
	OpReplace Op = "replace"
	OpCount   Op = "count"
	OpSum     Op = "sum"
	OpExec    Op = "exec"
)

var allOps = []Op{OpFilter, OpProject, OpReplace, OpCount, OpSum, OpExec}

// Aggregate reports whether op keeps per-key state and emits rows at the
// end of input rather than records as they pass.
func (o Op) Aggregate() bool { return o == OpCount || o == OpSum }

// Generated records have these fields: the record's index, a key cycling
// through `keys` values, and a deterministic number.
var GenerateColumns = []string{"id", "key", "value"}

// Spec is a `type: rainstorm` workflow's params. It travels as CBOR inside
// wire.WorkflowSpec.Params; zero values mean "not set" (exactly-once, skip
// bad records, one task).
type Spec struct {
	Source Source  `cbor:"1,keyasint"`
	Stages []Stage `cbor:"2,keyasint"`
	// AtLeastOnce is `exactly_once: false`.
	AtLeastOnce bool `cbor:"3,keyasint,omitempty"`
	// FailOnBadRecord is `on_bad_record: fail`.
	FailOnBadRecord bool `cbor:"4,keyasint,omitempty"`
}

// Source is where a pipeline's records come from: exactly one of File (a
// file uploaded with the job, by the name the job file gives), Path (an
// absolute path on the worker running the source) or Generate.
type Source struct {
	File     string    `cbor:"1,keyasint,omitempty"`
	Path     string    `cbor:"2,keyasint,omitempty"`
	Generate *Generate `cbor:"3,keyasint,omitempty"`
	Format   Format    `cbor:"4,keyasint,omitempty"` // zero reads as csv
	Header   bool      `cbor:"5,keyasint,omitempty"`
	// Chain are the stateless stages Chained moved into the source task
	// (chain.go): never written in a job file, set at submit.
	Chain []Stage `cbor:"6,keyasint,omitempty"`
	// Split is `split`: a file or path input read by this many source
	// tasks, each a byte range of it (split.go); 0 means one.
	Split int `cbor:"7,keyasint,omitempty"`
}

// Splits is how many source tasks read the input: Split with its default
// of one.
func (s *Source) Splits() int { return max(s.Split, 1) }

// Generate makes Records synthetic records over Keys distinct keys at Rate
// records/s (0: as fast as the pipeline takes them).
type Generate struct {
	Records int64   `cbor:"1,keyasint"`
	Rate    float64 `cbor:"2,keyasint,omitempty"`
	Keys    int64   `cbor:"3,keyasint,omitempty"`
	// Stages ramps the rate as the http open model does (each stage
	// moves it linearly to its target over its duration; past the last,
	// the last target holds), instead of Rate. Records do not depend on
	// the rate, so a resent segment is the same whenever it is made.
	Stages []workflow.Stage `cbor:"4,keyasint,omitempty"`
}

// Stage is one step of the pipeline, run by Tasks tasks.
type Stage struct {
	Name  string `cbor:"1,keyasint"`
	Op    Op     `cbor:"2,keyasint"`
	Tasks int    `cbor:"3,keyasint,omitempty"`
	// Field is filter's, replace's and sum's field.
	Field string `cbor:"4,keyasint,omitempty"`
	// Equals is filter's exact value (nil when matching by pattern).
	Equals *string `cbor:"5,keyasint,omitempty"`
	// Matches is filter's regular expression (RE2 syntax).
	Matches string   `cbor:"6,keyasint,omitempty"`
	Fields  []string `cbor:"7,keyasint,omitempty"` // project
	Pattern string   `cbor:"8,keyasint,omitempty"` // replace
	With    string   `cbor:"9,keyasint,omitempty"` // replace
	Key     string   `cbor:"10,keyasint,omitempty"`
	Command []string `cbor:"11,keyasint,omitempty"` // exec: program and arguments
	// NoChain is `chain: false`: the stage runs in tasks of its own, never
	// chained into the source, and an aggregate gets no combiner.
	NoChain bool `cbor:"12,keyasint,omitempty"`
	// Combined marks an aggregate first stage fed by a combiner in the
	// source task: its input is (key, partial) records. Set by Chained.
	Combined bool `cbor:"13,keyasint,omitempty"`
	// Autoscale lets the stage's size follow its load (instead of Tasks).
	Autoscale *Autoscale `cbor:"14,keyasint,omitempty"`
}

// TaskCount is Tasks with its default of one.
// With autoscale, the stage starts at its minimum.
func (s *Stage) TaskCount() int {
	if s.Autoscale != nil && s.Tasks == 0 {
		return max(s.Autoscale.Min, 1)
	}
	return max(s.Tasks, 1)
}

// PartCount is how many dispatched parts the stage has: every task it
// can ever run. An autoscaled stage has its maximum from submit on, so a
// task added by a resize is a part the job always had, placed through the
// normal provisioning once the source reaches an epoch it exists in; until
// then it is dormant (never placed).
func (s *Stage) PartCount() int {
	if s.Autoscale != nil && s.Tasks == 0 {
		return max(s.Autoscale.Max, s.TaskCount())
	}
	return s.TaskCount()
}

// Resizable reports whether the pipeline can change its stages' sizes
// while it runs (a stage has autoscale): only then do its machines keep
// epochs, which costs the source one checkpoint before its first read.
func (s *Spec) Resizable() bool {
	for i := range s.Stages {
		if s.Stages[i].Autoscale != nil {
			return true
		}
	}
	return false
}

// SourceFormat is Format with its default.
func (s *Source) SourceFormat() Format {
	if s.Format == 0 {
		return FormatCSV
	}
	return s.Format
}

// ParseOptions gives Parse what it can know where the job file is read.
type ParseOptions struct {
	// OpenFile opens a `file:` source by the name the job file gives, so
	// that a header can be checked against the stages' fields. Nil: no
	// check until the pipeline runs.
	OpenFile func(name string) (io.ReadCloser, error)
	// LookCommand reports whether an exec program exists (exec.LookPath
	// where the job file is read on a worker-like host). Nil: no check.
	LookCommand func(name string) error
	// Permit says whether some worker may meet a need of the pipeline
	// (an exec program, a path: source): nil, or why none may. A
	// manager's API sets it from its datacenter's workers, so a refusal
	// names the job file's line. Nil: no check here.
	Permit func(Need) error
}

// Parse reads a `type: rainstorm` workflow's keys (name, type, cores and
// timeout are the caller's) from f, records every problem in f with its
// line, and returns the spec as CBOR for wire.WorkflowSpec.Params; the
// bytes are meaningless when f has problems.
func Parse(f *workflow.Fields, opts ParseOptions) []byte {
	s := read(f)
	if f.HasProblems() {
		return f.Encode(s) // still reports Validate's problems on what was read
	}
	columns := knownColumns(f, s, opts)
	if err := s.Check(columns); err != nil {
		f.Report(err)
		return nil
	}
	if opts.LookCommand != nil {
		for i, st := range s.Stages {
			if st.Op == OpExec && len(st.Command) > 0 {
				if err := opts.LookCommand(st.Command[0]); err != nil {
					f.Report(workflow.FieldErrors{{Path: workflow.IndexPath("stages", i) + ".command",
						Message: fmt.Sprintf("program %q: %v", st.Command[0], err)}})
				}
			}
		}
	}
	b, err := wire.Marshal(s)
	if err != nil {
		f.Problemf("encode params: %v", err)
		return nil
	}
	return b
}

// knownColumns returns the column names where Parse can know them: from a
// file source's header (read through OpenFile), a generate source, or a
// lines source. nil means unknown (checked when the pipeline starts).
func knownColumns(f *workflow.Fields, s *Spec, opts ParseOptions) []string {
	src := s.Source
	switch {
	case src.Generate != nil:
		return GenerateColumns
	case src.SourceFormat() == FormatLines:
		return []string{LineField}
	case src.File != "" && src.Header && opts.OpenFile != nil:
		r, err := opts.OpenFile(src.File)
		if err != nil {
			f.Report(workflow.FieldErrors{{Path: "source.file", Message: fmt.Sprintf("cannot read: %v", err)}})
			return nil
		}
		defer r.Close()
		rd, err := NewReader(r, ReaderOptions{Format: FormatCSV, Header: true})
		if err != nil {
			f.Report(workflow.FieldErrors{{Path: "source.file", Message: fmt.Sprintf("%s: %v", src.File, err)}})
			return nil
		}
		return rd.Header()
	}
	return nil
}

func read(f *workflow.Fields) *Spec {
	s := &Spec{}
	f.Required("source", "stages")
	if src, ok := f.Object("source"); ok {
		readSource(src, &s.Source)
	}
	if eo, ok := f.Bool("exactly_once"); ok {
		s.AtLeastOnce = !eo
	}
	if v, ok := f.String("on_bad_record"); ok {
		switch v {
		case "skip":
		case "fail":
			s.FailOnBadRecord = true
		default:
			f.Errorf("on_bad_record", "must be skip or fail, got %q", v)
		}
	}
	stages, _ := f.Objects("stages")
	for _, sf := range stages {
		s.Stages = append(s.Stages, readStage(sf))
	}
	return s
}

func readSource(f *workflow.Fields, src *Source) {
	n := 0
	if v, ok := f.String("file"); ok {
		src.File, n = v, n+1
	}
	if v, ok := f.String("path"); ok {
		src.Path, n = v, n+1
	}
	if g, ok := f.Object("generate"); ok {
		n++
		src.Generate = &Generate{Keys: 100}
		g.Required("records")
		if v, ok := g.Int("records"); ok {
			src.Generate.Records = v
		}
		if v, ok := g.Float("rate"); ok {
			src.Generate.Rate = v
		}
		if v, ok := g.Int("keys"); ok {
			src.Generate.Keys = v
		}
		src.Generate.Stages = readRateStages(g)
	}
	if n != 1 && !f.HasProblems() {
		f.Problemf("must have exactly one of file, path or generate")
	}
	if v, ok := f.String("format"); ok {
		switch v {
		case "csv":
			src.Format = FormatCSV
		case "lines":
			src.Format = FormatLines
		default:
			f.Errorf("format", "must be csv or lines, got %q", v)
		}
	}
	if v, ok := f.Bool("header"); ok {
		src.Header = v
	}
	if v, ok := f.Int("split"); ok {
		if v < 1 || v > MaxSplit {
			f.Errorf("split", "must be between 1 and %d, got %d", MaxSplit, v)
		} else {
			src.Split = int(v)
		}
	}
	if src.Format == FormatLines && src.Header {
		f.Errorf("header", "applies to csv, not lines")
	}
	if src.Generate != nil && (f.Has("format") || f.Has("header")) {
		f.Problemf("format and header do not apply to generate (its records have the fields %s)", strings.Join(GenerateColumns, ", "))
	}
}

func readStage(f *workflow.Fields) Stage {
	var st Stage
	f.Required("name", "op")
	if v, ok := f.String("name"); ok {
		st.Name = v
	}
	op, hasOp := f.String("op")
	if hasOp {
		if !slices.Contains(allOps, Op(op)) {
			names := make([]string, len(allOps))
			for i, o := range allOps {
				names[i] = string(o)
			}
			f.Errorf("op", "unknown op %q (known: %s)", op, strings.Join(names, ", "))
			f.Skip()
			return st
		}
		st.Op = Op(op)
	} else {
		f.Skip()
		return st
	}
	if a, ok := f.Object("autoscale"); ok {
		st.Autoscale = readAutoscale(a)
	}
	if v, ok := f.Bool("chain"); ok {
		st.NoChain = !v
	}
	if v, ok := f.Int("tasks"); ok {
		if v < 1 || v > MaxTasks {
			f.Errorf("tasks", "must be between 1 and %d, got %d", MaxTasks, v)
		} else {
			st.Tasks = int(v)
		}
	}
	// Each op reads only its own keys, so another op's key is reported as
	// unknown for this one.
	switch st.Op {
	case OpFilter:
		st.Field, _ = f.String("field")
		if v, ok := f.String("equals"); ok {
			st.Equals = &v
		}
		st.Matches, _ = f.String("matches")
		switch {
		case st.Equals != nil && f.Has("matches"):
			f.Errorf("equals", "give equals or matches, not both")
		case st.Equals == nil && !f.Has("matches"):
			f.Problemf("filter needs equals (with field) or matches")
		case st.Equals != nil && st.Field == "":
			f.Errorf("field", "is required with equals")
		}
	case OpProject:
		f.Required("fields")
		st.Fields, _ = f.StringList("fields")
	case OpReplace:
		f.Required("field", "pattern", "with")
		st.Field, _ = f.String("field")
		st.Pattern, _ = f.String("pattern")
		st.With, _ = f.String("with")
	case OpCount:
		f.Required("key")
		st.Key, _ = f.String("key")
	case OpSum:
		f.Required("key", "field")
		st.Key, _ = f.String("key")
		st.Field, _ = f.String("field")
	case OpExec:
		f.Required("command")
		if v, ok := f.String("command"); ok {
			st.Command = strings.Fields(v)
			if len(st.Command) == 0 {
				f.Errorf("command", "must name a program")
			}
		}
	}
	return st
}

// Validate checks what can be checked without the input's columns, as
// workflow.FieldErrors with job-file paths.
func (s *Spec) Validate() error { return s.Check(nil) }

// Check validates the spec; with columns (the source's column names) it
// also checks that every field and key a stage names exists where the
// stage reads it.
func (s *Spec) Check(columns []string) error {
	if s.IsChained() {
		if err := s.checkChain(); err != nil {
			return err
		}
		flat := s.Unchained()
		return flat.Check(columns)
	}
	var errs workflow.FieldErrors
	add := func(path, format string, args ...any) {
		errs = append(errs, workflow.FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	src := s.Source
	switch {
	case src.File != "" && filepath.IsAbs(src.File):
		add("source.file", "names a file beside the job file; use path: for an absolute path on the worker")
	case src.Path != "" && !filepath.IsAbs(src.Path):
		add("source.path", "must be an absolute path on the worker, got %q (use file: for a file beside the job file)", src.Path)
	case src.Split < 0 || src.Split > MaxSplit:
		add("source.split", "must be between 1 and %d, got %d", MaxSplit, src.Split)
	case src.Split > 1 && src.Generate != nil:
		add("source.split", "applies to a file or path input, not generate")
	case src.Split > 1 && s.Resizable():
		add("source.split", "a split source cannot be combined with autoscale (epochs start at one source task)")
	case src.Generate != nil:
		g := src.Generate
		if g.Records < 1 || g.Records > MaxGenerateRecords {
			add("source.generate.records", "must be between 1 and %d, got %d", int64(MaxGenerateRecords), g.Records)
		}
		if g.Rate < 0 {
			add("source.generate.rate", "must be 0 (unpaced) or more, got %g", g.Rate)
		}
		if g.Keys < 1 {
			add("source.generate.keys", "must be at least 1, got %d", g.Keys)
		}
		checkRateStages(g, add)
	}
	if len(s.Stages) == 0 || len(s.Stages) > MaxStages {
		add("stages", "must have between 1 and %d stages, got %d", MaxStages, len(s.Stages))
	}
	if columns == nil && src.SourceFormat() == FormatCSV && !src.Header && src.Generate == nil {
		columns = numbered // names are column numbers; their count is known when the file is read
	}
	names := map[string]int{}
	for i, st := range s.Stages {
		path := workflow.IndexPath("stages", i)
		if err := workflow.CheckName(st.Name); err != nil {
			add(path+".name", "%v", err)
		} else if j, dup := names[st.Name]; dup {
			add(path+".name", "duplicate stage name %q (also stages[%d])", st.Name, j)
		} else {
			names[st.Name] = i
		}
		if st.Tasks < 0 || st.Tasks > MaxTasks {
			add(path+".tasks", "must be between 1 and %d, got %d", MaxTasks, st.Tasks)
		}
		checkAutoscale(&st, path, add)
		if st.Op.Aggregate() && i != len(s.Stages)-1 {
			add(path+".op", "%s must be the last stage: it emits its rows at the end of input", st.Op)
		}
		need := func(key, name string) {
			if !hasColumn(columns, name) {
				add(path+"."+key, "field %q is not in the input's columns (%s)", name, describeColumns(columns))
			}
		}
		regex := func(key, expr string) {
			if _, err := regexp.Compile(expr); err != nil {
				add(path+"."+key, "bad regular expression: %v", err)
			}
		}
		switch st.Op {
		case OpFilter:
			if st.Field != "" {
				need("field", st.Field)
			}
			if st.Equals == nil {
				regex("matches", st.Matches)
			}
		case OpProject:
			if len(st.Fields) == 0 {
				add(path+".fields", "must list at least one field")
			}
			for j, fl := range st.Fields {
				if !hasColumn(columns, fl) {
					add(workflow.IndexPath(path+".fields", j), "field %q is not in the input's columns (%s)", fl, describeColumns(columns))
				}
			}
			if columns != nil {
				columns = st.Fields // without a header the kept columns keep their numbers as names
			}
		case OpReplace:
			need("field", st.Field)
			regex("pattern", st.Pattern)
		case OpCount:
			need("key", st.Key)
		case OpSum:
			need("key", st.Key)
			need("field", st.Field)
		case OpExec:
			if len(st.Command) == 0 {
				add(path+".command", "must name a program")
			}
			columns = numbered // the program decides what it emits
		case "":
		default:
			add(path+".op", "unknown op %q", st.Op)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// numbered stands for the columns of a CSV input without a header: named
// by 1-based number, count unknown until read.
var numbered = []string{"#"}

func isNumbered(columns []string) bool { return len(columns) == 1 && columns[0] == "#" }

func hasColumn(columns []string, name string) bool {
	switch {
	case columns == nil:
		return true // unknown here: checked when the pipeline starts
	case isNumbered(columns):
		n, err := parseColumnNumber(name)
		return err == nil && n >= 1
	}
	return slices.Contains(columns, name)
}

func describeColumns(columns []string) string {
	if isNumbered(columns) {
		return "without a header, and after exec, fields are named by column number from 1"
	}
	s := strings.Join(columns, ", ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

func parseColumnNumber(s string) (int, error) {
	n := 0
	if s == "" || len(s) > 6 {
		return 0, errors.New("not a column number")
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, errors.New("not a column number")
		}
		n = n*10 + int(c-'0')
	}
	return n, nil
}

// DecodeSpec decodes params from the network with the strict codec and
// validates them.
func DecodeSpec(data []byte) (*Spec, error) {
	var s Spec
	if err := wire.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("decode rainstorm params: %w", err)
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("rainstorm params: %w", err)
	}
	return &s, nil
}
