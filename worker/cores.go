package worker

import (
	"fmt"
	"slices"
)

// CoreSet tracks which holder owns each of the worker's cores, in both
// directions (core index → holder, holder → cores), so that freeing a
// workflow and reporting a core's owner are both cheap. A holder is a
// workflow, or a slot: the tasks of one pipeline slot share one allocation
// (docs/rainstorm.md, "Placement"), made by the first and given back when
// the last of them ends. It is not safe for concurrent use; the Worker
// guards it with its mutex.
type CoreSet struct {
	owner   []string          // core index → holder, "" when free
	held    map[string][]int  // holder → its cores, ascending
	members map[string]int    // holder → workflows sharing it
	holder  map[string]string // workflow id → its holder
	free    int               // count of "" in owner
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
	return &CoreSet{owner: make([]string, total), held: make(map[string][]int), members: make(map[string]int),
		holder: make(map[string]string), free: total}
}

// slotHolder names a slot among holders: workflow ids hold no spaces (they
// are job ids, which allow none, and a number), so the two never collide.
func slotHolder(slot string) string { return "slot " + slot }

// Total is the number of cores in the set.
func (s *CoreSet) Total() int { return len(s.owner) }

// Available is the number of free cores.
func (s *CoreSet) Available() int { return s.free }

// Allocate gives workflow n free cores of its own, lowest indices first,
// and returns them. A workflow holds at most one allocation: a second one
// is refused rather than merged, since it would mean two runs share an id.
func (s *CoreSet) Allocate(workflowID string, n int) ([]int, error) {
	return s.AllocateIn(workflowID, "", n)
}

// AllocateIn is Allocate for a workflow of a slot: the first workflow of
// slot on this worker allocates n cores for the slot, later ones share
// them (n is then not checked against them: a slot's size is its first
// task's). With slot empty it is Allocate.
func (s *CoreSet) AllocateIn(workflowID, slot string, n int) ([]int, error) {
	switch {
	case workflowID == "":
		return nil, fmt.Errorf("allocate cores: empty workflow id")
	case n < 1:
		return nil, fmt.Errorf("allocate cores for %s: need at least 1, got %d", workflowID, n)
	}
	if h, dup := s.holder[workflowID]; dup {
		return nil, fmt.Errorf("allocate cores for %s: already holds %v", workflowID, s.held[h])
	}
	h := workflowID
	if slot != "" {
		h = slotHolder(slot)
		if cores, ok := s.held[h]; ok {
			s.holder[workflowID] = h
			s.members[h]++
			return slices.Clone(cores), nil
		}
	}
	if n > s.free {
		return nil, &InsufficientCoresError{Need: n, Free: s.free}
	}
	cores := make([]int, 0, n)
	for i, o := range s.owner {
		if o != "" {
			continue
		}
		s.owner[i] = h
		cores = append(cores, i)
		if len(cores) == n {
			break
		}
	}
	s.held[h] = cores
	s.members[h] = 1
	s.holder[workflowID] = h
	s.free -= n
	return slices.Clone(cores), nil
}

// Free releases workflow's share of its cores and returns how many cores
// became free: 0 if it held none (so freeing twice is harmless) or if
// other workflows of its slot still hold them.
func (s *CoreSet) Free(workflowID string) int {
	h, ok := s.holder[workflowID]
	if !ok {
		return 0
	}
	delete(s.holder, workflowID)
	if s.members[h]--; s.members[h] > 0 {
		return 0
	}
	cores := s.held[h]
	for _, c := range cores {
		s.owner[c] = ""
	}
	delete(s.held, h)
	delete(s.members, h)
	s.free += len(cores)
	return len(cores)
}

// Cores returns workflow's cores (its slot's, shared), or nil if it holds
// none.
func (s *CoreSet) Cores(workflowID string) []int {
	h, ok := s.holder[workflowID]
	if !ok {
		return nil
	}
	return slices.Clone(s.held[h])
}

// Owner returns the holder of core: a workflow id, "slot " and the slot's
// name for a shared one, or "" if it is free or out of range.
func (s *CoreSet) Owner(core int) string {
	if core < 0 || core >= len(s.owner) {
		return ""
	}
	return s.owner[core]
}
