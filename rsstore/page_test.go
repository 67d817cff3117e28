package rsstore

import (
	"encoding/binary"
	"reflect"
	"runtime"
	"testing"

	"tempest/rainstorm/ckpt"
	"tempest/wire"
)

// allocPer is the bytes read allocates, averaged over runs, each run
// after a checkpoint of 100 keys (not counted): a new leader's sync reads
// stores their last leader just wrote, and a replacement opens at the
// version its predecessor just cut.
func allocPer(lt *leaderTask, keys, runs int, read func()) float64 {
	var total uint64
	for i := range runs {
		lt.checkpoint(countDelta(spread(100, keys, i), int64(i+2)))
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		read()
		runtime.ReadMemStats(&after)
		total += after.TotalAlloc - before.TotalAlloc
	}
	return float64(total) / float64(runs)
}

// A sync page and an open's part cost what they carry, not the state they
// are cut from: the first page of a 600k-key state allocates about what
// it does on a 200k-key one, and so does part 0 of an open's reply (both
// states are over a part). When each page made the task's whole state and
// split all of it to find the page, a new leader's sync of a million-key
// count outlasted its per-page timeout on every page, and no leader
// finished its sync after a worker kill.
func TestPageCostIsItsPage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 600k-key state")
	}
	const small, large, runs = 200_000, 600_000, 4
	cost := func(keys int) (page, part float64) {
		s, lt := storeWithState(t, keys)
		defer s.Close()
		page = allocPer(lt, keys, runs, func() {
			if p := s.snapshot(nil, nil, syncAsk{}); !p.More {
				t.Fatalf("one page holds a %d-key state", keys)
			}
		})
		part = allocPer(lt, keys, runs, func() {
			if r := s.openReply(&wire.RainstormOpen{Task: lt.task, Incarnation: 2}); r.Checkpoint == nil || !r.Checkpoint.More {
				t.Fatalf("one part holds a %d-key state", keys)
			}
		})
		return page, part
	}
	ps, os := cost(small)
	pl, ol := cost(large)
	t.Logf("bytes allocated: first sync page %.0f on %d keys, %.0f on %d; open's part 0 %.0f, %.0f", ps, small, pl, large, os, ol)
	// The state grows 3×; a cost that follows it grows about that much.
	if pl > 1.5*ps || ol > 1.5*os {
		t.Fatalf("a page's cost grows with the state: sync page %.0f → %.0f bytes, open part %.0f → %.0f bytes on %d then %d keys",
			ps, pl, os, ol, small, large)
	}
}

