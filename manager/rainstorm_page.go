package manager

import (
	"context"
	"fmt"

	"tempest/api"
	"tempest/rsstore"
	"tempest/wire"
)

// A gate reads a pipeline's output from the leader page by page. Each page
// hands back where the merge of the output's runs stopped (a resume
// cursor), so the next page starts there: a read of K pages of an N-row
// output steps over the rows once to find the runs and makes each row once,
// rather than reading the merge through K times. The cursor pins the
// output to the rows of each task's version when the read began, so a
// running pipeline's read sees one output, and a leader holding the same
// durable checkpoints (any leader: it has read a majority's) continues it.
// A leader that holds other rows under those versions refuses the cursor
// (wire.CodeStaleFence) and the reader asks again by offset.

// rsCursorFormat is the layout of rsPageCursor; a cursor of another is
// refused.
const rsCursorFormat = 1

// Bounds on a cursor from the network: a stage has far fewer tasks, a task
// far fewer rows.
const (
	rsCursorMaxTasks = 1 << 16
	rsCursorMaxRows  = 1 << 40
)

// rsPageCursor is where a paged read stands: the shape of each task's rows
// it reads (pinned), the runs with rows still to give, and the rows given.
type rsPageCursor struct {
	Format int            `cbor:"1,keyasint"`
	Tasks  []rsCursorTask `cbor:"2,keyasint,omitempty"`
	Runs   []rsCursorRun  `cbor:"3,keyasint,omitempty"`
	Offset uint64         `cbor:"4,keyasint,omitempty"`
}

// rsCursorTask is one task's rows as the read began: its version and the
// pages and rows that version's lineage holds.
type rsCursorTask struct {
	Version uint64 `cbor:"1,keyasint,omitempty"`
	Pages   int    `cbor:"2,keyasint,omitempty"`
	Rows    uint64 `cbor:"3,keyasint,omitempty"`
}

// rsCursorRun is an ascending run with rows still to give: the task it is
// of, the page and row of its next row, and its rows left counting that
// one.
type rsCursorRun struct {
	Task int    `cbor:"1,keyasint,omitempty"`
	Page int    `cbor:"2,keyasint,omitempty"`
	Row  int    `cbor:"3,keyasint,omitempty"`
	Left uint64 `cbor:"4,keyasint"`
}

// rsStaleCursor refuses a cursor: the reader asks again by offset.
func rsStaleCursor(format string, args ...any) error {
	return wire.Errorf(wire.CodeStaleFence, "output cursor: "+format, args...)
}

// rsDecodePageCursor decodes a cursor from the network and checks it is
// self-consistent: every run within its task's pages, and the rows left
// plus the rows given the rows in all. Whether it names rows this manager
// holds is checked against the store (rsOutputPage).
func rsDecodePageCursor(b []byte) (*rsPageCursor, error) {
	var c rsPageCursor
	if err := wire.Unmarshal(b, &c); err != nil {
		return nil, rsStaleCursor("%v", err)
	}
	if c.Format != rsCursorFormat {
		return nil, rsStaleCursor("format %d, not %d", c.Format, rsCursorFormat)
	}
	// Bounds far past any real output keep the sums below from wrapping.
	if len(c.Tasks) > rsCursorMaxTasks {
		return nil, rsStaleCursor("%d tasks", len(c.Tasks))
	}
	var total uint64
	for _, t := range c.Tasks {
		if t.Pages < 0 || t.Rows > rsCursorMaxRows {
			return nil, rsStaleCursor("a task of %d pages and %d rows", t.Pages, t.Rows)
		}
		total += t.Rows
	}
	if c.Offset > total {
		return nil, rsStaleCursor("%d rows given of %d", c.Offset, total)
	}
	left := c.Offset
	for _, r := range c.Runs {
		if r.Task < 0 || r.Task >= len(c.Tasks) || r.Page < 0 || r.Page >= c.Tasks[r.Task].Pages || r.Row < 0 ||
			r.Left == 0 || r.Left > c.Tasks[r.Task].Rows {
			return nil, rsStaleCursor("a run at task %d page %d row %d of %d rows is outside the output", r.Task, r.Page, r.Row, r.Left)
		}
		left += r.Left
		if left > total {
			break
		}
	}
	if left != total {
		return nil, rsStaleCursor("%d rows given and left of %d", left, total)
	}
	return &c, nil
}

