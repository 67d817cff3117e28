package integration

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tempest/internal/devcluster"
)

// splitInput writes a CSV of n records whose text column often holds a
// quoted newline and comma, so a range's search offset falls inside a
// quoted field again and again, and returns the sequential pass of
// filter (cat = "b") → project (id, text) over it, with encoding/csv.
func splitInput(t *testing.T, dir string, n int) (string, [][]string) {
	t.Helper()
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	_ = w.Write([]string{"id", "cat", "text"})
	for i := range n {
		text := fmt.Sprintf("plain %d", i)
		if i%3 != 0 {
			text = fmt.Sprintf("line %d\nstill record %d, with a comma\nand \"quotes\"", i, i)
		}
		_ = w.Write([]string{fmt.Sprint(i), string(rune('a' + i%4)), text})
	}
	w.Flush()
	path := filepath.Join(dir, "split.csv")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	all, err := csv.NewReader(bytes.NewReader(b.Bytes())).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var want [][]string
	for _, rec := range all[1:] {
		if rec[1] == "b" {
			want = append(want, []string{rec[0], rec[2]})
		}
	}
	return path, want
}

// TestRainstormSplitPathSourceWorkerKill: a path: source read in 3 byte
// ranges, one source task each, with quoted newlines throughout. The
// worker running the second range is SIGKILLed mid-run; its replacement
// finds the same range again and resumes from its checkpoint, and the
// output is the sequential pass's rows, each once, in input order (so the
// ranges' input ids are the whole file's).
func TestRainstormSplitPathSourceWorkerKill(t *testing.T) {
	dir := t.TempDir()
	path, want := splitInput(t, dir, 150000)
	wc := testWorkerConfig(t)
	wc["source_dirs"] = append(wc["source_dirs"].([]string), dir)
	c := startWith(t, devcluster.Options{Managers: 1, Workers: 4, CoresPerWorker: 3, WorkerConfig: wc})
	id := c.submit(fmt.Sprintf(`name: split
timeout: 300s
workflows:
  - name: split
    type: rainstorm
    source: {path: %q, header: true, split: 3}
    stages:
      - {name: b, op: filter, tasks: 2, field: cat, equals: b}
      - {name: pick, op: project, tasks: 2, fields: [id, text]}
`, path))
	victim := c.taskWorker(id, "split", 1) // the second range's source task
	if err := c.Kill(victim); err != nil {
		t.Fatal(err)
	}
	out := c.finish(id, "split")
	if out.Restarts == 0 {
		t.Fatalf("the kill restarted no task: %+v", out.Tasks)
	}
	sources := 0
	for _, task := range out.Tasks {
		if task.Stage == 0 {
			sources++
		}
	}
	if sources != 3 {
		t.Fatalf("%d source tasks, want 3 (one per range): %+v", sources, out.Tasks)
	}
	if out.BadRecords != 0 {
		t.Fatalf("%d bad records: a range started inside a quoted field", out.BadRecords)
	}
	diffRows(t, "split path: source after a source worker's SIGKILL", out.Rows, want)
	if strings.Join(out.Header, ",") != "id,text" {
		t.Errorf("header %v", out.Header)
	}
}
