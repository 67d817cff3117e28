package jobs

import (
	"errors"
	"fmt"
	"time"

	"tempest/wire"
	"tempest/workflow"
)

// Limits and defaults of one submission.
const (
	// DefaultTimeout applies to a job that sets none. A timeout is the
	// safety net that frees cores held by a job nobody is watching; an
	// hour covers the load tests and soaks people run without thinking
	// about it, while a runaway job still ends the same day.
	DefaultTimeout = time.Hour
	// MaxWorkflows bounds the workflows of one submission as a role takes
	// it from the network (after shards are expanded); the job-file limit
	// is lower.
	MaxWorkflows = 1024
	// MaxIDLen bounds a job id: as a submission carries it, and as the
	// API's path names it.
	MaxIDLen = 128
)

// Job is a job submission with the rules of the job model as methods. It is
// the wire type itself (a conversion, not a copy): Of(sub).Validate(reg).
type Job wire.JobSubmission

// Of is sub seen as a Job.
func Of(sub *wire.JobSubmission) *Job { return (*Job)(sub) }

// Submission is j as the wire type.
func (j *Job) Submission() *wire.JobSubmission { return (*wire.JobSubmission)(j) }

// NewID is the id a role assigns to the job numbered n by its snowflake
// generator, when the submission carries none.
func NewID(n uint64) string { return fmt.Sprintf("j-%016x", n) }

// Canonicalize fills in what a submission left out: the id (from next, a
// role's id generator), the default timeout and the submission time. It
// changes nothing a submission set, so applying it again, on another role,
// is a no-op.
func (j *Job) Canonicalize(now time.Time, next func() uint64) {
	if j.JobID == "" {
		j.JobID = NewID(next())
	}
	if j.Timeout == 0 {
		j.Timeout = DefaultTimeout
	}
	if j.SubmittedAt == 0 {
		j.SubmittedAt = now.UnixNano()
	}
}

// Validate checks a submission from the network or the API before anything
// is stored. Every workflow's params are decoded and validated with reg,
// since a spec may come from any API client. It reports every problem.
func (j *Job) Validate(reg *workflow.Registry) error { return j.validate(reg) }

// ValidateShape is every rule of Validate that holds without a workflow
// registry: the id, the counts, the timeout, the thresholds and the shape
// of split workflows. A gate checks it at its door, so it refuses what every
// manager would; which workflow types exist and what their params mean is
// the datacenters' part (their registries decide).
func (j *Job) ValidateShape() error { return j.validate(nil) }

// validate is Validate, without the type checks when reg is nil.
func (j *Job) validate(reg *workflow.Registry) error {
	var errs []error
	if j.JobID != "" {
		if err := CheckID(j.JobID); err != nil {
			errs = append(errs, err)
		}
	}
	if len(j.Workflows) == 0 {
		errs = append(errs, errors.New("job has no workflows"))
	}
	if len(j.Workflows) > MaxWorkflows {
		errs = append(errs, fmt.Errorf("job has %d workflows, more than %d", len(j.Workflows), MaxWorkflows))
	}
	if j.Timeout < 0 {
		errs = append(errs, fmt.Errorf("negative timeout %s", j.Timeout))
	}
	for i, spec := range j.Workflows {
		if reg != nil {
			if err := reg.Validate(spec); err != nil {
				errs = append(errs, fmt.Errorf("workflows[%d]: %w", i, err))
			}
		}
		if err := workflow.ValidateThresholds(spec.Thresholds); err != nil {
			errs = append(errs, fmt.Errorf("workflows[%d]: %w", i, err))
		}
	}
	shape := checkShape(j.Workflows)
	errs = append(errs, shape...)
	if reg != nil && len(shape) == 0 {
		errs = append(errs, checkParts(reg, j.Workflows)...)
	}
	return errors.Join(errs...)
}

// checkParts checks together the parts of each workflow whose type wants
// them checked so (workflow.PartsChecker).
func checkParts(reg *workflow.Registry, specs []wire.WorkflowSpec) []error {
	var errs []error
	for _, g := range Groups(specs) {
		typ, ok := reg.Lookup(specs[g.Start].Type)
		pc, checks := typ.(workflow.PartsChecker)
		if !ok || !checks {
			continue
		}
		parts := make([][]byte, 0, g.Len())
		for _, spec := range specs[g.Start:g.End] {
			parts = append(parts, spec.Params)
		}
		if err := pc.CheckParts(parts); err != nil {
			errs = append(errs, fmt.Errorf("workflows[%d]: %w", g.Start, err))
		}
	}
	return errs
}

// checkShape checks what Groups relies on: names are unique but for the
// shards of one split workflow, which are consecutive and numbered
// 1..Shards.
func checkShape(specs []wire.WorkflowSpec) []error {
	var errs []error
	names := make(map[string]bool, len(specs))
	for i, spec := range specs {
		if err := checkShard(specs, i); err != nil {
			errs = append(errs, fmt.Errorf("workflows[%d]: %w", i, err))
		} else if names[spec.Name] && spec.Shard <= 1 {
			errs = append(errs, fmt.Errorf("workflows[%d]: duplicate name %q", i, spec.Name))
		}
		names[spec.Name] = true
	}
	return errs
}

// checkShard checks that the shards of a split workflow are consecutive
// specs of one name, numbered 1..Shards: the shape Groups relies on. A
// later shard first in the list has no shard before it (this used to read
// specs[-1] and panic).
func checkShard(specs []wire.WorkflowSpec, i int) error {
	spec := specs[i]
	switch {
	case spec.Shards == 0 && spec.Shard == 0:
		return nil
	case spec.Shards < 2 || spec.Shards > workflow.MaxShards || spec.Shard < 1 || spec.Shard > spec.Shards:
		return fmt.Errorf("shard %d of %d is out of range", spec.Shard, spec.Shards)
	case spec.Shard > 1 && (i == 0 || specs[i-1].Name != spec.Name || specs[i-1].Shard != spec.Shard-1 || specs[i-1].Shards != spec.Shards):
		return fmt.Errorf("shard %d of %q does not follow shard %d", spec.Shard, spec.Name, spec.Shard-1)
	case spec.Shard < spec.Shards && (i+1 >= len(specs) || specs[i+1].Name != spec.Name):
		return fmt.Errorf("workflow %q has shard %d of %d but not the next", spec.Name, spec.Shard, spec.Shards)
	}
	return nil
}

// Refusal is the answer to a submission Validate (or ValidateShape)
// refused: a typed rejection saying why, the same from a gate and a
// manager. A nil err is nil.
func Refusal(err error) error {
	if err == nil {
		return nil
	}
	return wire.Errorf(wire.CodeRejected, "invalid job: %v", err)
}

// CheckID is the one rule for a job id, wherever one arrives: in a
// submission (a role takes it as the job's id) and in the API's path (a
// client reads the job by it). 1 to MaxIDLen ASCII letters, digits and
// "- _ . :" — what the product makes (NewID, an idempotency key's id) and
// what a URL path carries unescaped, so an id a submission was accepted
// with is always one a client can read back.
func CheckID(id string) error {
	if id == "" {
		return errors.New("job id is empty")
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("job id is %d bytes, more than %d", len(id), MaxIDLen)
	}
	for _, c := range []byte(id) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '-', c == '_', c == '.', c == ':':
		default:
			return fmt.Errorf("job id %q: only letters, digits and - _ . : are allowed, no spaces or other characters", id)
		}
	}
	return nil
}

// Groups is j's workflows cut into groups (see Groups).
func (j *Job) Groups() []Group { return Groups(j.Workflows) }
