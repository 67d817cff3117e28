package swim

import (
	"sync"
	"time"
)

// VersionedClock remembers, per entity (a worker or manager id), the newest
// state version applied, so that a heartbeat overtaken by a newer one, on
// a different path or from a slower prober, is recognised and dropped.
//
// Versions are only comparable within one incarnation of the entity: a
// process that restarts and counts from 1 again looks stale until the
// receiver calls Forget (on OnDead or OnJoin) or the entry ages out. Senders
// avoid the problem by starting their counter from the wall clock.
//
// Safe for concurrent use.
type VersionedClock struct {
	now func() time.Time

	mu       sync.Mutex
	entities map[string]clockEntry
}

type clockEntry struct {
	version uint64
	updated time.Time
}

// NewVersionedClock returns an empty clock. now supplies the time used by
// CleanupOlderThan; nil means time.Now.
func NewVersionedClock(now func() time.Time) *VersionedClock {
	if now == nil {
		now = time.Now
	}
	return &VersionedClock{now: now, entities: make(map[string]clockEntry)}
}

// IsStale reports whether version is no newer than the one already applied
// for entity. An unknown entity is never stale.
func (c *VersionedClock) IsStale(entity string, version uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entities[entity]
	return ok && version <= e.version
}

// Update records version for entity if it is newer than the one applied,
// and reports whether it was. A repeat of the current version is not
// newer.
func (c *VersionedClock) Update(entity string, version uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entities[entity]; ok && version <= e.version {
		return false
	}
	c.entities[entity] = clockEntry{version: version, updated: c.now()}
	return true
}

// ShouldAccept is the check and the record in one step, for use as a guard:
//
//	if !clock.ShouldAccept(hb.NodeID, hb.Version) {
//		return // stale
//	}
//
// Calling IsStale and then Update instead leaves a window in which two
// goroutines can both accept out of order. It is the same operation as
// Update, named for how it reads at the call site.
func (c *VersionedClock) ShouldAccept(entity string, version uint64) bool {
	return c.Update(entity, version)
}

// Version returns the newest version applied for entity.
func (c *VersionedClock) Version(entity string) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entities[entity]
	return e.version, ok
}

// Forget drops entity, so its next version is accepted whatever it is.
func (c *VersionedClock) Forget(entity string) {
	c.mu.Lock()
	delete(c.entities, entity)
	c.mu.Unlock()
}

// CleanupOlderThan drops entities whose version last moved more than age
// ago, returning how many it dropped. Roles run it periodically so departed
// nodes do not accumulate and a restarted one is eventually accepted.
func (c *VersionedClock) CleanupOlderThan(age time.Duration) int {
	cutoff := c.now().Add(-age)
	c.mu.Lock()
	defer c.mu.Unlock()
	dropped := 0
	for id, e := range c.entities {
		if e.updated.Before(cutoff) {
			delete(c.entities, id)
			dropped++
		}
	}
	return dropped
}

// Len is the number of entities tracked.
func (c *VersionedClock) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entities)
}
