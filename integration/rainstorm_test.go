package integration

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"tempest/api"
	"tempest/internal/devcluster"
	"tempest/internal/testutil"
	"tempest/rainstorm"
	"tempest/wire"
)

// RainStorm pipelines on real processes. Every test computes its expected
// output with a plain sequential pass and compares exactly.

// signsPath returns the shared traffic signs file's absolute path: a skip
// where the data is not installed, a failure where CI is set.
func signsPath(t *testing.T) string {
	t.Helper()
	return testutil.SharedData(t, "traffic_signs_full.csv")
}

// readSigns reads the traffic signs file with encoding/csv: header, rows.
func readSigns(t *testing.T, path string) ([]string, [][]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(b, []byte("\xEF\xBB\xBF"))))
	r.FieldsPerRecord = -1
	all, err := r.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return all[0], all[1:]
}

func col(t *testing.T, header []string, name string) int {
	t.Helper()
	i := slices.Index(header, name)
	if i < 0 {
		t.Fatalf("column %s not in %v", name, header)
	}
	return i
}

// countRows is a count stage's expected output as sorted key,value rows.
func countRows(counts map[string]int) [][]string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([][]string, len(keys))
	for i, k := range keys {
		out[i] = []string{k, strconv.Itoa(counts[k])}
	}
	return out
}

// output fetches a pipeline's output through the API.
func (c *cluster) output(id, wf string) (*api.PipelineOutput, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := c.client.Output(ctx, id, wf, "json")
	if err != nil {
		return nil, err
	}
	var out api.PipelineOutput
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("decode output: %w", err)
	}
	return &out, nil
}

// runPipeline submits job, waits for it to complete and returns the output.
func (c *cluster) runPipeline(job, wf string, within time.Duration) (string, *api.PipelineOutput) {
	c.t.Helper()
	id := c.submit(job)
	st := c.waitStatus(id, within, terminal)
	if st.Status != wire.JobCompleted {
		c.t.Fatalf("job %s ended %s: %+v", id, st.Status, st.Workflows)
	}
	out, err := c.output(id, wf)
	if err != nil {
		c.t.Fatal(err)
	}
	if !out.Complete {
		c.t.Fatalf("job completed but its output is not complete: %+v", out)
	}
	return id, out
}

