package jobs

import "sync"

// Memo shares one build of a value among the readers of one change. A
// job's merged workflows decode every step histogram of every part; with
// several watchers of one job, each would decode them all again for the
// same update. Keyed by what identifies the update (a change counter, a
// change channel), the first reader builds and the rest take its result.
// A Memo is safe for concurrent use; readers of one key wait for its one
// build. The value is shared: readers must not modify it.
type Memo[K comparable, V any] struct {
	mu  sync.Mutex
	key K
	val V
	ok  bool
	// builds counts builds, for tests.
	builds int
}

// Get returns the value built for key, building it with build if the last
// build was for another key.
func (m *Memo[K, V]) Get(key K, build func() V) V {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ok && m.key == key {
		return m.val
	}
	m.val, m.key, m.ok = build(), key, true
	m.builds++
	return m.val
}

// Builds is how many times Get built a value.
func (m *Memo[K, V]) Builds() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.builds
}