// rsOutputPage is the page of a pipeline's output a gate asked for: from
// the cursor when it brings one, else from row msg.Offset, with a cursor
// to the next page unless it is the last. Total is the output's rows, as
// pinned by the cursor, counted from the pages' heads.
func (m *Manager) rsOutputPage(ctx context.Context, msg *wire.RainstormOutputRequest) (*wire.RainstormOutputPage, error) {
	var pc *rsPageCursor
	if len(msg.Cursor) > 0 {
		var err error
		if pc, err = rsDecodePageCursor(msg.Cursor); err != nil {
			return nil, err
		}
	}
	out, src, err := m.pipelineSummary(ctx, msg.Job, msg.Workflow)
	if err != nil {
		return nil, err
	}
	if pc != nil && len(pc.Tasks) != len(src.tasks) {
		return nil, rsStaleCursor("%d tasks, the output has %d", len(pc.Tasks), len(src.tasks))
	}
	srcs := make([]rsstore.RowsCursor, len(src.tasks))
	shape := make([]rsCursorTask, len(src.tasks))
	var total uint64
	for i, t := range src.tasks {
		var v uint64
		if pc != nil {
			if v = pc.Tasks[i].Version; v == 0 {
				if pc.Tasks[i] != (rsCursorTask{}) {
					return nil, rsStaleCursor("task %d/%d has rows at no version", t.Stage, t.Index)
				}
				continue // the task had no checkpoint when the read began
			}
		}
		c, ok := m.rs.RowsCursorAt(t, v)
		if !ok {
			return nil, rsStaleCursor("task %d/%d has not reached version %d here", t.Stage, t.Index, v)
		}
		pages, rows := c.Shape()
		srcs[i], shape[i] = c, rsCursorTask{Version: c.Version(), Pages: pages, Rows: rows}
		if pc != nil && shape[i] != pc.Tasks[i] {
			return nil, rsStaleCursor("task %d/%d holds %d pages of %d rows at version %d here, not %d of %d",
				t.Stage, t.Index, pages, rows, v, pc.Tasks[i].Pages, pc.Tasks[i].Rows)
		}
		total += rows
	}
	var runs []rsRun[rsstore.RowsCursor]
	offset := msg.Offset
	if pc == nil {
		runs = rsFindRuns(srcs, src.aggregate)
	} else {
		offset = pc.Offset
		for _, r := range pc.Runs {
			c := srcs[r.Task]
			if !c.Seek(r.Page, r.Row) {
				return nil, rsStaleCursor("task %d has no row %d in page %d", r.Task, r.Row, r.Page)
			}
			runs = append(runs, rsRun[rsstore.RowsCursor]{task: r.Task, cur: c, left: int(r.Left)})
		}
	}
	merge := rsNewMerge(runs, src.aggregate)
	p := api.OutputPageHead(out)
	p.Total, p.Offset = total, min(offset, total)
	if pc == nil {
		// By offset: an old reader, or a cursor refused. The rows before
		// it are merged through once.
		for range p.Offset {
			if _, ok := merge.next(); !ok {
				break
			}
		}
	}
	size := 0
	for {
		rec, ok := merge.peek()
		if !ok {
			return p, nil
		}
		n := api.OutputRowSize(rec.Fields)
		if len(p.Rows) > 0 && size+n > api.OutputPageBudget {
			break
		}
		size += n
		merge.next()
		p.Rows = append(p.Rows, rec.Fields)
	}
	next := rsPageCursor{Format: rsCursorFormat, Tasks: shape, Offset: p.Offset + uint64(len(p.Rows))}
	for _, r := range merge.pending() {
		page, row := r.cur.Pos()
		next.Runs = append(next.Runs, rsCursorRun{Task: r.task, Page: page, Row: row, Left: uint64(r.left)})
	}
	if p.Cursor, err = wire.Marshal(&next); err != nil {
		return nil, fmt.Errorf("output cursor: %w", err)
	}
	return p, nil
}