func diffRows(t *testing.T, what string, got, want [][]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d rows, want %d", what, len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("%s: row %d is %q, want %q", what, i, got[i], want[i])
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// telesparCounts is the sequential pass of the filter → count pipelines:
// Category counts of the signs on a punched Telespar post.
func telesparCounts(t *testing.T, path string) map[string]int {
	t.Helper()
	header, rows := readSigns(t, path)
	post, cat := col(t, header, "Sign_Post"), col(t, header, "Category")
	counts := map[string]int{}
	for _, r := range rows {
		if r[post] == "Punched Telespar" {
			counts[r[cat]]++
		}
	}
	return counts
}

// copySigns puts the signs CSV beside a job file in dir, as signs.csv.
func copySigns(t *testing.T, path, dir string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "signs.csv"), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRainstormFilterCount(t *testing.T) {
	path := signsPath(t)
	counts := telesparCounts(t, path)
	want := countRows(counts)

	c := startCluster(t, 1, 3, 3)
	job := fmt.Sprintf(`name: telespar
timeout: 120s
workflows:
  - name: by-category
    type: rainstorm
    source: {path: %q, format: csv, header: true}
    stages:
      - {name: telespar, op: filter, tasks: 3, field: Sign_Post, equals: "Punched Telespar"}
      - {name: count, op: count, tasks: 2, key: Category}
`, path)
	id, out := c.runPipeline(job, "by-category", 90*time.Second)
	if !slices.Equal(out.Header, []string{"key", "value"}) {
		t.Errorf("header %v", out.Header)
	}
	diffRows(t, "filter→count", out.Rows, want)

	// The CLI prints the same as CSV.
	code, stdout, stderr := runCLI(t, c, "results", id, "--workflow", "by-category", "--format", "csv")
	if code != 0 {
		t.Fatalf("tempest results: exit %d: %s", code, stderr)
	}
	var wantCSV bytes.Buffer
	cw := csv.NewWriter(&wantCSV)
	_ = cw.Write([]string{"key", "value"})
	_ = cw.WriteAll(want)
	if stdout != wantCSV.String() {
		t.Fatalf("tempest results --format csv:\n%s\nwant:\n%s", stdout, wantCSV.String())
	}

	// The counters of the completed job agree with its output.
	_, rows := readSigns(t, path)
	telespar := 0
	for _, n := range counts {
		telespar += n
	}
	// Chained: the filter runs in the source, whose combiner sends the
	// count one partial per key and segment (how many, the source says).
	if len(out.Tasks) != 3 {
		t.Fatalf("tasks %+v: want the source and the 2 count tasks", out.Tasks)
	}
	pipelineCountsAgree(t, c, id, "by-category", len(rows), []int64{-1, int64(len(want))})
}

// pipelineCountsAgree checks a completed pipeline's counters: the job's
// completed count is its input records (not a sum over stages), each stage
// takes in what the one before passed on (outs[s] is what stage s passes
// on; stage 0 is the source; -1 for a chained source: what it sent, at
// most the input's records and more than none), and watch shows no backlog.
func pipelineCountsAgree(t *testing.T, c *cluster, id, wf string, input int, outs []int64) {
	t.Helper()
	outs = slices.Clone(outs)
	st := c.waitStatus(id, 10*time.Second, terminal)
	if len(st.Workflows) != 1 || st.Workflows[0].CompletedCount != int64(input) {
		t.Fatalf("job status %+v: want completed %d, the input's records", st.Workflows, input)
	}
	out, err := c.output(id, wf)
	if err != nil {
		t.Fatal(err)
	}
	in := make([]int64, len(outs))
	got := make([]int64, len(outs))
	for _, task := range out.Tasks {
		in[task.Stage] += task.Records
		got[task.Stage] += task.RecordsOut
	}
	if outs[0] < 0 {
		if got[0] <= 0 || got[0] > int64(input) {
			t.Fatalf("the chained source passed on %d records of %d", got[0], input)
		}
		outs[0] = got[0]
	}
	want := append([]int64{int64(input)}, outs[:len(outs)-1]...)
	if !slices.Equal(in, want) || !slices.Equal(got, outs) {
		t.Fatalf("per stage records in %v out %v; want in %v out %v (tasks %+v)", in, got, want, outs, out.Tasks)
	}
	code, _, stderr := runCLI(t, c, "watch", id)
	if code != 0 {
		t.Fatalf("watch: exit %d: %s", code, stderr)
	}
	if !hasLine(stderr, "source", fmt.Sprintf("records in %d out %d", input, outs[0]), "backlog 0") {
		t.Fatalf("watch shows a backlog, or other counts, for the finished pipeline's source:\n%s", stderr)
	}
}

func TestRainstormFilterReplaceProject(t *testing.T) {
	path := signsPath(t)
	header, rows := readSigns(t, path)
	post, text, id, cat := col(t, header, "Sign_Post"), col(t, header, "Sign_Text"), col(t, header, "OBJECTID"), col(t, header, "Category")
	re := regexp.MustCompile(`St\b`)
	var want [][]string
	for _, r := range rows {
		if r[post] != "Punched Telespar" {
			continue
		}
		want = append(want, []string{r[id], re.ReplaceAllString(r[text], "Street"), r[cat]})
	}

	c := startCluster(t, 1, 3, 3)
	job := fmt.Sprintf(`name: streets
timeout: 120s
workflows:
  - name: streets
    type: rainstorm
    source: {path: %q, header: true}
    stages:
      - {name: telespar, op: filter, tasks: 2, field: Sign_Post, equals: "Punched Telespar"}
      - {name: street, op: replace, tasks: 2, field: Sign_Text, pattern: 'St\b', with: Street}
      - {name: keep, op: project, tasks: 2, fields: [OBJECTID, Sign_Text, Category]}
`, path)
	_, out := c.runPipeline(job, "streets", 90*time.Second)
	if !slices.Equal(out.Header, []string{"OBJECTID", "Sign_Text", "Category"}) {
		t.Errorf("header %v", out.Header)
	}
	diffRows(t, "filter→replace→project", out.Rows, want)
}

// A file: source travels with the job: tempest submit uploads it as a
// blob, the managers hold it on a majority, the source reads it by range.
func TestRainstormFileSourceThroughCLI(t *testing.T) {
	path := signsPath(t)
	counts := telesparCounts(t, path)
	dir := t.TempDir()
	copySigns(t, path, dir)
	// The job's own timeout is far beyond finish's wait: on a loaded
	// machine the product must not end the job for taking its time; the
	// test's wait is the only deadline.
	job := `name: telespar
timeout: 30m
workflows:
  - name: by-category
    type: rainstorm
    source: {file: signs.csv, header: true}
    stages:
      - {name: telespar, op: filter, tasks: 2, field: Sign_Post, equals: "Punched Telespar"}
      - {name: count, op: count, tasks: 2, key: Category}
`
	jf := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(jf, []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, 3, 3, 3)
	id := submitCLI(t, c, jf)
	out := c.finish(id, "by-category")
	diffRows(t, "file source", out.Rows, countRows(counts))

	// watch shows each stage that runs tasks: tasks, tuples/s, records,
	// restarts, bad records. The filter runs chained in the source task.
	code, _, stderr := runCLI(t, c, "watch", id)
	if code != 0 {
		t.Fatalf("watch: exit %d: %s", code, stderr)
	}
	for _, stage := range []string{"source", "count"} {
		if !hasLine(stderr, stage, "tasks 0/", "records", "restarts 0", "bad 0") {
			t.Fatalf("watch shows no line for stage %s:\n%s", stage, stderr)
		}
	}
}

func TestRainstormExecStage(t *testing.T) {
	path := signsPath(t)
	script, err := filepath.Abs("../examples/rainstorm-upper.sh")
	if err != nil {
		t.Fatal(err)
	}
	header, rows := readSigns(t, path)
	post, cat := col(t, header, "Sign_Post"), col(t, header, "Category")
	counts := map[string]int{}
	for _, r := range rows {
		if strings.Contains(r[post], "Telespar") {
			counts[strings.ToUpper(r[cat])]++
		}
	}
	c := startCluster(t, 1, 3, 3)
	job := fmt.Sprintf(`name: upper
timeout: 120s
workflows:
  - name: upper
    type: rainstorm
    source: {path: %q, header: true}
    stages:
      - {name: upper, op: exec, tasks: 2, command: %q}
      - {name: count, op: count, tasks: 2, key: "9"}
`, path, script)
	_, out := c.runPipeline(job, "upper", 90*time.Second)
	diffRows(t, "exec→count", out.Rows, countRows(counts))
}

// An exec program that keeps crashing is restarted, then the job fails
// with the tail of its standard error; nothing hangs.
func TestRainstormExecCrashFailsJob(t *testing.T) {
	path := signsPath(t)
	dir := t.TempDir()
	script := writeProgram(t, dir, "crash.sh", "echo 'crash.sh: cannot go on' >&2\nexit 3\n")
	c := startWith(t, devcluster.Options{Managers: 1, Workers: 2, CoresPerWorker: 3, WorkerConfig: testWorkerConfig(t, script)})
	id := c.submit(fmt.Sprintf(`name: crash
timeout: 120s
workflows:
  - name: crash
    type: rainstorm
    source: {path: %q, header: true}
    stages:
      - {name: crash, op: exec, tasks: 1, command: %q}
`, path, script))
	st := c.waitStatus(id, 90*time.Second, terminal)
	if st.Status != wire.JobFailed {
		t.Fatalf("job ended %s", st.Status)
	}
	if msg := fmt.Sprint(st.Error, st.Workflows); !strings.Contains(msg, "cannot go on") {
		t.Fatalf("the failure does not carry the program's stderr: %s", msg)
	}
}

// generated is the expected output of a generate source filtered on value
// and counted by key, computed from the generator's definition.
func generated(t *testing.T, records, keys int64, keep func(value int) bool) [][]string {
	t.Helper()
	counts := map[string]int{}
	eachGenerated(t, records, keys, func(fields []string, value int) {
		if keep(value) {
			counts[fields[1]]++
		}
	})
	return countRows(counts)
}

// eachGenerated calls fn with every record of a generate source (id, key,
// value) in input order, and its value as a number.
func eachGenerated(t *testing.T, records, keys int64, fn func(fields []string, value int)) {
	t.Helper()
	g := rainstorm.NewGenerator(&rainstorm.Generate{Records: records, Keys: keys}, 0)
	for {
		rec, err := g.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		v, err := strconv.Atoi(rec.Fields[2])
		if err != nil {
			t.Fatal(err)
		}
		fn(rec.Fields, v)
	}
}

// pacedJob is a generated pipeline slow enough for faults to land mid-run.
// Its filter runs in tasks of its own (chain: false), so the tests kill a
// filter or count task by its place: source 0, filter 1–2, count 3–4.
func pacedJob(records int64, rate int, exactlyOnce bool) string {
	return fmt.Sprintf(`name: paced
timeout: 300s
workflows:
  - name: paced
    type: rainstorm
    exactly_once: %t
    source: {generate: {records: %d, rate: %d, keys: 17}}
    stages:
      - {name: low, op: filter, tasks: 2, field: value, matches: '^[0-4]?[0-9]?[0-9]$', chain: false}
      - {name: count, op: count, tasks: 2, key: key}
`, exactlyOnce, records, rate)
}

func keepLow(v int) bool { return v < 500 } // what the filter's pattern keeps

// taskWorker waits until task k (in task order: 0 is the source) of a
// pipeline runs, after some records went through, and returns its worker.
func (c *cluster) taskWorker(id, wf string, k int) string {
	c.t.Helper()
	var worker string
	testutil.Eventually(c.t, 60*time.Second, 100*time.Millisecond, func() error {
		out, err := c.output(id, wf)
		if err != nil {
			return err
		}
		if len(out.Tasks) <= k {
			return fmt.Errorf("pipeline has %d tasks", len(out.Tasks))
		}
		task := out.Tasks[k]
		if task.Status != wire.WorkflowRunning || task.Worker == "" {
			return fmt.Errorf("task %d is %s", k, task.Status)
		}
		if out.Tasks[0].Records < 2000 {
			return fmt.Errorf("source read %d records", out.Tasks[0].Records)
		}
		worker = task.Worker
		return nil
	})
	return worker
}

// finish waits for a pipeline's job to complete and returns its output.
func (c *cluster) finish(id, wf string) *api.PipelineOutput {
	c.t.Helper()
	// Generous: a pipeline over the signs file with -race on a busy 2-core
	// machine has taken over two minutes.
	st := c.waitStatus(id, 8*time.Minute, terminal)
	if st.Status != wire.JobCompleted {
		c.t.Fatalf("job ended %s: %+v", st.Status, st.Workflows)
	}
	out, err := c.output(id, wf)
	if err != nil {
		c.t.Fatal(err)
	}
	if !out.Complete {
		c.t.Fatalf("job completed, output incomplete: %+v", out.Tasks)
	}
	return out
}

// killTaskWorker runs the paced exactly-once pipeline on 4 workers,
// SIGKILLs the worker running task (in pipeline order: 0 is the source)
// mid-run, and checks that a task restarted and the output is exact.
func killTaskWorker(t *testing.T, task int, what string) {
	const records = 40000
	want := generated(t, records, 17, keepLow)
	c := startCluster(t, 1, 4, 3)
	id := c.submit(pacedJob(records, 4000, true))
	victim := c.taskWorker(id, "paced", task)
	if err := c.Kill(victim); err != nil {
		t.Fatal(err)
	}
	out := c.finish(id, "paced")
	if out.Restarts == 0 {
		t.Fatalf("the kill restarted no task: %+v", out.Tasks)
	}
	diffRows(t, "after "+what+"'s SIGKILL", out.Rows, want)
}

func TestRainstormWorkerKillExactlyOnce(t *testing.T) {
	killTaskWorker(t, 3, "a stage worker") // the first count task: holds state
}

// The paced pipeline as it runs by default: the filter chained into the
// source task, whose combiner sends each count task one (key, partial)
// record per key and segment. The worker of a count task is SIGKILLed
// mid-run; its replacement resumes from its durable checkpoint and the
// source resends the same partials (a function of the segment), so the
// counts are exact, and each stage's counters agree with what the one
// before passed on.
func TestRainstormChainedCountWorkerKillExactlyOnce(t *testing.T) {
	const records = 40000
	want := generated(t, records, 17, keepLow)
	c := startCluster(t, 1, 4, 3)
	id := c.submit(strings.Replace(pacedJob(records, 4000, true), ", chain: false}", "}", 1))
	victim := c.taskWorker(id, "paced", 1) // the first count task
	if err := c.Kill(victim); err != nil {
		t.Fatal(err)
	}
	out := c.finish(id, "paced")
	if len(out.Tasks) != 3 {
		t.Fatalf("tasks %+v: want the source and the 2 count tasks", out.Tasks)
	}
	if out.Restarts == 0 {
		t.Fatalf("the kill restarted no task: %+v", out.Tasks)
	}
	diffRows(t, "chained filter→count after a count worker's SIGKILL", out.Rows, want)
	pipelineCountsAgree(t, c, id, "paced", records, []int64{-1, int64(len(want))})
}

// A record-output sink: filter → project, each kept record a row, the
// filter chained into the source task. The
// worker of a project task (the last stage, whose checkpoints publish the
// rows) is SIGKILLed mid-run; its replacement resumes from the durable
// checkpoint, and the output is the sequential pass's rows, each once, in
// input order — no row of the killed incarnation twice, none lost.
func TestRainstormRecordOutputWorkerKillExactlyOnce(t *testing.T) {
	const records = 40000
	var want [][]string
	eachGenerated(t, records, 17, func(fields []string, value int) {
		if keepLow(value) {
			want = append(want, []string{fields[0], fields[2]})
		}
	})
	c := startCluster(t, 1, 4, 3)
	id := c.submit(fmt.Sprintf(`name: picked
timeout: 300s
workflows:
  - name: picked
    type: rainstorm
    exactly_once: true
    source: {generate: {records: %d, rate: 4000, keys: 17}}
    stages:
      - {name: low, op: filter, tasks: 2, field: value, matches: '^[0-4]?[0-9]?[0-9]$'}
      - {name: pick, op: project, tasks: 2, fields: [id, value]}
`, records))
	victim := c.taskWorker(id, "picked", 1) // the first project task (the filter runs in the source)
	if err := c.Kill(victim); err != nil {
		t.Fatal(err)
	}
	out := c.finish(id, "picked")
	if out.Restarts == 0 {
		t.Fatalf("the kill restarted no task: %+v", out.Tasks)
	}
	if !slices.Equal(out.Header, []string{"id", "value"}) {
		t.Errorf("header %v", out.Header)
	}
	diffRows(t, "filter→project after a sink worker's SIGKILL", out.Rows, want)
}

func TestRainstormSourceWorkerKillExactlyOnce(t *testing.T) {
	killTaskWorker(t, 0, "the source worker")
}

func TestRainstormLeaderKillExactlyOnce(t *testing.T) {
	const records = 40000
	want := generated(t, records, 17, keepLow)
	c := startCluster(t, 3, 3, 3)
	id := c.submit(pacedJob(records, 4000, true))
	c.taskWorker(id, "paced", 3)
	leader := c.leader()
	if err := c.Kill(leader); err != nil {
		t.Fatal(err)
	}
	out := c.finish(id, "paced")
	diffRows(t, "after the manager leader's SIGKILL", out.Rows, want)
}

// A `file:` source reads its blob from the managers chunk by chunk while
// the pipeline runs (the source's window holds 131k records, so a larger
// input is read as acks free it). SIGKILLing the manager leader in the
// middle of that read costs the source a retry at another manager, not the
// job: the output equals the sequential pass.
func TestRainstormFileSourceLeaderKillExactlyOnce(t *testing.T) {
	const records = 200000
	// The filter keeps 1 record in 200: the managers store small
	// checkpoints, so the test loads the machine with the source's reads,
	// not with the stages' state.
	want := generated(t, records, 17, func(v int) bool { return v < 5 })
	dir := t.TempDir()
	var data bytes.Buffer
	longest := 0
	data.WriteString("id,key,value,pad\n")
	g := rainstorm.NewGenerator(&rainstorm.Generate{Records: records, Keys: 17}, 0)
	for {
		rec, err := g.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		// The padding (never read past the source) makes 14 chunks of
		// the input: the source's window holds about 9 of them.
		n, _ := fmt.Fprintf(&data, "%s,%s,%s,%s\n", rec.Fields[0], rec.Fields[1], rec.Fields[2], strings.Repeat("pad-", 14))
		longest = max(longest, n)
	}
	if err := os.WriteFile(filepath.Join(dir, "gen.csv"), data.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	job := `name: file-leader-kill
timeout: 30m
workflows:
  - name: low
    type: rainstorm
    source: {file: gen.csv, header: true}
    stages:
      - {name: low, op: filter, tasks: 2, field: value, matches: '^[0-4]$'}
      - {name: count, op: count, tasks: 2, key: key}
`
	jf := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(jf, []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, 3, 3, 3)
	id := submitCLI(t, c, jf)
	c.taskWorker(id, "low", 0)
	leader := c.leader()
	before, err := c.output(id, "low")
	if err != nil {
		t.Fatal(err)
	}
	// The source reads ahead of the records it counted by at most two
	// chunks (its buffer, and the chunk it holds).
	if read := before.Tasks[0].Records; read*int64(longest)+2*wire.MaxBlobChunk >= int64(data.Len()) {
		t.Fatalf("the source had read %d of %d records before the kill: the kill would not land mid-read", read, records)
	}
	if err := c.Kill(leader); err != nil {
		t.Fatal(err)
	}
	out := c.finish(id, "low")
	diffRows(t, "file source after the manager leader's SIGKILL mid-read", out.Rows, want)
	t.Logf("the source had read %d records at the kill; it ran %d attempt(s)", before.Tasks[0].Records, out.Tasks[0].Attempts)
}

// Two kills at different times in one run: a count task's worker, then,
// once the pipeline flows again, the source's.
func TestRainstormTwoKillsExactlyOnce(t *testing.T) {
	const records = 60000
	want := generated(t, records, 17, keepLow)
	c := startCluster(t, 1, 5, 3)
	id := c.submit(pacedJob(records, 4000, true))
	first := c.taskWorker(id, "paced", 4)
	if err := c.Kill(first); err != nil {
		t.Fatal(err)
	}
	var before int64
	testutil.Eventually(t, 60*time.Second, 100*time.Millisecond, func() error {
		out, err := c.output(id, "paced")
		if err != nil {
			return err
		}
		if before == 0 {
			before = out.Tasks[0].Records
		}
		if src := out.Tasks[0]; src.Status != wire.WorkflowRunning || src.Worker == first || src.Records < before+4000 {
			return fmt.Errorf("source %s on %s at %d records", src.Status, src.Worker, src.Records)
		}
		return nil
	})
	second := c.taskWorker(id, "paced", 0)
	if err := c.Kill(second); err != nil {
		t.Fatal(err)
	}
	out := c.finish(id, "paced")
	if out.Restarts < 2 {
		t.Fatalf("two kills, %d restarts: %+v", out.Restarts, out.Tasks)
	}
	diffRows(t, "after two kills", out.Rows, want)
}

// Malformed records are counted and skipped, with their numbers; with
// on_bad_record: fail the workflow fails and says which record.
func TestRainstormBadRecords(t *testing.T) {
	dir := t.TempDir()
	// A record with too few fields and one with a bare quote.
	input := "name,n\na,1\nb,2\nd\nc,3\nx\"y,4\nc,4\n"
	path := filepath.Join(dir, "in.csv")
	if err := os.WriteFile(path, []byte(input), 0o644); err != nil {
		t.Fatal(err)
	}
	// The sequential pass: encoding/csv, which checks the field count
	// against the header's.
	r := csv.NewReader(strings.NewReader(input))
	counts := map[string]int{}
	bad := 0
	for i := 0; ; i++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		switch {
		case err != nil:
			bad++
		case i > 0:
			counts[rec[0]]++
		}
	}
	want := countRows(counts)

	// The input is under the test's own directory, which the workers list
	// beside the shared data (path: sources read only where they may).
	wc := testWorkerConfig(t)
	wc["source_dirs"] = append(wc["source_dirs"].([]string), dir)
	c := startWith(t, devcluster.Options{Managers: 1, Workers: 2, CoresPerWorker: 3, WorkerConfig: wc})
	job := func(onBad string) string {
		return fmt.Sprintf(`name: bad
timeout: 150s
workflows:
  - name: bad
    type: rainstorm
    on_bad_record: %s
    source: {path: %q, header: true}
    stages:
      - {name: count, op: count, tasks: 2, key: name}
`, onBad, path)
	}
	_, out := c.runPipeline(job("skip"), "bad", 60*time.Second)
	diffRows(t, "bad records skipped", out.Rows, want)
	if out.BadRecords != uint64(bad) || len(out.BadFirst) != bad {
		t.Fatalf("bad records %d (first %v), want %d", out.BadRecords, out.BadFirst, bad)
	}

	id := c.submit(job("fail"))
	st := c.waitStatus(id, 120*time.Second, terminal)
	if st.Status != wire.JobFailed {
		t.Fatalf("on_bad_record: fail ended %s", st.Status)
	}
	if !strings.Contains(fmt.Sprint(st), "record") {
		t.Fatalf("the failure does not name the record: %+v", st)
	}
}

// staleCheckpoints reads the manager's count of checkpoints it refused as
// a replaced incarnation's.
func staleCheckpoints(t *testing.T, c *cluster, manager string) (int, error) {
	t.Helper()
	for _, n := range c.Nodes() {
		if n.Name != manager {
			continue
		}
		text, err := get("http://" + n.API + "/metrics")
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(string(text), "\n") {
			if v, ok := strings.CutPrefix(line, "tempest_manager_rainstorm_stale_checkpoints_total "); ok {
				f, err := strconv.ParseFloat(v, 64)
				return int(f), err
			}
		}
		return 0, fmt.Errorf("%s /metrics has no stale checkpoint count", manager)
	}
	return 0, fmt.Errorf("no node %s", manager)
}

// superseded counts the lines of the manager's log that say it cancelled
// a superseded attempt that worker reported progress for.
func superseded(t *testing.T, c *cluster, manager, worker string) int {
	t.Helper()
	n := 0
	for _, node := range c.Nodes() {
		if node.Name != manager {
			continue
		}
		b, err := os.ReadFile(node.Log)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "progress from a superseded attempt") && strings.Contains(line, "worker="+worker+" ") {
				n++
			}
		}
	}
	return n
}

