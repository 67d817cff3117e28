package worker

import (
	"fmt"
	"slices"
)

// CoreSet tracks which workflow holds each of the worker's cores, in both
// directions (core index → workflow, workflow → cores), so that freeing a
// workflow and reporting a core's owner are both cheap. It is not safe for
// concurrent use; the Worker guards it with its mutex.
type CoreSet struct {
	owner []string         // core index → workflow id, "" when free
	held  map[string][]int // workflow id → its cores, ascending
	free  int              // count of "" in owner
}

// InsufficientCoresError is returned (wrapped) when an allocation does not fit.
type InsufficientCoresError struct {
	Need, Free int
}

func (e *InsufficientCoresError) Error() string {
	return fmt.Sprintf("needs %d cores, %d free", e.Need, e.Free)
}

// NewCoreSet returns a set of total free cores, indexed 0..total-1.
func NewCoreSet(total int) *CoreSet {
	return &CoreSet{owner: make([]string, total), held: make(map[string][]int), free: total}
}

// Total is the number of cores in the set.
func (s *CoreSet) Total() int { return len(s.owner) }

// Available is the number of free cores.
func (s *CoreSet) Available() int { return s.free }

// Allocate gives workflow n free cores, lowest indices first, and returns
// them. A workflow holds at most one allocation: a second one is refused
// rather than merged, since it would mean two runs share an id.
func (s *CoreSet) Allocate(workflowID string, n int) ([]int, error) {
	switch {
	case workflowID == "":
		return nil, fmt.Errorf("allocate cores: empty workflow id")
	case n < 1:
		return nil, fmt.Errorf("allocate cores for %s: need at least 1, got %d", workflowID, n)
	}
	if _, dup := s.held[workflowID]; dup {
		return nil, fmt.Errorf("allocate cores for %s: already holds %v", workflowID, s.held[workflowID])
	}
	if n > s.free {
		return nil, &InsufficientCoresError{Need: n, Free: s.free}
	}
	cores := make([]int, 0, n)
	for i, o := range s.owner {
		if o != "" {
			continue
		}
		s.owner[i] = workflowID
		cores = append(cores, i)
		if len(cores) == n {
			break
		}
	}
	s.held[workflowID] = cores
	s.free -= n
	return slices.Clone(cores), nil
}

// Free releases workflow's cores and returns how many it held (0 if none,
// so freeing twice is harmless).
func (s *CoreSet) Free(workflowID string) int {
	cores, ok := s.held[workflowID]
	if !ok {
		return 0
	}
	for _, c := range cores {
		s.owner[c] = ""
	}
	delete(s.held, workflowID)
	s.free += len(cores)
	return len(cores)
}

// Cores returns workflow's cores, or nil if it holds none.
func (s *CoreSet) Cores(workflowID string) []int {
	return slices.Clone(s.held[workflowID])
}

// Owner returns the workflow holding core, or "" if it is free or out of
// range.
func (s *CoreSet) Owner(core int) string {
	if core < 0 || core >= len(s.owner) {
		return ""
	}
	return s.owner[core]
}
