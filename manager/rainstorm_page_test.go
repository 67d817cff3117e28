package manager

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"

	"tempest/wire"
)

// seedInterleaved stores pages checkpoints of perPage rows each on p's
// last-stage task, keyed so that every checkpoint is an ascending run of
// its own and the runs interleave: the output, sorted by key, is key
// 0..pages*perPage-1. The last checkpoint is Done when done.
func seedInterleaved(t *testing.T, p onePipeline, pages, perPage int, done bool) {
	t.Helper()
	call := rsCaller(t, p.c, "w1", p.lead)
	call(&wire.RainstormOpen{Task: p.task, Incarnation: p.inc})
	for v := range pages {
		rows := make([]wire.RainstormRecord, perPage)
		for i := range rows {
			rows[i] = wire.RainstormRecord{Fields: []string{fmt.Sprintf("key-%08d", i*pages+v), "5"}}
		}
		last := done && v == pages-1
		ck := &wire.RainstormCheckpoint{Task: p.task, Incarnation: p.inc, Version: uint64(v + 1), Done: last,
			Inputs: []wire.RainstormInput{{Next: uint64(v + 2), EOS: last}}, Rows: rows}
		if a := call(ck).(*wire.RainstormCheckpointAck); a.Refused {
			t.Fatalf("checkpoint %d refused: %s", v+1, a.Reason)
		}
	}
}

// pageReader reads a pipeline's output as a gate does, from the manager
// named by to(): by cursor when the manager returns one, else by offset.
type pageReader struct {
	t     *testing.T
	from  wire.Message
	call  func(to string, msg wire.Message) (wire.Message, error)
	job   string
	rows  [][]string
	pages int
	total uint64
	next  []byte
	done  bool
}

// page reads the next page from to, and reports the error a refusal gave.
func (r *pageReader) page(to string) error {
	r.t.Helper()
	req := &wire.RainstormOutputRequest{Job: r.job, Workflow: "pipe", Rows: true, Resume: true,
		Offset: uint64(len(r.rows)), Cursor: r.next}
	reply, err := r.call(to, req)
	if err != nil {
		return err
	}
	p := reply.(*wire.RainstormOutputPage)
	if r.pages == 0 {
		r.total = p.Total
	}
	if p.Total != r.total || p.Offset != uint64(len(r.rows)) {
		r.t.Fatalf("page %d: offset %d of %d, want %d of %d", r.pages, p.Offset, p.Total, len(r.rows), r.total)
	}
	r.pages++
	r.rows = append(r.rows, p.Rows...)
	r.next = p.Cursor
	r.done = len(p.Cursor) == 0 && uint64(len(r.rows)) >= p.Total
	if !r.done && len(p.Rows) == 0 {
		r.t.Fatalf("empty page %d at row %d of %d", r.pages, len(r.rows), p.Total)
	}
	return nil
}

func newPageReader(t *testing.T, p onePipeline) *pageReader {
	gate := p.c.hub.Node("gate1")
	return &pageReader{t: t, job: p.job, call: func(to string, msg wire.Message) (wire.Message, error) {
		return gate.Call(context.Background(), to, msg)
	}}
}

// wantKeys checks rows are key 0..n-1 in order, each once.
func wantKeys(t *testing.T, rows [][]string, n int) {
	t.Helper()
	if len(rows) != n {
		t.Fatalf("%d rows, want %d", len(rows), n)
	}
	for i, r := range rows {
		if want := fmt.Sprintf("key-%08d", i); len(r) != 2 || r[0] != want || r[1] != "5" {
			t.Fatalf("row %d is %q, want [%s 5]", i, r, want)
		}
	}
}

