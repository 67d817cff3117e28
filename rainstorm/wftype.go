package rainstorm

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"tempest/wire"
	"tempest/workflow"
)

// Type is the `type: rainstorm` workflow type. A pipeline is expanded at
// submit into one dispatched part per task (the source, then each stage's
// tasks in order), so every task is placed, fenced and re-placed like any
// other workflow; the worker runs a part through its RainStorm host, never
// through New.
type Type struct {
	// Options are used where the job file is read (the CLI): they check a
	// file source's header and exec programs there. Zero elsewhere.
	Options ParseOptions
}

// TaskParams are one task's params: the whole pipeline and which task.
// Expand puts the pipeline (Spec, Blob, Programs) only in the first
// task's params (the source's, shard 1 of the workflow); every other task
// carries its (Stage, Index) and Ref, so a submission, and every store of
// it, holds the spec once rather than once per task. The managers fill a
// task's params in from the first task's before they dispatch it
// (Resolve): a worker always gets whole params. Params stored by a
// version that copied the spec into every task decode as they are.
type TaskParams struct {
	Spec  Spec `cbor:"1,keyasint"`
	Stage int  `cbor:"2,keyasint,omitempty"` // 0 is the source
	Index int  `cbor:"3,keyasint,omitempty"`
	// Blob is the hex SHA-256 of a `file:` source uploaded with the job:
	// the source's worker reads it by range from the managers.
	Blob string `cbor:"4,keyasint,omitempty"`
	// Programs are the exec programs given as paths relative to the job
	// file (LocalProgram), uploaded with the job: name as written → blob.
	Programs map[string]string `cbor:"5,keyasint,omitempty"`
	// ProgramData holds those programs' bytes, filled in on the worker
	// (AttachBlobs) and never stored or sent by the managers.
	ProgramData map[string][]byte `cbor:"6,keyasint,omitempty"`
	// Ref: the pipeline is the first task's; Spec, Blob and Programs are
	// empty here.
	Ref bool `cbor:"7,keyasint,omitempty"`
}

// PipelineParams are a pipeline's params as the job file gives them,
// before Expand cuts them into tasks.
type PipelineParams struct {
	Spec     Spec              `cbor:"1,keyasint"`
	Blob     string            `cbor:"2,keyasint,omitempty"`
	Programs map[string]string `cbor:"3,keyasint,omitempty"`
}

// LocalProgram reports whether an exec program is a path relative to the
// job file ("./upper.sh", "bin/op"): such a program travels with the job
// as a blob, where a bare name ("awk") is looked up in the PATH of the
// worker and an absolute path is read on the worker.
func LocalProgram(name string) bool {
	return strings.Contains(name, "/") && !path.IsAbs(name) && !filepath.IsAbs(name)
}

// Validate implements workflow.Params. A task that refers to the first
// task's spec is checked against it by CheckParts and Resolve.
func (p *TaskParams) Validate() error {
	if p.Ref {
		switch {
		case !reflect.ValueOf(p.Spec).IsZero() || p.Blob != "" || len(p.Programs) > 0 || len(p.ProgramData) > 0:
			return errors.New("a task that refers to its pipeline's spec carries none of its own")
		case p.Stage < 0 || p.Index < 0 || (p.Stage == 0 && p.Index == 0):
			return fmt.Errorf("task %d of stage %d cannot refer to the first source task's spec", p.Index, p.Stage)
		}
		return nil
	}
	if err := p.Spec.Validate(); err != nil {
		return err
	}
	switch {
	case p.Stage < 0 || p.Stage > len(p.Spec.Stages):
		return fmt.Errorf("stage %d out of range (the pipeline has %d)", p.Stage, len(p.Spec.Stages))
	case p.Stage == 0 && (p.Index < 0 || p.Index >= p.Spec.Source.Splits()):
		return fmt.Errorf("source index %d: the source has %d tasks (split)", p.Index, p.Spec.Source.Splits())
	case p.Stage > 0 && (p.Index < 0 || p.Index >= p.Spec.Stages[p.Stage-1].PartCount()):
		return fmt.Errorf("task %d of stage %d out of range", p.Index, p.Stage)
	}
	return nil
}

// Name implements workflow.Type.
func (Type) Name() string { return TypeName }

