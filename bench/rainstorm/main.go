// Command rainstorm measures RainStorm pipelines on real processes:
//
//  1. a 1,000,000-record CSV made deterministically from
//     traffic_signs_full.csv (its records repeated with new OBJECTIDs);
//
//  2. filter (Sign_Post == "Punched Telespar") → count by Category on a
//     cluster of -managers managers and -workers workers, exactly-once and
//     at-least-once, side by side with Miller as the single-process
//     reference (mlr --icsv filter ... then count -g Category), each
//     checked against the others' counts;
//
//  3. records per second end to end (submit → job completed), the EO/ALO
//     cost ratio, CPU seconds per million records by process (from
//     /proc/PID/stat);
//
//  4. recovery: a worker running a filter task is SIGKILLed mid-run, and
//     the time until its task runs again elsewhere with records flowing is
//     measured.
//
//     make build && go run ./bench/rainstorm -bin bin -data ../shared/data/traffic_signs_full.csv
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
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
	"time"

	"tempest/api"
	"tempest/devcluster"
	"tempest/wire"
)

type options struct {
	bin, data         string
	records           int
	managers, workers int
	cores, tasks      int
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin", "directory holding the tempest binaries")
	flag.StringVar(&o.data, "data", "../shared/data/traffic_signs_full.csv", "the traffic signs CSV")
	flag.IntVar(&o.records, "records", 1_000_000, "records in the generated input")
	flag.IntVar(&o.managers, "managers", 3, "managers")
	flag.IntVar(&o.workers, "workers", 3, "workers")
	flag.IntVar(&o.cores, "cores", 4, "cores per worker")
	flag.IntVar(&o.tasks, "tasks", 3, "tasks per stage")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench/rainstorm:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	dir, err := os.MkdirTemp("", "rainstorm-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	input := filepath.Join(dir, "signs-1m.csv")
	if err := makeInput(o.data, input, o.records); err != nil {
		return err
	}
	st, _ := os.Stat(input)
	fmt.Printf("input: %d records, %.0f MB (%s)\n\n", o.records, float64(st.Size())/1e6, input)

	mlrRows, mlrWall, err := miller(input)
	if err != nil {
		fmt.Fprintln(os.Stderr, "miller:", err)
	}

	bin, _ := filepath.Abs(o.bin)
	c, err := devcluster.Start(context.Background(), devcluster.Options{
		Dir: filepath.Join(dir, "cluster"), BinDir: bin, Managers: o.managers, Workers: o.workers,
		CoresPerWorker: o.cores, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c.Stop(ctx)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.WaitReady(ctx); err != nil {
		return err
	}
	client, err := c.Client()
	if err != nil {
		return err
	}
	defer client.Close()

	type result struct {
		name string
		wall time.Duration
		cpu  map[string]float64
		rows [][]string
	}
	var results []result
	for _, eo := range []bool{true, false} {
		name := "exactly-once"
		if !eo {
			name = "at-least-once"
		}
		before := cpuByRole(c)
		start := time.Now()
		id, err := client.Submit(context.Background(), []byte(job(input, eo, o.tasks)), "bench.yaml")
		if err != nil {
			return err
		}
		out, err := await(client, id)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		wall := time.Since(start)
		after := cpuByRole(c)
		cpu := map[string]float64{}
		for k, v := range after {
			cpu[k] = v - before[k]
		}
		results = append(results, result{name, wall, cpu, out.Rows})
		fmt.Fprintf(os.Stderr, "%s: %s\n", name, wall.Round(time.Millisecond))
	}

	fmt.Printf("%-16s %10s %12s %10s %10s %10s\n", "run", "wall", "records/s", "cpu-s/1M mgr", "worker", "matches")
	for _, r := range results {
		match := "-"
		if mlrRows != nil {
			match = strconv.FormatBool(slices.EqualFunc(r.rows, mlrRows, slices.Equal[[]string]))
		}
		per := 1e6 / float64(o.records)
		fmt.Printf("%-16s %10s %12.0f %10.1f %10.1f %10s\n", r.name, r.wall.Round(time.Millisecond),
			float64(o.records)/r.wall.Seconds(), r.cpu["manager"]*per, r.cpu["worker"]*per, match)
	}
	if mlrRows != nil {
		fmt.Printf("%-16s %10s %12.0f\n", "miller", mlrWall.Round(time.Millisecond), float64(o.records)/mlrWall.Seconds())
	}
	if len(results) == 2 {
		fmt.Printf("\nEO/ALO wall-clock cost: %.2fx\n", results[0].wall.Seconds()/results[1].wall.Seconds())
		if mlrRows != nil {
			fmt.Printf("EO rate / Miller rate: %.2fx\n", mlrWall.Seconds()/results[0].wall.Seconds())
		}
	}

	rec, err := recovery(c, client, input, o.tasks)
	if err != nil {
		return fmt.Errorf("recovery: %w", err)
	}
	fmt.Printf("\nrecovery after a worker SIGKILL (kill → the task's replacement has taken records): %s\n", rec.Round(time.Millisecond))
	return nil
}

func job(input string, exactlyOnce bool, tasks int) string {
	return fmt.Sprintf(`name: bench
timeout: 600s
workflows:
  - name: telespar
    type: rainstorm
    exactly_once: %t
    source: {path: %q, header: true}
    stages:
      - {name: telespar, op: filter, tasks: %d, field: Sign_Post, equals: "Punched Telespar"}
      - {name: count, op: count, tasks: %d, key: Category}
`, exactlyOnce, input, tasks, tasks)
}

func output(client *api.Client, id string) (*api.PipelineOutput, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := client.Output(ctx, id, "telespar", "json")
	if err != nil {
		return nil, err
	}
	var out api.PipelineOutput
	return &out, json.Unmarshal(b, &out)
}

func await(client *api.Client, id string) (*api.PipelineOutput, error) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := client.Job(ctx, id)
		cancel()
		if err == nil && st.Status.Terminal() {
			if st.Status != wire.JobCompleted {
				return nil, fmt.Errorf("job %s ended %s: %s", id, st.Status, st.Error)
			}
			return output(client, id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// recovery kills the worker of filter task 0 once the source has read a
// fifth of the input, and times until that task's replacement took records.
func recovery(c *devcluster.Cluster, client *api.Client, input string, tasks int) (time.Duration, error) {
	id, err := client.Submit(context.Background(), []byte(job(input, true, tasks)), "bench.yaml")
	if err != nil {
		return 0, err
	}
	var victim string
	for victim == "" {
		out, err := output(client, id)
		if err == nil && len(out.Tasks) > 1 && out.Tasks[0].Records > 200_000 && out.Tasks[1].Status == wire.WorkflowRunning {
			victim = out.Tasks[1].Worker
		}
		time.Sleep(20 * time.Millisecond)
	}
	killed := time.Now()
	if err := c.Kill(victim); err != nil {
		return 0, err
	}
	for {
		out, err := output(client, id)
		if err == nil {
			t := out.Tasks[1]
			if t.Attempts >= 2 && t.Worker != victim && t.Status == wire.WorkflowRunning && t.Records > 0 {
				d := time.Since(killed)
				_, err := await(client, id)
				return d, err
			}
			if t.Status == wire.WorkflowCompleted {
				return 0, errors.New("the task completed before it was seen running again")
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cpuByRole sums user+system CPU seconds of the cluster's processes by role.
func cpuByRole(c *devcluster.Cluster) map[string]float64 {
	out := map[string]float64{}
	for _, n := range c.Nodes() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n.PID))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		out[n.Role] += (ut + st) / 100 // clock ticks (USER_HZ is 100 on Linux)
	}
	return out
}

// makeInput writes n records made from the traffic signs file: its header
// and BOM, its records in turn with OBJECTID replaced by the row number.
func makeInput(from, to string, n int) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	bom := []byte("\xEF\xBB\xBF")
	all, err := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(data, bom))).ReadAll()
	if err != nil {
		return err
	}
	f, err := os.Create(to)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	bw.Write(bom)
	w := csv.NewWriter(bw)
	w.Write(all[0])
	rec := make([]string, len(all[0]))
	for i := range n {
		copy(rec, all[1+i%(len(all)-1)])
		rec[2] = strconv.Itoa(i + 1)
		w.Write(rec)
	}
	w.Flush()
	return errors.Join(w.Error(), bw.Flush(), f.Close())
}

// miller runs the single-process reference and returns its key,value rows
// sorted by key.
func miller(input string) ([][]string, time.Duration, error) {
	start := time.Now()
	cmd := exec.Command("mlr", "--icsv", "--ocsv", "filter", `$Sign_Post == "Punched Telespar"`, "then", "count", "-g", "Category", input)
	b, err := cmd.Output()
	wall := time.Since(start)
	if err != nil {
		return nil, 0, err
	}
	rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil || len(rows) == 0 {
		return nil, 0, fmt.Errorf("miller output: %v", err)
	}
	rows = rows[1:]
	slices.SortFunc(rows, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	return rows, wall, nil
}