// A gate's paged read of an N-row output makes each row once: the rows the
// leader decodes over all K pages grow like N, not like K × N. Each row a
// manager decodes is an allocation or two (its fields), so the allocations
// of the whole read bound the rows it made: a row costs some five (made
// from the store, then carried to the reader and decoded there), so ten
// per row is the bound. Before the cursor, every page merged the whole
// output through to count it and reach its offset: some 2 × K × N
// allocations more, with K = 11 here. A reader by offset alone (an older gate) still
// reads the same rows.
func TestRainstormGatePagesReadRowsOnce(t *testing.T) {
	const pages, perPage = 30, 10_000
	const n = pages * perPage
	p := newOnePipeline(t)
	seedInterleaved(t, p, pages, perPage, true)
	r := newPageReader(t, p)
	lead := p.lead.cfg.ID
	if err := r.page(lead); err != nil { // the leader is synced before counting
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for !r.done {
		if err := r.page(lead); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	wantKeys(t, r.rows, n)
	if r.pages < 5 {
		t.Fatalf("the output came in %d pages: too few to tell N from K × N", r.pages)
	}
	if allocs := after.Mallocs - before.Mallocs; allocs > 10*n {
		t.Fatalf("pages 2..%d of %d rows made %d allocations: rows were read again for every page (want at most %d)",
			r.pages, n, allocs, 10*n)
	}
	// An older gate asks by offset, without a cursor: the same rows.
	old := newPageReader(t, p)
	for range 2 {
		req := &wire.RainstormOutputRequest{Job: p.job, Workflow: "pipe", Rows: true, Offset: uint64(len(old.rows))}
		reply, err := old.call(lead, req)
		if err != nil {
			t.Fatal(err)
		}
		pg := reply.(*wire.RainstormOutputPage)
		if len(pg.Cursor) > 0 || pg.Total != n {
			t.Fatalf("a page by offset: cursor %d bytes, total %d", len(pg.Cursor), pg.Total)
		}
		old.rows = append(old.rows, pg.Rows...)
	}
	if !slices.EqualFunc(old.rows, r.rows[:len(old.rows)], slices.Equal) {
		t.Fatal("the pages by offset differ from the pages by cursor")
	}
}

// A paged read sees the output as it stood at its first page: rows a
// running pipeline adds meanwhile are not mixed in. A new leader continues
// the read from the cursor the old one gave (it holds the same durable
// checkpoints), with no row repeated or missing; a cursor naming rows it
// does not hold is refused (CodeStaleFence) and the read goes on by offset.
func TestRainstormGatePageCursorAcrossLeaderChange(t *testing.T) {
	const pages, perPage = 10, 10_000
	const n = pages * perPage
	p := newOnePipeline(t)
	seedInterleaved(t, p, pages, perPage, false)
	r := newPageReader(t, p)
	if err := r.page(p.lead.cfg.ID); err != nil {
		t.Fatal(err)
	}
	if r.done || r.total != n {
		t.Fatalf("first page: done %v, total %d", r.done, r.total)
	}
	// The pipeline publishes more rows (key n and up) after the first page.
	call := rsCaller(t, p.c, "w1", p.lead)
	more := []wire.RainstormRecord{{Fields: []string{fmt.Sprintf("key-%08d", n), "5"}}, {Fields: []string{"a-first-key", "5"}}}
	if a := call(&wire.RainstormCheckpoint{Task: p.task, Incarnation: p.inc, Version: pages + 1, Done: true,
		Inputs: []wire.RainstormInput{{Next: pages + 2, EOS: true}}, Rows: more}).(*wire.RainstormCheckpointAck); a.Refused {
		t.Fatalf("checkpoint refused: %s", a.Reason)
	}
	if err := r.page(p.lead.cfg.ID); err != nil {
		t.Fatal(err)
	}
	// The leader changes between pages.
	p.c.stopManager(p.lead.cfg.ID)
	next := p.c.leader()
	for !r.done {
		if err := r.page(next.cfg.ID); err != nil {
			var we *wire.Error
			if errors.As(err, &we) && we.Code == wire.CodeUnavailable {
				continue // still reading the pipelines' state
			}
			t.Fatalf("the new leader refused the old one's cursor: %v", err)
		}
	}
	wantKeys(t, r.rows, n)

	// A cursor whose rows are not those held is refused; by offset the
	// read continues, on the output as it is now.
	r2 := newPageReader(t, p)
	if err := r2.page(next.cfg.ID); err != nil {
		t.Fatal(err)
	}
	c, err := rsDecodePageCursor(r2.next)
	if err != nil {
		t.Fatal(err)
	}
	c.Tasks[0].Rows++
	c.Offset++
	if r2.next, err = wire.Marshal(c); err != nil {
		t.Fatal(err)
	}
	if err := r2.page(next.cfg.ID); wire.CodeOf(err) != wire.CodeStaleFence {
		t.Fatalf("a cursor of other rows: %v, want CodeStaleFence", err)
	}
	r2.next = nil
	for !r2.done {
		if err := r2.page(next.cfg.ID); err != nil {
			t.Fatal(err)
		}
	}
	if len(r2.rows) != n+2 || r2.rows[0][0] != "a-first-key" {
		t.Fatalf("the output now: %d rows from %q", len(r2.rows), r2.rows[0])
	}
	wantKeys(t, r2.rows[1:], n+1)
}

// A cursor comes from the network: whatever its bytes, decoding it does
// not panic, and one it accepts is self-consistent.
func FuzzRsDecodePageCursor(f *testing.F) {
	valid, _ := wire.Marshal(&rsPageCursor{Format: rsCursorFormat, Offset: 3,
		Tasks: []rsCursorTask{{Version: 4, Pages: 2, Rows: 7}, {}},
		Runs:  []rsCursorRun{{Task: 0, Page: 1, Row: 2, Left: 4}}})
	f.Add(valid)
	f.Add([]byte{})
	f.Add([]byte{0xa1, 0x01, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := rsDecodePageCursor(b)
		if err != nil {
			if wire.CodeOf(err) != wire.CodeStaleFence {
				t.Fatalf("refused with %v", err)
			}
			return
		}
		var total, left uint64
		for _, tk := range c.Tasks {
			total += tk.Rows
		}
		left = c.Offset
		for _, r := range c.Runs {
			if r.Task < 0 || r.Task >= len(c.Tasks) || r.Page < 0 || r.Page >= c.Tasks[r.Task].Pages || r.Row < 0 || r.Left == 0 {
				t.Fatalf("accepted a run outside the output: %+v", r)
			}
			left += r.Left
		}
		if left != total {
			t.Fatalf("accepted %d rows given and left of %d", left, total)
		}
	})
}