// ParseParams implements workflow.Type: the pipeline's spec and the blob a
// `file:` source was uploaded as (PipelineParams), expanded into tasks by
// Expand. Where the job file is read with the files at hand (the CLI,
// Options.OpenFile set) the upload comes later; elsewhere a file source
// must name an uploaded blob.
func (t Type) ParseParams(f *workflow.Fields) []byte {
	b := Parse(f, t.Options)
	if f.HasProblems() {
		return b
	}
	s, err := DecodeSpec(b)
	if err != nil {
		f.Problemf("%v", err)
		return nil
	}
	p := PipelineParams{Spec: *s}
	for i, st := range s.Stages {
		if st.Op != OpExec || len(st.Command) == 0 || !LocalProgram(st.Command[0]) {
			continue
		}
		name := st.Command[0]
		if sum, ok := f.DataBlob(name); ok {
			if p.Programs == nil {
				p.Programs = map[string]string{}
			}
			p.Programs[name] = sum
		} else if t.Options.OpenFile == nil {
			f.Report(workflow.FieldErrors{{Path: workflow.IndexPath("stages", i) + ".command", Message: fmt.Sprintf(
				"program %s is a path relative to the job file and was not uploaded with the job (tempest submit uploads it; or give an absolute path on the workers, or a name in their PATH)", name)}})
			return nil
		}
	}
	if s.Source.File != "" {
		if sum, ok := f.DataBlob(s.Source.File); ok {
			p.Blob = sum
		} else if t.Options.OpenFile == nil {
			f.Report(workflow.FieldErrors{{Path: "source.file", Message: fmt.Sprintf(
				"%s was not uploaded with the job (tempest submit uploads the files a job names)", s.Source.File)}})
			return nil
		}
	}
	if t.Options.Permit != nil {
		var refused workflow.FieldErrors
		for _, n := range PipelineNeeds(&p.Spec, p.Programs) {
			if err := t.Options.Permit(n); err != nil {
				refused = append(refused, workflow.FieldError{Path: n.Field, Message: err.Error()})
			}
		}
		if len(refused) > 0 {
			f.Report(refused)
			return nil
		}
	}
	return f.Encode(&p)
}

// Validate implements workflow.Params.
func (p *PipelineParams) Validate() error { return p.Spec.Validate() }

