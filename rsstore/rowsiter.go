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
	pages   []flatRows // in version order
	version uint64     // the task's version the pages are the rows of
	page    int        // the next page to open
	row     int        // rows read of the page open
	r       wire.RowsReader
}

// RowsCursor returns a cursor at the first of task t's output rows.
func (s *Store) RowsCursor(t wire.RainstormTask) RowsCursor {
	c, _ := s.RowsCursorAt(t, 0)
	return c
}

// RowsCursorAt returns a cursor at the first of task t's output rows as
// they stood at the task's version (0: its latest): the pages of the
// versions up to it in the task's lineage. Pages are never changed once
// stored and the lineage only grows, so the same version gives the same
// rows later, and on another manager holding the same durable
// checkpoints, which is what lets a paged read resume on them. False when
// the store has not reached version.
func (s *Store) RowsCursorAt(t wire.RainstormTask, version uint64) (RowsCursor, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.tasks[t]
	if st == nil || st.latest == nil {
		return RowsCursor{}, version == 0
	}
	if version == 0 {
		version = st.latest.Version
	}
	if version > st.latest.Version {
		return RowsCursor{}, false
	}
	c := RowsCursor{version: version}
	for _, k := range slices.SortedFunc(maps.Keys(st.rows), compareVer) {
		// The versions Rows takes: up to the latest, each of the
		// incarnation that wrote it in the task's lineage.
		if w := writer(st.latest, k.version); k.version <= version && (k.inc == 0 || w == 0 || k.inc == w) {
			c.pages = append(c.pages, st.rows[k])
		}
	}
	return c, true
}

// Version is the task's version the cursor's rows are those of (0 for a
// task with no checkpoint).
func (c *RowsCursor) Version() uint64 { return c.version }

// Shape is the cursor's pages and rows in all, counted from each page's
// head without reading its rows.
func (c *RowsCursor) Shape() (pages int, rows uint64) {
	for _, p := range c.pages {
		rows += uint64(rowsIn(p))
	}
	return len(c.pages), rows
}

// rowsIn is the number of rows in page, read from its head.
func rowsIn(page flatRows) int {
	r, err := wire.NewRowsReader(page)
	if err != nil {
		panic("rsstore: rows this store encoded do not read: " + err.Error())
	}
	return r.Len()
}

// Pos is where the cursor stands: the page and the row in it that Next
// reads next (past any page with no rows).
func (c *RowsCursor) Pos() (page, row int) {
	if c.r.Len() > 0 {
		return c.page - 1, c.row
	}
	for p := c.page; p < len(c.pages); p++ {
		if rowsIn(c.pages[p]) > 0 {
			return p, 0
		}
	}
	return len(c.pages), 0
}

// Seek moves a fresh cursor to row of page (as Pos gives them), stepping
// over the page's rows before it; false when there is no such row.
func (c *RowsCursor) Seek(page, row int) bool {
	if page < 0 || row < 0 || page >= len(c.pages) {
		return false
	}
	c.page, c.r, c.row = page, wire.RowsReader{}, 0
	if !c.open() || row >= c.r.Len() {
		return false
	}
	for range row {
		c.Skip()
	}
	return true
}

// Next returns the next row, or false after the last one.
func (c *RowsCursor) Next() (wire.RainstormRecord, bool) {
	for {
		if rec, ok := c.r.Next(); ok {
			c.row++
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
			c.row++
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
	c.r, c.row = r, 0
	c.page++
	return true
}
