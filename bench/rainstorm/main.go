// Command rainstorm measures RainStorm pipelines end to end on a local
// cluster of real processes, beside Miller and a plain Go pass:
//
//  1. makes an input of -records records from the traffic-signs file (copies
//     with new OBJECTIDs, header and quoted newlines kept) and checks it with
//     encoding/csv, which also gives the expected output;
//
//  2. runs, interleaved for -reps repetitions (eo alo mlr go, eo alo mlr go,
//     ...), filter Sign_Post = "Punched Telespar" → count by Category with 3
//     tasks per stage exactly-once (eo) and at-least-once (alo) through
//     `tempest submit` on a devcluster of 3 managers and 3 workers, Miller
//     (mlr) and a plain encoding/csv pass (go); every output is compared
//     exactly with the expected one (at-least-once may over-count, never
//     lose: the excess is reported); a run that fails or does not finish
//     is reported and the reps go on; it reports records/s end to end (from
//     starting `tempest submit` to the output being complete and read by
//     `tempest results`; the status is polled without rows meanwhile, as
//     `tempest watch` does) and CPU per record by process (/proc/PID/stat
//     before and after, rusage for children);
//
//  3. -kills times, SIGKILLs the worker running a stage task mid-run and
//     reports kill → worker declared dead (failure detection) and kill →
//     its tasks taking records in again elsewhere;
//
//  4. with -profile, samples the nodes' CPU with perf during one more
//     exactly-once run and sums it by component.
//
//     make build && go run ./bench/rainstorm -bin bin [-records 1000000] [-reps 3] [-kills 3] [-profile] [-source path|file] [-chain=false] [-pipeline count|project|exec] [-trace]
//
// Tables on stdout, progress on stderr. Everything it writes (the input,
// the cluster, profiles) is under -dir, removed at the end unless -keep.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"tempest/api"
	"tempest/internal/devcluster"
	"tempest/swim"
	"tempest/wire"
)

