package leadership

import (
	"errors"
	"sync"
)

// HardState is the part of a node's election state that must survive a
// crash: forgetting the term lets a node accept a deposed leader, and
// forgetting the vote lets it vote twice in one term.
type HardState struct {
	Term     uint64 `cbor:"1,keyasint"`
	VotedFor string `cbor:"2,keyasint,omitempty"`
	// Config is the newest group configuration this node has stored
	// (nil: the static one from its config file). It is saved with the
	// term and vote, in one fsync, before the node acknowledges it. The
	// pointer is replaced, never mutated, so HardState stays comparable.
	Config *Configuration `cbor:"3,keyasint,omitempty"`
}

// Storage keeps a HardState durably. Save must not return until the state
// would survive a crash (fsync); the Machine releases votes and vote
// requests only after Save returns nil.
type Storage interface {
	Load() (HardState, error)
	Save(HardState) error
}

// ErrCorruptState is wrapped by Load when stored state cannot be decoded.
// Starting with a zero term instead would risk a double vote, so callers
// should stop and ask an operator rather than carry on.
var ErrCorruptState = errors.New("corrupt leadership state")

// MemoryStorage is a Storage that lives as long as the value does. It is
// "durable" across a simulated crash as long as the test keeps it, which is
// what the simulation and unit tests need.
type MemoryStorage struct {
	mu    sync.Mutex
	hs    HardState
	saves int
}

// NewMemoryStorage returns an empty MemoryStorage.
func NewMemoryStorage() *MemoryStorage { return &MemoryStorage{} }

// Load returns the last saved HardState.
func (s *MemoryStorage) Load() (HardState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hs, nil
}

// Save records hs.
func (s *MemoryStorage) Save(hs HardState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hs = hs
	s.saves++
	return nil
}

// Saves counts successful Save calls, so tests can see that unchanged state
// is not rewritten.
func (s *MemoryStorage) Saves() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saves
}