// A worker frozen past failure detection is replaced; when it thaws, its
// checkpoints and batches are refused by incarnation.
func TestRainstormFrozenWorkerExactlyOnce(t *testing.T) {
	const records = 40000
	want := generated(t, records, 17, keepLow)
	c := startCluster(t, 1, 4, 3)
	id := c.submit(pacedJob(records, 4000, true))
	victim := c.taskWorker(id, "paced", 3)
	if err := c.Signal(victim, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Past detection: the task runs again elsewhere.
	testutil.Eventually(t, 60*time.Second, 200*time.Millisecond, func() error {
		out, err := c.output(id, "paced")
		if err != nil {
			return err
		}
		if task := out.Tasks[3]; task.Attempts < 2 || task.Worker == victim {
			return fmt.Errorf("task 3 is still on %s (attempt %d)", task.Worker, task.Attempts)
		}
		return nil
	})
	leader := c.leader()
	before, err := staleCheckpoints(t, c, leader)
	if err != nil {
		t.Fatal(err)
	}
	cancelledBefore := superseded(t, c, leader, victim)
	if err := c.Signal(victim, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// The thawed incarnation is refused by the leader: its next checkpoint
	// as stale (counted in /metrics), or before that (a thawed task cuts or
	// resends a checkpoint only ticks later, its worker reports progress at
	// once) its run, cancelled as a superseded attempt (logged).
	var how string
	testutil.Eventually(t, 60*time.Second, 200*time.Millisecond, func() error {
		n, err := staleCheckpoints(t, c, leader)
		if err != nil {
			return err
		}
		if n > before {
			how = fmt.Sprintf("%d checkpoint(s) of the stale incarnation refused", n-before)
			return nil
		}
		if superseded(t, c, leader, victim) > cancelledBefore {
			how = "its run cancelled as a superseded attempt"
			return nil
		}
		return fmt.Errorf("nothing of %s's stale incarnation refused since the thaw", victim)
	})
	t.Logf("the thawed worker's stale incarnation: %s", how)
	out := c.finish(id, "paced")
	diffRows(t, "after SIGSTOP and SIGCONT", out.Rows, want)
}

// countTotal sums a count's output rows (key, count): the records it
// counted, which an at-least-once run may exceed.
func countTotal(rows [][]string) int {
	n := 0
	for _, r := range rows {
		v, _ := strconv.Atoi(r[1])
		n += v
	}
	return n
}

// At-least-once under the same fault may count some records twice; the
// exactly-once tests are not exact by luck.
func TestRainstormAtLeastOnceCanOverCount(t *testing.T) {
	const records = 40000
	want := generated(t, records, 17, keepLow)
	c := startCluster(t, 1, 4, 3)
	for attempt := range 3 {
		id := c.submit(pacedJob(records, 4000, false))
		victim := c.taskWorker(id, "paced", 1) // a filter task: its unacked output is resent
		if err := c.Kill(victim); err != nil {
			t.Fatal(err)
		}
		st := c.waitStatus(id, 180*time.Second, terminal)
		if st.Status != wire.JobCompleted {
			t.Fatalf("job ended %s", st.Status)
		}
		out, err := c.output(id, "paced")
		if err != nil {
			t.Fatal(err)
		}
		got, exact := countTotal(out.Rows), countTotal(want)
		t.Logf("attempt %d: at-least-once counted %d records, exactly %d", attempt+1, got, exact)
		if got > exact {
			return
		}
		if got < exact {
			t.Fatalf("at-least-once lost records: %d < %d", got, exact)
		}
		if err := c.Restart(victim); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("at-least-once never over-counted under a worker SIGKILL")
}

func TestRainstormBadInputThroughCLI(t *testing.T) {
	path := signsPath(t)
	dir := t.TempDir()
	copySigns(t, path, dir)
	c := startCluster(t, 1, 1, 2)
	cases := []struct{ name, stages, want string }{
		{"unknown op", "      - {name: a, op: frobnicate}\n", `:7: `},
		{"key not in header", "      - {name: a, op: count, key: Nope}\n", `"Nope" is not in the input's columns`},
		{"missing exec program", "      - {name: a, op: exec, command: /no/such/program}\n", `/no/such/program`},
		{"missing relative exec program", "      - {name: a, op: exec, command: ./no/such.sh}\n", `not found beside the job file`},
		{"tasks 0", "      - {name: a, op: filter, tasks: 0, matches: x}\n", `tasks`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := "name: bad\nworkflows:\n  - name: bad\n    type: rainstorm\n    source: {file: signs.csv, header: true}\n    stages:\n" + tc.stages
			jf := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			if err := os.WriteFile(jf, []byte(job), 0o644); err != nil {
				t.Fatal(err)
			}
			code, _, stderr := runCLI(t, c, "submit", jf)
			if code == 0 {
				t.Fatalf("accepted:\n%s", job)
			}
			if !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, ":7") {
				t.Fatalf("stderr does not point at line 7 with %q:\n%s", tc.want, stderr)
			}
		})
	}
}

// A pipeline submitted to a gate runs in one datacenter, and its output
// comes back through the gate: the gate reads it from the datacenter's
// manager leader page by page. A record output of every input record spans
// several pages. A pipeline asking for two datacenters is refused.
func TestRainstormThroughGate(t *testing.T) {
	path := signsPath(t)
	counts := telesparCounts(t, path)
	header, rows := readSigns(t, path)
	post, cat := col(t, header, "Sign_Post"), col(t, header, "Category")
	dir := t.TempDir()
	copySigns(t, path, dir)
	jf := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(jf, []byte(`name: telespar
timeout: 120s
workflows:
  - name: by-category
    type: rainstorm
    source: {file: signs.csv, header: true}
    stages:
      - {name: telespar, op: filter, tasks: 2, field: Sign_Post, equals: "Punched Telespar"}
      - {name: count, op: count, tasks: 2, key: Category}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	// One manager and a long lease, for a loaded machine: this test is
	// about the output's way back through the gate, not elections or lease
	// expiry (the manager tests cover a follower pointing at the leader).
	c := startWith(t, devcluster.Options{Gates: 1, Datacenters: 1, Managers: 1, Workers: 3, CoresPerWorker: 2, LeaseTTL: 30 * time.Second})

	// The file source goes up to the gate, which hands it to the
	// datacenter with the job.
	id := submitCLI(t, c, jf)
	out := c.finish(id, "by-category")
	diffRows(t, "filter→count through a gate", out.Rows, countRows(counts))
	code, stdout, stderr := runCLI(t, c, "results", id, "--workflow", "by-category", "--format", "csv")
	if code != 0 {
		t.Fatalf("tempest results through a gate: exit %d: %s", code, stderr)
	}
	var wantCSV bytes.Buffer
	cw := csv.NewWriter(&wantCSV)
	_ = cw.Write([]string{"key", "value"})
	_ = cw.WriteAll(countRows(counts))
	if stdout != wantCSV.String() {
		t.Fatalf("tempest results --format csv through a gate:\n%s\nwant:\n%s", stdout, wantCSV.String())
	}
	// watch through the gate shows each stage that runs tasks (the filter
	// runs chained in the source task).
	code, _, stderr = runCLI(t, c, "watch", id)
	if code != 0 {
		t.Fatalf("watch: exit %d: %s", code, stderr)
	}
	for _, stage := range []string{"source", "count"} {
		if !hasLine(stderr, stage, "tasks 0/", "records", "restarts 0", "bad 0") {
			t.Fatalf("watch through a gate shows no line for stage %s:\n%s", stage, stderr)
		}
	}

	// Every record, every column: several pages between manager and gate.
	id, out = c.runPipeline(fmt.Sprintf(`name: everything
timeout: 120s
workflows:
  - name: all
    type: rainstorm
    source: {path: %q, header: true}
    stages:
      - {name: any, op: filter, tasks: 2, matches: "."}
`, path), "all", 180*time.Second)
	if !slices.Equal(out.Header, header) {
		t.Errorf("header %v, want %v", out.Header, header)
	}
	diffRows(t, "every record through a gate", out.Rows, rows)
	var size int
	for _, r := range out.Rows {
		for _, f := range r {
			size += len(f)
		}
	}
	if size < 2<<20 {
		t.Fatalf("the output is %d bytes: too small to need several pages", size)
	}
	code, stdout, stderr = runCLI(t, c, "results", id, "--workflow", "all", "--format", "csv")
	if code != 0 {
		t.Fatalf("tempest results through a gate: exit %d: %s", code, stderr)
	}
	wantCSV.Reset()
	cw = csv.NewWriter(&wantCSV)
	_ = cw.Write(header)
	_ = cw.WriteAll(rows)
	if stdout != wantCSV.String() {
		t.Fatalf("tempest results --format csv through a gate differs from the input (%d bytes, want %d)", len(stdout), wantCSV.Len())
	}

	// An exec program named relative to the job file goes up with the job
	// (through the gate) and runs on the workers from that copy: their
	// working directory holds no ops/upper.sh.
	script, err := os.ReadFile("../examples/rainstorm-upper.sh")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "ops"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ops", "upper.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	upper := map[string]int{}
	for _, r := range rows {
		if strings.Contains(r[post], "Telespar") {
			upper[strings.ToUpper(r[cat])]++
		}
	}
	ej := filepath.Join(dir, "exec.yaml")
	if err := os.WriteFile(ej, []byte(`name: upper
timeout: 120s
workflows:
  - name: upper
    type: rainstorm
    source: {file: signs.csv, header: true}
    stages:
      - {name: upper, op: exec, tasks: 2, command: ./ops/upper.sh}
      - {name: count, op: count, tasks: 2, key: "9"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runCLI(t, c, "submit", ej)
	if code != 0 {
		t.Fatalf("submit with a relative exec program: exit %d: %s", code, stderr)
	}
	out = c.finish(strings.TrimSpace(stdout), "upper")
	diffRows(t, "exec program uploaded with the job", out.Rows, countRows(upper))

	// Two datacenters would each run the whole pipeline.
	two := filepath.Join(dir, "two.yaml")
	job, _ := os.ReadFile(jf)
	if err := os.WriteFile(two, bytes.Replace(job, []byte("workflows:"), []byte("datacenters: 2\nworkflows:"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCLI(t, c, "submit", two)
	if code == 0 || !strings.Contains(stderr, "runs in one datacenter") {
		t.Fatalf("a pipeline over two datacenters: exit %d: %s", code, stderr)
	}
}

// A pipeline that fits the datacenter but not its free cores: it waits
// whole, holding none of them, and not in silence; the status and each of
// the pipeline's tasks say why it waits.
func TestRainstormUnplacedTaskSaysWhy(t *testing.T) {
	c := startCluster(t, 1, 1, 2)
	busy := c.submit(`name: busy
timeout: 600s
workflows:
  - name: busy
    type: rainstorm
    source: {generate: {records: 1000000, rate: 1000, keys: 3}}
    stages:
      - {name: low, op: filter, tasks: 2, field: value, matches: '^[0-4]?[0-9]?[0-9]$', chain: false}
      - {name: count, op: count, tasks: 1, key: key}
`)
	c.taskWorker(busy, "busy", 0) // it holds both cores
	id := c.submit(`name: waits
timeout: 120s
workflows:
  - name: big
    type: rainstorm
    source: {generate: {records: 1000, keys: 3}}
    stages:
      - {name: count, op: count, tasks: 2, key: key}
`)
	testutil.Eventually(t, 60*time.Second, 200*time.Millisecond, func() error {
		st, err := c.client.Job(context.Background(), id)
		if err != nil {
			return err
		}
		if len(st.Workflows) != 1 || !strings.Contains(st.Workflows[0].Waiting, "waiting: no free core") {
			return fmt.Errorf("status: %+v", st.Workflows)
		}
		out, err := c.output(id, "big")
		if err != nil {
			return err
		}
		waiting := 0
		for _, task := range out.Tasks {
			if task.Status == wire.WorkflowPending && task.Worker == "" &&
				strings.Contains(task.Waiting, "no free cores for the whole pipeline (needs 2, 0 free)") {
				waiting++
			}
		}
		if waiting != 3 {
			return fmt.Errorf("%d tasks say they wait for a core: %+v", waiting, out.Tasks)
		}
		return nil
	})
	for _, j := range []string{id, busy} {
		if _, err := c.client.Cancel(context.Background(), j, "test over"); err != nil {
			t.Fatal(err)
		}
	}
}