type options struct {
	bin, data, dir    string
	records, reps     int
	kills             int
	managers, workers int
	cores, tasks      int
	swimProfile       string
	electProfile      string
	profile, keep     bool
	trace             bool
	source            string
	chain             bool
	split             int
	pipeline          string
	poll              time.Duration
	kinds             string
	killAt            float64
	runTimeout        time.Duration
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "-floor-pass" {
		os.Exit(floorMain(os.Args[2]))
	}
	var o options
	flag.StringVar(&o.bin, "bin", "bin", "directory holding tempest, tempest-manager and tempest-worker")
	flag.StringVar(&o.data, "data", "../shared/data/traffic_signs_full.csv", "traffic-signs CSV the input is made from")
	flag.StringVar(&o.dir, "dir", "", "working directory (default: a new one under $TMPDIR)")
	flag.IntVar(&o.records, "records", 1_000_000, "records in the input")
	flag.IntVar(&o.reps, "reps", 3, "interleaved repetitions")
	flag.IntVar(&o.kills, "kills", 3, "worker SIGKILL trials for the recovery measurement (0: none)")
	flag.Float64Var(&o.killAt, "kill-at", 0.3, "kill when the source has read this fraction of the input")
	flag.IntVar(&o.managers, "managers", 3, "managers")
	flag.IntVar(&o.workers, "workers", 3, "workers")
	flag.IntVar(&o.cores, "cores", 4, "cores per worker (the 7 tasks need 7 free on the workers left after a kill)")
	flag.IntVar(&o.tasks, "tasks", 3, "tasks per stage")
	flag.StringVar(&o.swimProfile, "swim-profile", "test", "SWIM profile of every node (as tempest dev)")
	flag.StringVar(&o.electProfile, "election-profile", "test", "election profile of every node")
	flag.StringVar(&o.source, "source", "path", "how the pipelines read the input: path (read in place by the source's worker, as Miller reads it) or file (uploaded by tempest submit, inside the timed run)")
	flag.BoolVar(&o.chain, "chain", true, "run the filter in the source task and pre-aggregate the count there (false: chain: false on both stages, each in tasks of its own)")
	flag.IntVar(&o.split, "split", 1, "source tasks reading the input, each a byte range of it (source.split; the kill trials watch the first range's progress)")
	flag.StringVar(&o.pipeline, "pipeline", "count", "count: filter → count by Category; project: filter → project OBJECTID, Category (record output, in input order); exec: filter → an awk program upper-casing Category → count by it")
	flag.StringVar(&o.kinds, "kinds", "eo,alo,mlr,go", "what runs in each repetition, in this order")
	flag.BoolVar(&o.profile, "profile", false, "perf-sample the nodes during one more exactly-once run")
	flag.BoolVar(&o.keep, "keep", false, "keep -dir")
	flag.BoolVar(&o.trace, "trace", false, "print every task's state as it changes after each kill")
	flag.DurationVar(&o.poll, "poll", 50*time.Millisecond, "status poll interval")
	flag.DurationVar(&o.runTimeout, "run-timeout", 3*time.Minute, "longest a pipeline may take (its job timeout)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench/rainstorm:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().UTC().Format("15:04:05 ")+format+"\n", args...)
}

func run(o options) error {
	bin, err := filepath.Abs(o.bin)
	if err != nil {
		return err
	}
	data, err := filepath.Abs(o.data)
	if err != nil {
		return err
	}
	if o.source != "path" && o.source != "file" {
		return fmt.Errorf("-source %q: want path or file", o.source)
	}
	if !slices.Contains([]string{"count", "project", "exec"}, o.pipeline) {
		return fmt.Errorf("-pipeline %q: want count, project or exec", o.pipeline)
	}
	kinds := strings.Split(o.kinds, ",")
	if o.pipeline != "count" && slices.Contains(kinds, "go") {
		return fmt.Errorf("-kinds: the go floor pass counts by Category as read; leave it out with -pipeline %s", o.pipeline)
	}
	for _, k := range kinds {
		if !slices.Contains([]string{"eo", "alo", "mlr", "go"}, k) {
			return fmt.Errorf("-kinds: unknown %q (want eo, alo, mlr, go)", k)
		}
	}
	if slices.Contains(kinds, "mlr") {
		if _, err := exec.LookPath("mlr"); err != nil {
			return fmt.Errorf("Miller (mlr, Debian package miller) is needed for the reference: %w", err)
		}
	}
	dir := o.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "tempest-bench-rainstorm-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(dir)
	}
	printHost(o)

	input := filepath.Join(dir, fmt.Sprintf("signs-%d.csv", o.records))
	t0 := time.Now()
	if err := writeInput(data, input, o.records); err != nil {
		return fmt.Errorf("make input: %w", err)
	}
	seq, err := sequentialPass(input)
	if err != nil {
		return fmt.Errorf("check input: %w", err)
	}
	if seq.Records != o.records {
		return fmt.Errorf("input %s has %d records by encoding/csv, want %d", input, seq.Records, o.records)
	}
	st, _ := os.Stat(input)
	want := countRows(seq.Counts)
	kept := 0
	for _, n := range seq.Counts {
		kept += n
	}
	fmt.Printf("input: %s, %d records (checked with encoding/csv: OBJECTIDs 1..%d, %d with a newline inside a field), %.1f MB; made in %v\n",
		input, seq.Records, seq.Records, seq.Multiline, float64(st.Size())/1e6, time.Since(t0).Round(time.Millisecond))
	fmt.Printf("expected output: %d records pass the filter, %d keys\n\n", kept, len(seq.Counts))

	wantCounts := seq.Counts
	switch o.pipeline {
	case "project":
		want = projectRows(seq.Projected)
	case "exec":
		wantCounts = upperKeys(seq.Counts)
		want = countRows(wantCounts)
		if err := writeUpper(filepath.Join(dir, upperProgram)); err != nil {
			return err
		}
	}
	b := &bench{o: o, bin: bin, dir: dir, input: input, want: want, wantCounts: wantCounts, wantRows: seq.Projected, records: o.records}
	needCluster := o.kills > 0 || o.profile || slices.Contains(kinds, "eo") || slices.Contains(kinds, "alo")
	if needCluster {
		if err := b.startCluster(); err != nil {
			return err
		}
		defer b.c.Stop(context.Background())
		defer b.client.Close()
	}

	results := map[string][]*runResult{}
	var failures []string
	defer func() {
		for _, f := range failures {
			fmt.Println("FAILED", f)
		}
	}()
	for rep := range o.reps {
		for _, k := range kinds {
			r, err := b.runKind(k)
			if err != nil {
				// A pipeline that does not finish is a finding: report it
				// with the others and go on (its job was cancelled).
				failures = append(failures, fmt.Sprintf("rep %d, %s: %v", rep+1, k, err))
				logf("rep %d %-3s FAILED: %v", rep+1, k, err)
				continue
			}
			logf("rep %d %-3s %8.2fs  %9.0f records/s  (over-counted %d)", rep+1, k, r.wall.Seconds(), r.rate(), r.excess)
			results[k] = append(results[k], r)
		}
	}
	if o.reps > 0 {
		report(o, kinds, results)
	}

	if o.kills > 0 {
		var trials []*killTrial
		var failed []string
		for i := range o.kills {
			tr, err := b.killTrial(i + 1)
			if err != nil {
				// A failed trial is a finding, not the end of the run:
				// report it, bring the cluster back and go on.
				failed = append(failed, fmt.Sprintf("kill trial %d: %v", i+1, err))
				logf("kill trial %d failed: %v", i+1, err)
				if err := b.heal(); err != nil {
					return err
				}
				continue
			}
			trials = append(trials, tr)
		}
		defer func() {
			for _, f := range failed {
				fmt.Println("FAILED", f)
			}
		}()
		reportKills(o, trials)
	}
	if o.profile {
		if err := b.profileRun(); err != nil {
			return fmt.Errorf("profile: %w", err)
		}
	}
	return nil
}

