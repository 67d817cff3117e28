package rsstore

import (
	"maps"
	"slices"

	"tempest/wire"
)

// RowsCursor reads a task's output rows in the order Rows returns them,
// one record at a time, from the pages (a checkpoint's flat rows each) the
// store holds in memory anyway: a results read of a million rows then
// holds the records it is on, not a million decoded ones.
//
// The cursor is a snapshot, taken by RowsCursor, of which pages are the
// task's lineage: pages are never changed once stored, so it reads on
// without the store's lock and unaffected by checkpoints landing meanwhile.
// It is a value: a copy reads on from where the original stood,
// independently of it.
type RowsCursor struct {
	pages []flatRows // in version order
	page  int        // the next page to open
	r     wire.RowsReader
}

// RowsCursor returns a cursor at the first of task t's output rows.
func (s *Store) RowsCursor(t wire.RainstormTask) RowsCursor {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.tasks[t]
	if st == nil || st.latest == nil {
		return RowsCursor{}
	}
	var c RowsCursor
	for _, k := range slices.SortedFunc(maps.Keys(st.rows), compareVer) {
		// The versions Rows takes: up to the latest, each of the
		// incarnation that wrote it in the task's lineage.
		if w := writer(st.latest, k.version); k.version <= st.latest.Version && (k.inc == 0 || w == 0 || k.inc == w) {
			c.pages = append(c.pages, st.rows[k])
		}
	}
	return c
}

// Next returns the next row, or false after the last one.
func (c *RowsCursor) Next() (wire.RainstormRecord, bool) {
	for {
		if rec, ok := c.r.Next(); ok {
			return rec, true
		}
		if !c.open() {
			return wire.RainstormRecord{}, false
		}
	}
}

// Skip steps over the next row without making it: its id and its first
// field (nil when it has none), a view of the store's page that stays
// valid, as pages never change. False after the last row.
func (c *RowsCursor) Skip() (id uint64, first []byte, ok bool) {
	for {
		if id, first, ok := c.r.Skip(); ok {
			return id, first, true
		}
		if !c.open() {
			return 0, nil, false
		}
	}
}

// open moves to the next page once the current one is read; false when
// none is left.
func (c *RowsCursor) open() bool {
	if err := c.r.Err(); err != nil {
		// The store encoded every page itself (flatten), so this is a
		// broken invariant, as flatRows.records says.
		panic("rsstore: rows this store encoded do not read: " + err.Error())
	}
	if c.page >= len(c.pages) {
		return false
	}
	r, err := wire.NewRowsReader(c.pages[c.page])
	if err != nil {
		panic("rsstore: rows this store encoded do not read: " + err.Error())
	}
	c.r = r
	c.page++
	return true
}