// A state read in pages while checkpoints land between them joins to the
// task's state at one version (a newer version than the one being cut is
// sent from its part 0, which restarts the reader's join), every rows
// record is read once, and each page is under the
// message cap; so are an open's parts, read in order while the task's
// version changes under them, and past the last part there is none.
func TestPagesWhileCheckpointsLand(t *testing.T) {
	const keys = 150_000
	s, lt := storeWithState(t, keys)
	defer s.Close()
	states := map[ver][]wire.RainstormGroupState{}
	record := func() {
		l := s.Latest(lt.task)
		states[verOf(l)] = l.Groups
	}
	record()
	rowsTask := wire.RainstormTask{Job: "j", Workflow: "count", Stage: 2}
	for v := uint64(1); v <= 3; v++ {
		rows := &wire.RainstormCheckpoint{Task: rowsTask, Version: v, RowsOf: 1}
		for i := range 20_000 {
			rows.Rows = append(rows.Rows, wire.RainstormRecord{ID: uint64(i), Fields: []string{"some-key", "1"}})
		}
		if err := s.store([]*wire.RainstormCheckpoint{rows}, nil); err != nil {
			t.Fatal(err)
		}
	}

	var (
		after  []byte
		j      ckpt.Joiner
		joined []*wire.RainstormCheckpoint
		pages  int
	)
	for {
		page := s.snapshot(nil, after, syncAsk{})
		pages++
		if b, err := wire.Marshal(page); err != nil || len(b) > wire.MaxMessageSize/4 {
			t.Fatalf("page %d: %d bytes (%v)", pages, len(b), err)
		}
		for i := range page.Checkpoints {
			c, err := j.Add(&page.Checkpoints[i])
			if err != nil {
				t.Fatalf("page %d: %v", pages, err)
			}
			if c != nil {
				joined = append(joined, c)
			}
		}
		if !page.More {
			break
		}
		after = page.Next
		if pages == 1 || pages == 3 { // checkpoints land while the state is read
			lt.checkpoint(countDelta(spread(500, keys+1000, pages), int64(pages+10)))
			record()
		}
	}
	if pages < 7 {
		t.Fatalf("%d pages: the test wants the state cut in many", pages)
	}
	var latest, rows int
	for _, c := range joined {
		switch c.Task {
		case lt.task:
			latest++
			if want, ok := states[verOf(c)]; !ok || !reflect.DeepEqual(c.Groups, want) {
				t.Fatalf("the state read as version %d is not that version's (%d groups read)", c.Version, len(c.Groups))
			}
		case rowsTask:
			rows += len(c.Rows)
		}
	}
	if latest != 1 || rows != 60_000 {
		t.Fatalf("read %d latest checkpoints of the count and %d rows, want 1 and 60000", latest, rows)
	}

	// An open reads its parts in order; a checkpoint lands after part 0,
	// and the parts after it are of the new version, so the join fails
	// and the task reads again from part 0.
	open := func(part int) *wire.RainstormCheckpoint {
		return s.openReply(&wire.RainstormOpen{Task: lt.task, Incarnation: 2, Part: part}).Checkpoint
	}
	readAll := func(landAfter int) (*wire.RainstormCheckpoint, error) {
		var j ckpt.Joiner
		for n := 0; ; n++ {
			p := open(n)
			if p == nil {
				t.Fatalf("part %d missing", n)
			}
			c, err := j.Add(p)
			if err != nil || c != nil {
				return c, err
			}
			if n == landAfter {
				lt.checkpoint(countDelta(spread(500, keys, n), 99))
				record()
			}
		}
	}
	if _, err := readAll(0); err == nil {
		t.Fatal("parts of two versions joined")
	}
	c, err := readAll(-1)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Groups, states[verOf(c)]) || verOf(c) != verOf(s.Head(lt.task)) {
		t.Fatalf("the open read version %d, not the latest state", c.Version)
	}
	n := 0
	for open(n) != nil {
		n++
	}
	if n < 2 || open(n+1) != nil || open(0) == nil {
		t.Fatalf("%d parts, then part %d: %v; want parts up to the last, none after", n, n+1, open(n+1))
	}
}

// A cursor decodes to what was encoded, and any other bytes a peer sends
// as one are an error, never a panic.
func FuzzSyncCursor(f *testing.F) {
	for _, c := range []syncCursor{
		{},
		{Task: wire.RainstormTask{Job: "j", Workflow: "w", Stage: 2, Index: 7}, Version: 9, Inc: 3,
			Cut: partCut{Part: 4, Began: true, Group: 127, Key: "key-1", Lists: [4]int{1, 2, 3, 4}}},
		{Task: wire.RainstormTask{Job: "job"}, Rows: true, Version: 1 << 63},
		{Task: wire.RainstormTask{Job: "j", Stage: 1}, Version: 7, Inc: 2, Delta: true, Base: ver{4, 2}, Cut: partCut{Part: 2, Began: true, Key: "k"}},
	} {
		f.Add(c.encode())
	}
	f.Add(encodeFormat1(&syncCursor{Task: wire.RainstormTask{Job: "j"}, Version: 3, Inc: 1, Cut: partCut{Part: 1, Began: true, Key: "k"}}))
	f.Add([]byte{cursorFormat, 0xff})
	f.Add([]byte{cursorFormat1, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeCursor(b)
		if err != nil {
			return
		}
		again, err := decodeCursor(c.encode())
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("%+v encoded decodes to %+v, %v", c, again, err)
		}
	})
}