func printHost(o options) {
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("bench/rainstorm  %s  load average at start: %s", time.Now().UTC().Format(time.RFC3339), load)
	chained := "filter chained into the source, count combined there"
	if !o.chain {
		chained = "every stage in tasks of its own (chain: false)"
	}
	fmt.Printf("cluster: %d managers, %d workers × %d cores, SWIM profile %q, election profile %q; %d tasks per stage, %s; source %s in %d range(s):\n",
		o.managers, o.workers, o.cores, o.swimProfile, o.electProfile, o.tasks, chained, o.source, max(o.split, 1))
}

type bench struct {
	o          options
	bin        string
	dir        string
	input      string
	want       string
	wantCounts map[string]int
	wantRows   [][]string // -pipeline project
	records    int
	c          *devcluster.Cluster
	client     *api.Client
	env        []string
	jobs       int
}

func (b *bench) startCluster() error {
	ctx := context.Background()
	// path: sources read the bench's copy of the input, in its folder.
	wcfg := map[string]any{"source_dirs": []string{b.dir}}
	if b.o.pipeline == "exec" {
		// Workers run only the programs their config names: this one, by
		// its digest (as tempest dev allows the README's example).
		prog, err := os.ReadFile(filepath.Join(b.dir, upperProgram))
		if err != nil {
			return err
		}
		sum := sha256.Sum256(prog)
		ecfg := map[string]any{"enabled": true, "program_sums": []string{hex.EncodeToString(sum[:])}}
		if os.Geteuid() == 0 {
			ecfg["user"] = "root" // a root worker refuses exec without naming its user
		}
		wcfg["exec"] = ecfg
	}
	c, err := devcluster.Start(ctx, devcluster.Options{
		Dir: filepath.Join(b.dir, "cluster"), BinDir: b.bin, Managers: b.o.managers, Workers: b.o.workers,
		CoresPerWorker: b.o.cores, SwimProfile: b.o.swimProfile, ElectionProfile: b.o.electProfile,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		WorkerConfig: wcfg,
	})
	if err != nil {
		return err
	}
	b.c = c
	if err := b.ready(); err != nil {
		c.Stop(ctx)
		return err
	}
	if b.client, err = c.Client(); err != nil {
		c.Stop(ctx)
		return err
	}
	b.env = append(os.Environ(), "TEMPEST_API="+strings.Join(c.APIs(), ","), "TEMPEST_TOKEN="+c.Token())
	return nil
}

