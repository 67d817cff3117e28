package workflow

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"tempest/wire"
)

// MaxParamsSize bounds a workflow's encoded params. A job file is at most
// 1 MiB and the data files it ships at most MaxDataSize, so anything larger
// did not come from one.
const MaxParamsSize = 1<<20 + MaxDataSize

// ErrUnknownType is returned (wrapped) for a workflow type the registry does
// not hold. Callers branch on it: every worker is built with the same types,
// so a manager should fail such a workflow rather than retry it elsewhere.
var ErrUnknownType = errors.New("unknown workflow type")

// Type is a kind of workflow compiled into the worker. A type is stateless:
// everything a run needs is in its params.
type Type interface {
	// Name is the job file's `type:` value.
	Name() string
	// ParseParams reads the type's keys from a job file's workflow mapping
	// (the common keys name, type, cores and timeout are already read) and
	// returns its params as CBOR, recording every problem in f. It usually
	// ends with f.Encode(params).
	ParseParams(f *Fields) []byte
	// DecodeParams decodes params from the network with the strict codec
	// and validates them. Errors wrap FieldErrors when the params decoded
	// but are invalid.
	DecodeParams(data []byte) (Params, error)
	// New decodes and validates spec.Params and returns a runner for one
	// run of the workflow.
	New(spec wire.WorkflowSpec) (Runner, error)
}

// Params is a type's decoded parameters. Validate reports every problem at
// once as FieldErrors.
//
// Params travel as CBOR with integer keys and omitempty, so a field added
// later must treat its zero value as "not set" (older submissions will not
// carry it), and an old worker ignores keys it does not know.
type Params interface {
	Validate() error
}

// Planner is implemented by params that know how long their run is meant
// to last, for progress displays ("remaining"). Zero means it depends on
// the run (a number of iterations).
type Planner interface {
	PlannedDuration() time.Duration
}

// StepNamer is implemented by params whose runs report per-step results,
// so that a threshold naming a step can be checked at submit against the
// steps the workflow has rather than fail with "no data" when it ends.
type StepNamer interface {
	StepNames() []string
}

// CheckNamer is implemented by params whose steps have named checks, so
// that a "check: NAME" threshold is checked at submit against them.
type CheckNamer interface {
	CheckNames() []string
}

// CheckNames decodes params of type t and returns the names of their
// checks (each once), or ok=false when the type has no checks or the
// params do not decode.
func CheckNames(t Type, params []byte) (names []string, ok bool) {
	p, err := t.DecodeParams(params)
	if err != nil {
		return nil, false
	}
	cn, ok := p.(CheckNamer)
	if !ok {
		return nil, false
	}
	return cn.CheckNames(), true
}

// StepNames decodes params of type t and returns their step names, or
// ok=false when the type has no named steps or the params do not decode.
func StepNames(t Type, params []byte) (names []string, ok bool) {
	p, err := t.DecodeParams(params)
	if err != nil {
		return nil, false
	}
	sn, ok := p.(StepNamer)
	if !ok {
		return nil, false
	}
	return sn.StepNames(), true
}

// PlannedDuration decodes params of type t and returns their planned run
// time, or zero when the type does not say or the params do not decode.
// jobfile records it in the spec once, at submit, so that every tier
// reports the same figure without decoding params again.
func PlannedDuration(t Type, params []byte) time.Duration {
	p, err := t.DecodeParams(params)
	if err != nil {
		return 0
	}
	if pl, ok := p.(Planner); ok {
		return pl.PlannedDuration()
	}
	return 0
}

// Registry maps type names to types. Types are registered while a process
// starts; lookups are safe from any goroutine.
type Registry struct {
	mu    sync.RWMutex
	types map[string]Type
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{types: map[string]Type{}}
}

// DefaultRegistry returns a registry holding the built-in types: sleep,
// http, grpc and websocket.
func DefaultRegistry() *Registry {
	r := NewRegistry()
	for _, t := range []Type{SleepType{}, HTTPType{}, GRPCType{}, WSType{}} {
		if err := r.Register(t); err != nil {
			panic(fmt.Sprintf("workflow: built-in type: %v", err)) // a bug in this package
		}
	}
	return r
}