// Expand implements workflow.Expander: one TaskParams per task, in task
// order (TaskOrder).
func (Type) Expand(params []byte) ([][]byte, error) {
	var p PipelineParams
	if err := wire.Unmarshal(params, &p); err != nil {
		return nil, fmt.Errorf("decode rainstorm params: %w", err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	// The pipeline runs chained (chain.go): the parts are its tasks.
	chained := p.Spec.Chained()
	s := &chained
	var out [][]byte
	for i, t := range TaskOrder(s) {
		tp := &TaskParams{Stage: t.Stage, Index: t.Index, Ref: true}
		if i == 0 {
			tp = &TaskParams{Spec: *s, Blob: p.Blob, Programs: p.Programs}
		}
		b, err := wire.Marshal(tp)
		if err != nil {
			return nil, fmt.Errorf("encode task params: %w", err)
		}
		out = append(out, b)
	}
	return out, nil
}

// CheckParts implements workflow.PartsChecker: the first part holds the
// pipeline, and every part is the task TaskOrder puts in its place, in
// either form (referring to the first part's spec, or, as an earlier
// version wrote them, with a copy of it).
func (Type) CheckParts(parts [][]byte) error {
	if len(parts) == 0 {
		return errors.New("a pipeline has no tasks")
	}
	first, err := DecodeTaskParams(parts[0])
	if err != nil {
		return fmt.Errorf("task 1: %w", err)
	}
	if first.Ref || first.Stage != 0 {
		return errors.New("task 1 is not the source with the pipeline's spec")
	}
	order := TaskOrder(&first.Spec)
	if len(parts) != len(order) {
		return fmt.Errorf("the pipeline has %d tasks, and %d parts were given", len(order), len(parts))
	}
	for k := 1; k < len(parts); k++ {
		p, err := DecodeTaskParams(parts[k])
		if err != nil {
			return fmt.Errorf("task %d: %w", k+1, err)
		}
		if p.Stage != order[k].Stage || p.Index != order[k].Index {
			return fmt.Errorf("task %d is task %d of stage %d, where task %d of stage %d belongs", k+1, p.Index, p.Stage, order[k].Index, order[k].Stage)
		}
	}
	return nil
}

// Resolve gives a task's whole params: task as it is when it carries its
// own spec, else with first's (the pipeline's first task's params) filled
// in.
func Resolve(first, task []byte) ([]byte, error) {
	t, err := DecodeTaskParams(task)
	if err != nil {
		return nil, err
	}
	if !t.Ref {
		return task, nil
	}
	f, err := DecodeTaskParams(first)
	if err != nil {
		return nil, fmt.Errorf("the pipeline's first task: %w", err)
	}
	if f.Ref {
		return nil, errors.New("the pipeline's first task refers to another for its spec")
	}
	whole := &TaskParams{Spec: f.Spec, Stage: t.Stage, Index: t.Index, Blob: f.Blob, Programs: f.Programs}
	if err := whole.Validate(); err != nil {
		return nil, err
	}
	return wire.Marshal(whole)
}

// TaskOrder lists a pipeline's tasks (Job and Workflow empty) in the order
// of their parts: the source's (one per range of a split input), then each
// stage's tasks (an autoscaled stage's up to its maximum, PartCount).
// Shard k of the workflow is task k-1.
func TaskOrder(s *Spec) []wire.RainstormTask {
	var out []wire.RainstormTask
	for k := range s.Source.Splits() {
		out = append(out, wire.RainstormTask{Stage: 0, Index: k})
	}
	for i, st := range s.Stages {
		for j := range st.PartCount() {
			out = append(out, wire.RainstormTask{Stage: i + 1, Index: j})
		}
	}
	return out
}

// DecodeParams implements workflow.Type.
func (Type) DecodeParams(data []byte) (workflow.Params, error) { return DecodeTaskParams(data) }

// DecodeTaskParams decodes one task's params with the strict codec and
// validates them.
func DecodeTaskParams(data []byte) (*TaskParams, error) {
	if len(data) > workflow.MaxParamsSize {
		return nil, fmt.Errorf("params are %d bytes, more than %d", len(data), workflow.MaxParamsSize)
	}
	var p TaskParams
	if err := wire.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("decode rainstorm task params: %w", err)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("rainstorm task params: %w", err)
	}
	return &p, nil
}

// Blobs implements workflow.BlobReferrer: the managers accept a job only
// once its file source's blob and its uploaded programs are durable.
func (Type) Blobs(params []byte) ([]string, error) {
	p, err := DecodeTaskParams(params)
	if err != nil {
		return nil, err
	}
	var out []string
	if p.Blob != "" {
		out = append(out, p.Blob)
	}
	for _, name := range slices.Sorted(maps.Keys(p.Programs)) {
		out = append(out, p.Programs[name])
	}
	return out, nil
}

// DetachBlobs implements workflow.BlobReferrer: params never hold a file's
// bytes.
func (Type) DetachBlobs(params []byte) ([]byte, error) { return params, nil }

// AttachBlobs implements workflow.BlobReferrer: an exec task gets its
// uploaded program's bytes (small: the worker bounds a blob it holds); the
// source reads its blob by range while it runs, never whole into params.
func (Type) AttachBlobs(params []byte, read func(string) ([]byte, error)) ([]byte, error) {
	p, err := DecodeTaskParams(params)
	if err != nil {
		return nil, err
	}
	if p.Stage == 0 || p.Stage > len(p.Spec.Stages) {
		return params, nil
	}
	st := p.Spec.Stages[p.Stage-1]
	if st.Op != OpExec || len(st.Command) == 0 {
		return params, nil
	}
	sum, ok := p.Programs[st.Command[0]]
	if !ok {
		return params, nil
	}
	data, err := read(sum)
	if err != nil {
		return nil, fmt.Errorf("program %s (blob %s): %w", st.Command[0], sum, err)
	}
	p.ProgramData = map[string][]byte{st.Command[0]: data}
	return wire.Marshal(p)
}

// ErrHostOnly is New's answer: tasks need the worker's transport.
var ErrHostOnly = errors.New("rainstorm tasks run on a worker's RainStorm host")

// New implements workflow.Type.
func (Type) New(wire.WorkflowSpec) (workflow.Runner, error) { return nil, ErrHostOnly }

// Registry returns the default workflow registry with the rainstorm type
// added, options and all.
func Registry(opts ParseOptions) *workflow.Registry {
	r := workflow.DefaultRegistry()
	if err := r.Register(Type{Options: opts}); err != nil {
		panic(fmt.Sprintf("rainstorm: register type: %v", err)) // a bug: the default registry has no rainstorm
	}
	return r
}

// Columns returns the column names at the input of stage i (0-based; i =
// len(Stages) gives the pipeline's output columns) for an input with
// header: nil where fields are named by number (no header, after exec).
func Columns(spec *Spec, header []string, i int) []string {
	cols := header
	if spec.Source.Generate != nil {
		cols = GenerateColumns
	} else if spec.Source.SourceFormat() == FormatLines {
		cols = []string{LineField}
	}
	for _, st := range slices.Concat(spec.Source.Chain, spec.Stages[:min(i, len(spec.Stages))]) {
		switch st.Op {
		case OpProject:
			cols = st.Fields
		case OpExec:
			cols = nil
		case OpCount, OpSum:
			cols = AggregateHeader
		}
	}
	return cols
}