// heal restarts every node that is not running and waits for the cluster.
func (b *bench) heal() error {
	for _, n := range b.c.Nodes() {
		if !b.c.Running(n.Name) {
			if err := b.c.Restart(n.Name); err != nil {
				return err
			}
		}
	}
	return b.ready()
}

func (b *bench) ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := b.c.WaitReady(ctx)
	return err
}

// nodePIDs names every running node's process.
func (b *bench) nodePIDs() map[string]int {
	pids := map[string]int{}
	for _, n := range b.c.Nodes() {
		if b.c.Running(n.Name) {
			pids[n.Name] = n.PID
		}
	}
	return pids
}

// runResult is one timed run.
type runResult struct {
	kind    string
	records int
	wall    time.Duration
	cpu     map[string]time.Duration // by process
	leader  string                   // the manager leader during the run
	// excess is how many records an at-least-once run counted more than
	// once (its output is otherwise checked to hold every record).
	excess int
}

func (r *runResult) rate() float64 { return float64(r.records) / r.wall.Seconds() }

func (b *bench) runKind(kind string) (*runResult, error) {
	switch kind {
	case "eo", "alo":
		r, _, err := b.pipeline(kind == "eo", nil)
		return r, err
	case "mlr":
		if b.o.pipeline == "project" {
			return b.child("mlr", nil, "mlr", "--icsv", "--ocsv", "filter", `$`+filterField+` == "`+filterValue+`"`,
				"then", "cut", "-o", "-f", strings.Join(projectFields, ","), b.input)
		}
		if b.o.pipeline == "exec" {
			return b.child("mlr", parseMiller, "mlr", "--icsv", "--ojson", "filter", `$`+filterField+` == "`+filterValue+`"`,
				"then", "put", `$`+keyField+` = toupper($`+keyField+`)`, "then", "count", "-g", keyField, b.input)
		}
		return b.child("mlr", parseMiller, "mlr", "--icsv", "--ojson", "filter", `$`+filterField+` == "`+filterValue+`"`,
			"then", "count", "-g", keyField, b.input)
	default:
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		return b.child("go", parseFloor, self, "-floor-pass", b.input)
	}
}

// child times one process to its exit and checks its output.
func (b *bench) child(kind string, parse func([]byte) (map[string]int, error), name string, args ...string) (*runResult, error) {
	cmd := exec.Command(name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", name, err, tail(stderr.Bytes()))
	}
	if parse == nil {
		// Records: compared as CSV rows, which a writer may quote
		// differently from Go's.
		if excess, err := projectExcess(stdout.String(), b.wantRows); err != nil || excess != 0 {
			return nil, fmt.Errorf("%s output differs from the sequential pass (%d rows repeated): %v", name, excess, err)
		}
	} else {
		counts, err := parse(stdout.Bytes())
		if err != nil {
			return nil, fmt.Errorf("%s output: %w", name, err)
		}
		if got := countRows(counts); got != b.want {
			return nil, fmt.Errorf("%s output differs from the sequential pass:\n%s\nwant:\n%s", name, got, b.want)
		}
	}
	ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return &runResult{kind: kind, records: b.records, wall: wall, cpu: map[string]time.Duration{kind: rusageCPU(ru)}}, nil
}