// encodeFormat1 is a cursor as stores before deltas encoded it (format 1:
// no base, and a Done flag in bit 1 that no store set).
func encodeFormat1(c *syncCursor) []byte {
	b := []byte{cursorFormat1}
	str := func(s string) []byte { return append(binary.AppendUvarint(b, uint64(len(s))), s...) }
	b = str(c.Task.Job)
	b = str(c.Task.Workflow)
	var flags byte
	if c.Rows {
		flags |= 1
	}
	if c.Cut.Began {
		flags |= 4
	}
	b = append(b, flags)
	for _, n := range []uint64{uint64(c.Task.Stage), uint64(c.Task.Index), c.Version, c.Inc, uint64(c.Cut.Part), uint64(c.Cut.Group),
		uint64(c.Cut.Lists[0]), uint64(c.Cut.Lists[1]), uint64(c.Cut.Lists[2]), uint64(c.Cut.Lists[3])} {
		b = binary.AppendUvarint(b, n)
	}
	return str(c.Cut.Key)
}

// A leader's cursor from a store of the format before deltas still reads
// on a store that now writes format 2 (a peer upgraded between two pages
// goes on from the cursor instead of from the start).
func TestCursorOfFormat1Decodes(t *testing.T) {
	want := &syncCursor{Task: wire.RainstormTask{Job: "j", Workflow: "w", Stage: 2, Index: 7}, Rows: true, Version: 9, Inc: 3,
		Cut: partCut{Part: 4, Began: true, Group: 127, Key: "key-1", Lists: [4]int{1, 2, 3, 4}}}
	got, err := decodeCursor(encodeFormat1(want))
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("a format 1 cursor decodes to %+v, %v; want %+v", got, err, want)
	}
}

// A task's open part starts are forgotten once its last part is cut, and
// once its version changes: kept for every task ever opened, a long-lived
// manager's map only grew.
func TestOpenPartStartsPruned(t *testing.T) {
	s, lt := storeWithState(t, 150_000)
	defer s.Close()
	read := func(part int) *wire.RainstormCheckpoint {
		return s.openReply(&wire.RainstormOpen{Task: lt.task, Incarnation: 1, Part: part}).Checkpoint
	}
	for n := 0; ; n++ {
		p := read(n)
		if p == nil {
			t.Fatalf("part %d missing", n)
		}
		if !p.More {
			break
		}
	}
	if n := s.openParts.len(); n != 0 {
		t.Fatalf("%d tasks' part starts kept after the last part was read", n)
	}
	if p := read(0); p == nil || !p.More || s.openParts.len() != 1 {
		t.Fatal("part 0 of a many-part state did not keep where part 1 starts")
	}
	lt.checkpoint(countDelta(span(0, 10), 5))
	if n := s.openParts.len(); n != 0 {
		t.Fatalf("%d tasks' part starts kept after the version read was replaced", n)
	}
}

// A rows record over several sync pages is decoded once, not once per
// page: the pages of a record of 60k rows allocate about what decoding it
// once and encoding it do.
func TestRowsRecordDecodedOncePerSync(t *testing.T) {
	s, err := Open(t.TempDir(), soloHost{}, Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	task := wire.RainstormTask{Job: "j", Workflow: "w", Stage: 2}
	rows := &wire.RainstormCheckpoint{Task: task, Version: 1, RowsOf: 1}
	for i := range 60_000 {
		rows.Rows = append(rows.Rows, wire.RainstormRecord{ID: uint64(i), Fields: []string{"some-longer-key-of-a-row", "1"}})
	}
	if err := s.store([]*wire.RainstormCheckpoint{rows}, nil); err != nil {
		t.Fatal(err)
	}
	flat := s.tasks[task].rows[ver{1, 1}]
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_ = flat.records()
	runtime.ReadMemStats(&after)
	decode := after.TotalAlloc - before.TotalAlloc

	var after2 []byte
	pages := 0
	runtime.ReadMemStats(&before)
	for {
		p := s.snapshot(nil, after2, syncAsk{})
		pages++
		if !p.More {
			break
		}
		after2 = p.Next
	}
	runtime.ReadMemStats(&after)
	total := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d pages allocated %d bytes; one decode of the record %d", pages, total, decode)
	if pages < 3 {
		t.Fatalf("%d pages: the test wants the record over several", pages)
	}
	if total > 2*decode {
		t.Fatalf("the %d pages of one rows record allocated %d bytes, %.1f decodes of it", pages, total, float64(total)/float64(decode))
	}
}
