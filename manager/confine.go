package manager

import (
	"fmt"

	"tempest/rainstorm"
	"tempest/wire"
)

// Job confinement (docs/security.md): an exec stage or a `path:` source
// runs only on a worker whose config allows it. Workers say what they
// allow in their registration (wire.Confinement); the leader refuses at
// submit a pipeline some task of which no registered worker may run, and
// places each such task only on a worker that may.

// permits reports whether some registered worker of the datacenter may
// meet n: nil, or why none may.
func (t *workerTable) permits(n rainstorm.Need) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	// The reason given is the closest worker's: one that has the kind of
	// thing n asks for turned on ("not in exec.programs") says more than
	// one that has it off; ties go to the lowest id, so the answer does
	// not depend on map order.
	var (
		why     error
		whyRank = 2
		whyID   string
	)
	registered := 0
	for id, e := range t.w {
		if !e.Registered || e.Gone {
			continue
		}
		registered++
		err := rainstorm.Permits(e.Confinement, n)
		if err == nil {
			return nil
		}
		rank := 1
		if c := e.Confinement; c != nil && ((n.Path != "" && len(c.SourceDirs) > 0) || (n.Path == "" && c.Exec)) {
			rank = 0
		}
		if rank < whyRank || (rank == whyRank && id < whyID) {
			why, whyRank, whyID = err, rank, id
		}
	}
	if registered == 0 {
		return fmt.Errorf("%w (no worker has registered yet)", rainstorm.Permits(nil, n))
	}
	return why
}

// allowing is the set of workers that may meet every one of needs.
func (t *workerTable) allowing(needs []rainstorm.Need) map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]bool, len(t.w))
	for id, e := range t.w {
		if permitsAll(e.Confinement, needs) {
			out[id] = true
		}
	}
	return out
}

func permitsAll(c *wire.Confinement, needs []rainstorm.Need) bool {
	for _, n := range needs {
		if rainstorm.Permits(c, n) != nil {
			return false
		}
	}
	return true
}

// taskNeeds is what a pipeline task needs of its worker beyond cores,
// decoded once per workflow (the params do not change). Under Manager.mu:
// it reads the task's group.
func taskNeeds(w *workflowState) []rainstorm.Need {
	if !isPipeline(w) {
		return nil
	}
	if !w.needsKnown {
		// A task's params may name the spec its pipeline's first task
		// holds (stored once per workflow): what it needs is read from
		// the whole.
		params, err := rainstorm.Resolve(groupMembersLocked(w)[0].rec.Spec.Params, w.rec.Spec.Params)
		if err == nil {
			if p, err := rainstorm.DecodeTaskParams(params); err == nil {
				w.needs = p.Needs()
			}
		}
		w.needsKnown = true
	}
	return w.needs
}

// checkConfinement refuses a submission with a pipeline task that no
// worker of the datacenter may run, naming the workflow and the job
// file's key. (Through a manager's API the same check ran while the job
// file was parsed, with its line: rainstormParseOptions.)
func (m *Manager) checkConfinement(sub *wire.JobSubmission) error {
	seen := map[string]bool{}
	for _, spec := range sub.Workflows {
		if spec.Type != rainstorm.TypeName {
			continue
		}
		p, err := rainstorm.DecodeTaskParams(spec.Params)
		if err != nil || p.Ref {
			continue // Validate has refused it already, or the first task holds the spec
		}
		for _, n := range rainstorm.PipelineNeeds(&p.Spec, p.Programs) {
			key := spec.Name + "\x00" + n.Field
			if seen[key] {
				continue
			}
			seen[key] = true
			if err := m.workers.permits(n); err != nil {
				return wire.Errorf(wire.CodeRejected, "invalid job: workflow %q: %s: no worker of datacenter %s allows %s: %v",
					spec.Name, n.Field, m.cfg.Datacenter, n, err)
			}
		}
	}
	return nil
}

// RainstormParseOptions are the parse options of this manager's API: a
// pipeline no worker of the datacenter may run is refused while the job
// file is read, at its line.
func (m *Manager) RainstormParseOptions() rainstorm.ParseOptions {
	return rainstorm.ParseOptions{Permit: func(n rainstorm.Need) error {
		if err := m.workers.permits(n); err != nil {
			return fmt.Errorf("no worker of datacenter %s allows %s: %w", m.cfg.Datacenter, n, err)
		}
		return nil
	}}
}