// parseMiller reads `mlr --ojson ... count -g Category`: [{"Category": k, "count": n}, ...].
func parseMiller(out []byte) (map[string]int, error) {
	var rows []map[string]json.RawMessage
	if err := json.Unmarshal(out, &rows); err != nil {
		return nil, err
	}
	counts := map[string]int{}
	for _, row := range rows {
		var n int
		if err := json.Unmarshal(row["count"], &n); err != nil {
			return nil, fmt.Errorf("count %s: %w", row["count"], err)
		}
		// Miller infers types: a numeric-looking key comes back as a
		// number, so take the raw text unless it is a JSON string.
		raw := row[keyField]
		var k string
		if err := json.Unmarshal(raw, &k); err != nil {
			k = string(raw)
		}
		counts[k] = n
	}
	return counts, nil
}

func parseFloor(out []byte) (map[string]int, error) {
	counts := map[string]int{}
	return counts, json.Unmarshal(out, &counts)
}

// floorMain is the child the go kind times: the plain encoding/csv pass.
func floorMain(path string) int {
	counts, err := floorPass(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = json.NewEncoder(os.Stdout).Encode(counts)
	return 0
}

func tail(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

const workflowName = "by-category"

func (b *bench) jobFile(exactlyOnce bool) (string, error) {
	b.jobs++
	name := fmt.Sprintf("bench-%d-alo", b.jobs)
	if exactlyOnce {
		name = fmt.Sprintf("bench-%d-eo", b.jobs)
	}
	chain := ""
	if !b.o.chain {
		chain = ", chain: false"
	}
	last := fmt.Sprintf("{name: count, op: count, tasks: %d, key: %s%s}", b.o.tasks, keyField, chain)
	switch b.o.pipeline {
	case "project":
		last = fmt.Sprintf("{name: pick, op: project, tasks: %d, fields: [%s]%s}", b.o.tasks, strings.Join(projectFields, ", "), chain)
	case "exec":
		// After an exec stage fields are named by column number.
		col, err := column(b.input, keyField)
		if err != nil {
			return "", err
		}
		last = fmt.Sprintf("{name: upper, op: exec, tasks: %d, command: ./%s%s}\n      - {name: count, op: count, tasks: %d, key: %q%s}",
			b.o.tasks, upperProgram, chain, b.o.tasks, strconv.Itoa(col+1), chain)
	}
	src := b.input
	if b.o.source == "file" {
		src = filepath.Base(b.input) // beside the job file
	}
	job := fmt.Sprintf(`name: %s
timeout: %s
workflows:
  - name: %s
    type: rainstorm
    exactly_once: %t
    source: {%s: %q, format: csv, header: true, split: %d}
    stages:
      - {name: telespar, op: filter, tasks: %d, field: %s, equals: %q%s}
      - %s
`, name, b.o.runTimeout, workflowName, exactlyOnce, b.o.source, src, max(b.o.split, 1), b.o.tasks, filterField, filterValue, chain, last)
	path := filepath.Join(b.dir, name+".yaml")
	return path, os.WriteFile(path, []byte(job), 0o644)
}

// tempest runs the CLI and returns its stdout.
func (b *bench) tempest(args ...string) (string, *os.ProcessState, error) {
	cmd := exec.Command(filepath.Join(b.bin, "tempest"), args...)
	cmd.Env = b.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", nil, fmt.Errorf("tempest %s: %w: %s", strings.Join(args, " "), err, tail(stderr.Bytes()))
	}
	return stdout.String(), cmd.ProcessState, nil
}

// output polls a run's status, tasks and counters without its rows, as
// `tempest watch` does: the rows are read once, when the output is
// complete. (Polling them too made the leader build, sort and encode the
// whole output so far every poll, which for a record output of half a
// million rows cost more CPU than the pipeline.)
func (b *bench) output(id string) (*api.PipelineOutput, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return b.client.OutputSummary(ctx, id, workflowName)
}

func (b *bench) leader() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := b.client.Cluster(ctx)
	if err != nil {
		return ""
	}
	for _, n := range v.Nodes {
		if n.IsLeader && n.Role == string(wire.RoleManager) {
			return n.Name
		}
	}
	return ""
}

