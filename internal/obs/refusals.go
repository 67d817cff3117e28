package obs

import (
	"sync"
	"time"
)

// Refusals counts requests a node refused for their sender, by message
// type K, for a `*_unauthorized_total{type}` series, and paces the log
// lines about them: at most one per type per RefusalLogEvery, naming how
// many went unlogged since, so a flood of forged requests costs no log
// volume. The zero value is ready to use.
type Refusals[K comparable] struct {
	mu       sync.Mutex
	n        map[K]uint64
	loggedAt map[K]time.Time
	unlogged map[K]uint64
}

// RefusalLogEvery is how often a refusal of one type is logged at most.
const RefusalLogEvery = time.Second

// Add counts one refusal of type t at now and reports whether to log it,
// and how many refusals of t were not logged before it.
func (c *Refusals[K]) Add(t K, now time.Time) (log bool, skipped uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n, c.loggedAt, c.unlogged = map[K]uint64{}, map[K]time.Time{}, map[K]uint64{}
	}
	c.n[t]++
	if at, ok := c.loggedAt[t]; ok && now.Sub(at) < RefusalLogEvery {
		c.unlogged[t]++
		return false, 0
	}
	c.loggedAt[t] = now
	skipped = c.unlogged[t]
	c.unlogged[t] = 0
	return true, skipped
}

// Snapshot is the count of refusals by type.
func (c *Refusals[K]) Snapshot() map[K]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[K]uint64, len(c.n))
	for t, n := range c.n {
		out[t] = n
	}
	return out
}