// Register adds t; a second type with the same name is refused.
func (r *Registry) Register(t Type) error {
	name := t.Name()
	if name == "" {
		return errors.New("register workflow type: empty name")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.types[name]; dup {
		return fmt.Errorf("register workflow type %q: already registered", name)
	}
	r.types[name] = t
	return nil
}

// Lookup returns the type called name.
func (r *Registry) Lookup(name string) (Type, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.types[name]
	return t, ok
}

// Names lists the registered types, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.types))
	for n := range r.types {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Validate checks a workflow spec from the network as a manager should
// before accepting a job: its name, cores and type, and that its params
// decode and validate.
func (r *Registry) Validate(spec wire.WorkflowSpec) error {
	t, err := r.check(spec)
	if err != nil {
		return err
	}
	if _, err := t.DecodeParams(spec.Params); err != nil {
		return fmt.Errorf("workflow %q (%s): %w", spec.Name, spec.Type, err)
	}
	return nil
}

// New returns a runner for spec.
func (r *Registry) New(spec wire.WorkflowSpec) (Runner, error) {
	t, err := r.check(spec)
	if err != nil {
		return nil, err
	}
	run, err := t.New(spec)
	if err != nil {
		return nil, fmt.Errorf("workflow %q (%s): %w", spec.Name, spec.Type, err)
	}
	return run, nil
}

func (r *Registry) check(spec wire.WorkflowSpec) (Type, error) {
	if err := CheckName(spec.Name); err != nil {
		return nil, fmt.Errorf("workflow name %q: %w", truncate(spec.Name, 40), err)
	}
	if spec.Cores < 1 || spec.Cores > MaxCores {
		return nil, fmt.Errorf("workflow %q: cores must be between 1 and %d, got %d", spec.Name, MaxCores, spec.Cores)
	}
	if spec.Timeout < 0 {
		return nil, fmt.Errorf("workflow %q: negative timeout %s", spec.Name, spec.Timeout)
	}
	if len(spec.Params) > MaxParamsSize {
		return nil, fmt.Errorf("workflow %q: params are %d bytes, more than %d", spec.Name, len(spec.Params), MaxParamsSize)
	}
	t, ok := r.Lookup(spec.Type)
	if !ok {
		return nil, fmt.Errorf("workflow %q: %w %q (known: %s)", spec.Name, ErrUnknownType, truncate(spec.Type, 40), strings.Join(r.Names(), ", "))
	}
	return t, nil
}

// MaxCores bounds one workflow's cores: more than any one worker has.
const MaxCores = 1024

// MaxNameLen bounds job, workflow and step names, which end up in logs,
// progress messages and tables.
const MaxNameLen = 128

// CheckName validates a job, workflow or step name: non-empty, at most
// MaxNameLen bytes of UTF-8, and printable (names reach terminals and logs,
// where control characters could forge lines).
func CheckName(s string) error {
	switch {
	case s == "":
		return errors.New("must not be empty")
	case len(s) > MaxNameLen:
		return fmt.Errorf("must be at most %d bytes, got %d", MaxNameLen, len(s))
	case !utf8.ValidString(s):
		return errors.New("must be valid UTF-8")
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("must be printable, has %U", r)
		}
	}
	return nil
}

// decodeParams is the shared network path: size cap, strict CBOR, Validate.
func decodeParams[P any, PP interface {
	*P
	Params
}](data []byte) (PP, error) {
	if len(data) > MaxParamsSize {
		return nil, fmt.Errorf("params are %d bytes, more than %d", len(data), MaxParamsSize)
	}
	p := PP(new(P))
	if err := wire.Unmarshal(data, p); err != nil {
		return nil, fmt.Errorf("decode params: %w", err)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("invalid params: %w", err)
	}
	return p, nil
}