// pipeline runs one pipeline job from `tempest submit` to its complete
// output, checked against the sequential pass. watch, if set, is called
// with every status polled while it runs (the kill trials act there).
func (b *bench) pipeline(exactlyOnce bool, watch func(*api.PipelineOutput) error) (*runResult, *api.PipelineOutput, error) {
	kind := "alo"
	if exactlyOnce {
		kind = "eo"
	}
	jf, err := b.jobFile(exactlyOnce)
	if err != nil {
		return nil, nil, err
	}
	leader := b.leader()
	pids := b.nodePIDs()
	cpu0, err := snapCPU(pids)
	if err != nil {
		return nil, nil, err
	}
	start := time.Now()
	stdout, cli, err := b.tempest("submit", jf)
	if err != nil {
		return nil, nil, err
	}
	id := strings.TrimSpace(stdout)
	deadline := start.Add(b.o.runTimeout + time.Minute)
	var out *api.PipelineOutput
	for {
		o, err := b.output(id)
		switch {
		case err != nil && time.Now().After(deadline):
			return nil, nil, fmt.Errorf("job %s: %w", id, err)
		case err == nil:
			out = o
			if watch != nil {
				if err := watch(out); err != nil {
					return nil, nil, fmt.Errorf("job %s: %w", id, err)
				}
			}
		}
		if out != nil && out.Status.Terminal() {
			if out.Status != wire.JobCompleted {
				return nil, nil, fmt.Errorf("job %s ended %s:%s", id, out.Status, taskLine(out))
			}
			if out.Complete {
				break
			}
		}
		if time.Now().After(deadline) {
			_, _, cerr := b.tempest("cancel", id)
			return nil, nil, fmt.Errorf("job %s not complete after %v (cancelled: %v): %s", id, time.Since(start).Round(time.Second), cerr, taskLine(out))
		}
		time.Sleep(b.o.poll)
	}
	// Reading the output is part of the run, as writing it is part of
	// Miller's: the clock and the CPU figures stop once it is read.
	csvOut, res, err := b.tempest("results", id, "--workflow", workflowName, "--format", "csv")
	if err != nil {
		return nil, nil, err
	}
	wall := time.Since(start)
	// Nodes killed during the run are left out of the CPU figures.
	cpu1, _ := snapCPU(b.nodePIDs())
	cpu := map[string]time.Duration{}
	for name, d := range cpu1 {
		if _, ok := cpu0[name]; ok && pids[name] == b.pid(name) {
			cpu[name] = d - cpu0[name]
		}
	}
	cpu["cli"] = cli.UserTime() + cli.SystemTime() + res.UserTime() + res.SystemTime()
	var excess int
	if csvOut != b.want {
		// At-least-once may count a record more than once, never less.
		if b.o.pipeline == "project" {
			excess, err = projectExcess(csvOut, b.wantRows)
		} else {
			excess, err = overCount(csvOut, b.wantCounts)
		}
		if exactlyOnce || err != nil {
			return nil, nil, fmt.Errorf("job %s (%s): tempest results differs from the sequential pass (%v):\n%s\nwant:\n%s", id, kind, err, csvOut, b.want)
		}
	}
	for name := range cpu {
		if name == leader {
			cpu["leader "+name] = cpu[name]
			delete(cpu, name)
		}
	}
	return &runResult{kind: kind, records: b.records, wall: wall, cpu: cpu, leader: leader, excess: excess}, out, nil
}

func (b *bench) pid(name string) int {
	if n, ok := b.c.Node(name); ok {
		return n.PID
	}
	return 0
}

// detectionBound is the SWIM profile's failure detection bound for this
// cluster (crash → every survivor declares the node dead).
func detectionBound(o options) (typical, bound time.Duration, err error) {
	t, err := swim.ProfileTiming(o.swimProfile)
	if err != nil {
		return 0, 0, err
	}
	n := o.managers + o.workers
	lo, _ := t.SuspicionTimeout(n)
	return t.ProbeInterval + t.ProbeInterval + lo, t.DetectionBound(n), nil
}
