package jobfile

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"tempest/jobs"
	"tempest/wire"
	"tempest/workflow"
)

// Limits and defaults of a job file.
const (
	// MaxFileSize bounds the input before any parsing.
	MaxFileSize = 1 << 20
	// MaxWorkflows bounds a job's workflows.
	MaxWorkflows = 256
	// MaxDatacenters bounds the datacenters a job may ask for.
	MaxDatacenters = 64
	// DefaultTimeout applies when a job file sets none: the job model's
	// default (jobs.DefaultTimeout), which the roles apply to a submission
	// without one. Longer runs say so.
	DefaultTimeout = jobs.DefaultTimeout
	// MaxTimeout bounds a job's timeout.
	MaxTimeout = 7 * 24 * time.Hour
	// DefaultCores is a workflow's cores when it sets none.
	DefaultCores = 1

	// maxProblems keeps the report of a hopeless file readable (and small).
	maxProblems = 100
)

// Parse reads a job file (YAML, or JSON, which YAML reads too) into a
// submission, with each workflow's params encoded by its type in reg. The
// job id is left empty: the manager assigns it. filename only labels
// problems.
//
// Every problem found is returned at once in an *Error; a file with
// problems yields no submission. Data files named in the job file are read
// through WithDataFiles and shipped inside the params.
func Parse(data []byte, filename string, reg *workflow.Registry, opts ...Option) (*wire.JobSubmission, error) {
	if reg == nil {
		return nil, errors.New("jobfile: nil workflow registry")
	}
	if filename == "" {
		filename = "job file"
	}
	fail := func(problems []Problem) error {
		if len(problems) > maxProblems {
			n := len(problems) - maxProblems
			problems = append(problems[:maxProblems:maxProblems], Problem{Message: fmt.Sprintf("%d more problems not shown", n)})
		}
		return &Error{File: filename, Problems: problems}
	}
	if len(data) > MaxFileSize {
		return nil, fail([]Problem{{Message: fmt.Sprintf("job file is %d bytes, more than the %d allowed", len(data), MaxFileSize)}})
	}
	root, problems := readYAML(data)
	if root == nil {
		return nil, fail(problems)
	}
	if root.Kind == workflow.ScalarNode && root.Value == nil && !root.Invalid {
		return nil, fail(append(problems, Problem{Message: "job file is empty"})) // "---" or "~"
	}
	if root.Kind != workflow.MapNode {
		return nil, fail(append(problems, Problem{Line: root.Line,
			Message: "job file must be a mapping with name, workflows and optionally timeout and datacenters"}))
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	problems = append(problems, substituteEnv(root, "", o.env)...)
	p := parser{reg: reg, root: workflow.NewFields("", root)}
	p.root.ReadDataWith(o.readData)
	p.root.SecretsWith(o.secrets)
	p.root.ReadTLSWith(o.readTLS)
	if o.blobs != nil {
		p.root.DataBlobsWith(func(name string) (string, bool) {
			sum, ok := o.blobs[name]
			return sum, ok
		})
	}
	sub := p.submission()
	if all := mergeProblems(problems, p.root.Finish()); len(all) > 0 {
		return nil, fail(all)
	}
	return sub, nil
}

type parser struct {
	reg  *workflow.Registry
	root *workflow.Fields
}

func (p *parser) submission() *wire.JobSubmission {
	f := p.root
	sub := &wire.JobSubmission{Timeout: DefaultTimeout}
	f.Required("name", "workflows")
	if name, ok := f.String("name"); ok {
		if err := workflow.CheckName(name); err != nil {
			f.Errorf("name", "%v", err)
		}
		sub.Name = name
	}
	timeoutOK := true
	if d, ok := f.Duration("timeout"); ok {
		switch {
		case d <= 0:
			f.Errorf("timeout", "must be greater than 0, got %s", fmtDuration(d))
			timeoutOK = false
		case d > MaxTimeout:
			f.Errorf("timeout", "must be at most %s, got %s", fmtDuration(MaxTimeout), fmtDuration(d))
			timeoutOK = false
		default:
			sub.Timeout = d
		}
	}
	p.datacenters(sub)

	wfs, ok := f.Objects("workflows")
	if ok && (len(wfs) == 0 || len(wfs) > MaxWorkflows) {
		f.Errorf("workflows", "must have between 1 and %d workflows, got %d", MaxWorkflows, len(wfs))
	}
	var dups workflow.FieldErrors
	first := map[string]int{}
	for i, wf := range wfs {
		specs := p.workflow(wf, sub.Timeout, timeoutOK)
		spec := specs[0]
		if spec.Name != "" {
			if j, dup := first[spec.Name]; dup {
				dups = append(dups, workflow.FieldError{
					Path:    workflow.JoinPath(wf.Path(), "name"),
					Message: fmt.Sprintf("duplicate workflow name %q (also workflows[%d])", spec.Name, j),
				})
			} else {
				first[spec.Name] = i
			}
		}
		sub.Workflows = append(sub.Workflows, specs...)
	}
	if len(dups) > 0 {
		f.Report(dups)
	}
	return sub
}

// datacenters reads either a count ("datacenters: 2": the gate picks the
// healthiest) or names ("datacenters: [us-east, eu-west]"). Absent leaves
// the choice to the gate.
func (p *parser) datacenters(sub *wire.JobSubmission) {
	f := p.root
	n, ok := f.Node("datacenters")
	if !ok {
		return
	}
	switch {
	case n.Kind == workflow.ScalarNode:
		count, isInt := f.Int("datacenters")
		if !isInt {
			return
		}
		if count < 1 || count > MaxDatacenters {
			f.Errorf("datacenters", "must be between 1 and %d, got %d", MaxDatacenters, count)
			return
		}
		sub.DatacenterCount = int(count)
	case n.Kind == workflow.ListNode:
		names, ok := f.StringList("datacenters")
		if !ok {
			return
		}
		if len(names) == 0 || len(names) > MaxDatacenters {
			f.Errorf("datacenters", "must name between 1 and %d datacenters, got %d", MaxDatacenters, len(names))
			return
		}
		var errs workflow.FieldErrors
		seen := map[string]bool{}
		for i, name := range names {
			path := workflow.IndexPath("datacenters", i)
			if err := workflow.CheckName(name); err != nil {
				errs = append(errs, workflow.FieldError{Path: path, Message: err.Error()})
			} else if seen[name] {
				errs = append(errs, workflow.FieldError{Path: path, Message: fmt.Sprintf("datacenter %q is listed twice", name)})
			}
			seen[name] = true
		}
		if len(errs) > 0 {
			f.Report(errs)
			return
		}
		sub.Datacenters = names
	default:
		f.Errorf("datacenters", "must be a number of datacenters or a list of their names, got a mapping")
	}
}

// workflow reads the keys every workflow has and hands the rest to its type.
// workflow reads one workflow; with shards: N it returns N specs, each with
// its share of the load (see workflow.Splitter).
func (p *parser) workflow(f *workflow.Fields, jobTimeout time.Duration, jobTimeoutOK bool) []wire.WorkflowSpec {
	spec := wire.WorkflowSpec{Cores: DefaultCores}
	shards := 1
	if n, ok := f.Int("shards"); ok {
		if n < 1 || n > workflow.MaxShards {
			f.Errorf("shards", "must be between 1 and %d, got %d", workflow.MaxShards, n)
		} else {
			shards = int(n)
		}
	}
	f.Required("name", "type")
	if name, ok := f.String("name"); ok {
		if err := workflow.CheckName(name); err != nil {
			f.Errorf("name", "%v", err)
		} else {
			spec.Name = name
		}
	}
	if n, ok := f.Int("cores"); ok {
		if n < 1 || n > workflow.MaxCores {
			f.Errorf("cores", "must be between 1 and %d, got %d", workflow.MaxCores, n)
		} else {
			spec.Cores = int(n)
		}
	}
	if d, ok := f.Duration("timeout"); ok {
		switch {
		case d <= 0:
			f.Errorf("timeout", "must be greater than 0, got %s", fmtDuration(d))
		case jobTimeoutOK && d > jobTimeout:
			f.Errorf("timeout", "%s is longer than the job's timeout of %s", fmtDuration(d), fmtDuration(jobTimeout))
		default:
			spec.Timeout = d
		}
	}
	spec.Thresholds = workflow.ParseThresholds(f)
	typeName, ok := f.String("type")
	if !ok {
		f.Skip() // without a type, no key can be judged
		return []wire.WorkflowSpec{spec}
	}
	typ, ok := p.reg.Lookup(typeName)
	if !ok {
		msg := fmt.Sprintf("unknown workflow type %q (known: %s)", typeName, strings.Join(p.reg.Names(), ", "))
		f.Errorf("type", "%s", msg)
		f.Skip()
		return []wire.WorkflowSpec{spec}
	}
	spec.Type = typeName
	spec.Params = typ.ParseParams(f)
	if f.HasProblems() {
		return []wire.WorkflowSpec{spec}
	}
	if br, ok := typ.(workflow.BlobReferrer); ok {
		params, err := br.DetachBlobs(spec.Params)
		if err != nil {
			f.Problemf("detach data blobs: %v", err)
			return []wire.WorkflowSpec{spec}
		}
		spec.Params = params
	}
	if steps, ok := workflow.StepNames(typ, spec.Params); ok && len(spec.Thresholds) > 0 {
		workflow.CheckThresholdSteps(f, steps)
		if f.HasProblems() {
			return []wire.WorkflowSpec{spec}
		}
	}
	if checks, ok := workflow.CheckNames(typ, spec.Params); ok && len(spec.Thresholds) > 0 {
		workflow.CheckThresholdChecks(f, checks)
		if f.HasProblems() {
			return []wire.WorkflowSpec{spec}
		}
	}
	spec.Planned = workflow.PlannedDuration(typ, spec.Params)
	if ex, ok := typ.(workflow.Expander); ok {
		return expand(f, spec, ex)
	}
	if shards == 1 {
		return []wire.WorkflowSpec{spec}
	}
	splitter, ok := typ.(workflow.Splitter)
	if !ok {
		f.Errorf("shards", "a %s workflow cannot be split over workers", typeName)
		return []wire.WorkflowSpec{spec}
	}
	parts, err := splitter.Split(spec.Params, shards)
	if err != nil {
		f.Errorf("shards", "%v", err)
		return []wire.WorkflowSpec{spec}
	}
	out := make([]wire.WorkflowSpec, shards)
	for i, params := range parts {
		out[i] = spec
		out[i].Params, out[i].Shard, out[i].Shards = params, i+1, shards
	}
	return out
}

// expand turns a workflow whose type runs it as several parts into one
// shard per part.
func expand(f *workflow.Fields, spec wire.WorkflowSpec, ex workflow.Expander) []wire.WorkflowSpec {
	if f.Has("shards") {
		f.Errorf("shards", "a %s workflow decides its own parts; remove shards", spec.Type)
		return []wire.WorkflowSpec{spec}
	}
	parts, err := ex.Expand(spec.Params)
	if err != nil {
		f.Problemf("%v", err)
		return []wire.WorkflowSpec{spec}
	}
	if len(parts) < 2 || len(parts) > workflow.MaxShards {
		f.Problemf("runs as %d tasks; between 2 and %d are possible", len(parts), workflow.MaxShards)
		return []wire.WorkflowSpec{spec}
	}
	out := make([]wire.WorkflowSpec, len(parts))
	for i, params := range parts {
		out[i] = spec
		out[i].Params, out[i].Shard, out[i].Shards = params, i+1, len(parts)
	}
	return out
}

// mergeProblems puts the YAML-level problems and the field problems in line
// order; at equal lines the YAML-level one comes first, as it is usually the
// cause.
func mergeProblems(yamlLevel, fields []Problem) []Problem {
	out := append(slices.Clone(yamlLevel), fields...)
	slices.SortStableFunc(out, func(a, b Problem) int { return cmp.Compare(a.Line, b.Line) })
	return out
}

// fmtDuration prints 1h rather than 1h0m0s.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
