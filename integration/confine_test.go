package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"tempest/internal/devcluster"
	"tempest/internal/testutil"
	"tempest/rainstorm"
	"tempest/wire"
)

// Jobs are untrusted input (docs/security.md, "Job confinement"): against
// the real binaries, a job holder with the API token reaches no secret
// through exec or a path: source, a huge answer line fails its task without
// the worker's memory following it, and nothing a task's program started
// outlives the task.

// vmHWM reads a process's peak resident set size from /proc.
func vmHWM(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM for %d", pid)
}

// processesWith lists the pids whose command line holds marker.
func processesWith(marker string) []string {
	var pids []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, "cmdline")); err == nil && bytes.Contains(b, []byte(marker)) {
			pids = append(pids, filepath.Base(d))
		}
	}
	return pids
}

func writeProgram(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// execJob is a pipeline of a generated source through one exec task.
func execJob(name, program string) string {
	return fmt.Sprintf(`name: %s
timeout: 60s
workflows:
  - name: %s
    type: rainstorm
    source: {generate: {records: 3, keys: 1}}
    stages:
      - {name: op, op: exec, tasks: 1, command: %q}
`, name, name, program)
}

func TestAttackJobConfinement(t *testing.T) {
	progs, data := t.TempDir(), t.TempDir()
	printEnv := writeProgram(t, progs, "print-env.sh", `while read -r l; do printf 'forward\t%s\n' "$(env | tr '\n' ' ')"; done
`)
	hugeLine := writeProgram(t, progs, "huge-line.sh", `read -r l
head -c 400000000 /dev/zero | tr '\0' a
echo
while read -r l; do echo forward; done
`)
	ready := filepath.Join(t.TempDir(), "leftover-started")
	marker := "tempest-leftover-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	leftover := writeProgram(t, progs, "leave-behind.sh", `setsid sh -c 'touch `+ready+`; sleep 600; echo `+marker+`' </dev/null >/dev/null 2>&1 &
while [ ! -e `+ready+` ]; do sleep 0.01; done
while read -r l; do echo forward; done
`)
	wc := testWorkerConfig(t, printEnv, hugeLine, leftover)
	wc["source_dirs"] = []string{data}
	c := startWith(t, devcluster.Options{Managers: 1, Workers: 1, CoresPerWorker: 2, WorkerConfig: wc})
	var worker *devcluster.Node
	for _, n := range c.Nodes() {
		if n.Role == "worker" {
			worker = n
		}
	}
	secretEnv, err := os.ReadFile(worker.SecretFile)
	if err != nil {
		t.Fatal(err)
	}
	var secrets []string // the worker's own key and the cluster's secret
	for _, line := range strings.Split(string(secretEnv), "\n") {
		if _, v, ok := strings.Cut(line, "="); ok && len(v) >= 16 {
			secrets = append(secrets, strings.Trim(v, `"'`))
		}
	}
	secrets = append(secrets, c.Secret())
	noSecret := func(what, s string) {
		t.Helper()
		for _, sec := range secrets {
			if strings.Contains(s, sec) {
				t.Fatalf("a secret appears in %s", what)
			}
		}
	}

	t.Run("exec printing its environment", func(t *testing.T) {
		_, out := c.runPipeline(execJob("env", printEnv), "env", 45*time.Second)
		if len(out.Rows) != 3 || !strings.Contains(strings.Join(out.Rows[0], " "), "RAINSTORM_STAGE=op") {
			t.Fatalf("output %v, want 3 rows of the program's environment", out.Rows)
		}
		noSecret("the exec program's environment", fmt.Sprint(out.Rows))
		if strings.Contains(fmt.Sprint(out.Rows), "AUTH_SECRET") {
			t.Fatalf("the program's environment names AUTH_SECRET: %v", out.Rows)
		}
	})

	t.Run("path source on the secret file", func(t *testing.T) {
		// Refused at submit, at the job file's line: no worker lists it.
		job := fmt.Sprintf("name: steal\nworkflows:\n  - name: steal\n    type: rainstorm\n    source: {path: %q, format: lines}\n    stages:\n      - {name: all, op: filter, matches: \".\"}\n", worker.SecretFile)
		jf := filepath.Join(t.TempDir(), "steal.yaml")
		if err := os.WriteFile(jf, []byte(job), 0o644); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runCLI(t, c, "submit", jf)
		if code == 0 || !strings.Contains(stderr, "steal.yaml:5") || !strings.Contains(stderr, "source_dirs") {
			t.Fatalf("a path: source on secret.env: exit %d, stderr:\n%s", code, stderr)
		}
		noSecret("the refusal", stdout+stderr)
		// A link inside a listed directory passes the managers' check
		// (they cannot see the worker's disk) and is refused by the worker.
		link := filepath.Join(data, "innocent.txt")
		if err := os.Symlink(worker.SecretFile, link); err != nil {
			t.Fatal(err)
		}
		id := c.submit(strings.Replace(job, worker.SecretFile, link, 1))
		st := c.waitStatus(id, 45*time.Second, terminal)
		if st.Status == wire.JobCompleted {
			t.Fatal("a pipeline read secret.env through a link")
		}
		noSecret("the failed job's status", fmt.Sprintf("%+v", st))
		if out, err := c.output(id, "steal"); err == nil {
			noSecret("the failed job's output", fmt.Sprint(out.Rows))
			if len(out.Rows) > 0 {
				t.Fatalf("output rows from a refused source: %v", out.Rows)
			}
		}
	})

	t.Run("a 400 MB answer line", func(t *testing.T) {
		before, err := vmHWM(worker.PID)
		if err != nil {
			t.Fatal(err)
		}
		id := c.submit(execJob("huge", hugeLine))
		st := c.waitStatus(id, 45*time.Second, terminal)
		if st.Status != wire.JobFailed {
			t.Fatalf("job ended %s", st.Status)
		}
		if msg := fmt.Sprint(st.Error, st.Workflows); !strings.Contains(msg, "answer line too long") {
			t.Fatalf("the failure does not say why: %s", msg)
		}
		after, err := vmHWM(worker.PID)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("worker peak RSS %d MiB before, %d MiB after the 400 MB line", before>>20, after>>20)
		if after-before > rssBound {
			t.Fatalf("the worker's peak RSS grew by %d MiB (bound %d MiB)", (after-before)>>20, rssBound>>20)
		}
	})

	t.Run("no process of a finished task is left", func(t *testing.T) {
		if _, err := rainstorm.DetectCgroupParent(); err != nil {
			t.Skipf("no writable cgroup v2 here (%v): a setsid child escapes the process group", err)
		}
		c.runPipeline(execJob("leave", leftover), "leave", 45*time.Second)
		if _, err := os.Stat(ready); err != nil {
			t.Fatalf("the program's setsid child never started: %v", err)
		}
		testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
			if pids := processesWith(marker); len(pids) > 0 {
				return fmt.Errorf("processes %v of a finished task still run", pids)
			}
			return nil
		})
	})
}

// A path: source's file that changes under a running pipeline: the source
// recorded the file's size and SHA-256 before it sent a record, so the
// replacement placed after its worker's SIGKILL finds another file and
// fails the job, saying so, instead of producing other records under the
// same input ids.
func TestAttackPathSourceChangedUnderThePipeline(t *testing.T) {
	data, progs := t.TempDir(), t.TempDir()
	input := filepath.Join(data, "in.txt")
	lines := func(tag string) []byte {
		var b bytes.Buffer
		for i := range 400 {
			fmt.Fprintf(&b, "%s-%04d\n", tag, i)
		}
		return b.Bytes()
	}
	if err := os.WriteFile(input, lines("before"), 0o644); err != nil {
		t.Fatal(err)
	}
	slow := writeProgram(t, progs, "slow.sh", "while read -r l; do sleep 0.05; echo forward; done\n")
	wc := testWorkerConfig(t, slow)
	wc["source_dirs"] = []string{data}
	c := startWith(t, devcluster.Options{Managers: 1, Workers: 2, CoresPerWorker: 2, WorkerConfig: wc})
	id := c.submit(fmt.Sprintf(`name: changed
timeout: 120s
workflows:
  - name: changed
    type: rainstorm
    source: {path: %q, format: lines}
    stages:
      - {name: slow, op: exec, tasks: 1, command: %q}
`, input, slow))
	var victim string
	testutil.Eventually(t, 60*time.Second, 50*time.Millisecond, func() error {
		out, err := c.output(id, "changed")
		if err != nil {
			return err
		}
		if len(out.Tasks) < 2 || out.Tasks[0].Status != wire.WorkflowRunning || out.Tasks[0].Records == 0 {
			return fmt.Errorf("the source has not read yet: %+v", out.Tasks)
		}
		if out.Complete {
			return fmt.Errorf("the pipeline finished before the test could change its input")
		}
		victim = out.Tasks[0].Worker
		return nil
	})
	// Same size, other bytes: only the hash tells them apart.
	if err := os.WriteFile(input, lines("after!"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(victim); err != nil {
		t.Fatal(err)
	}
	st := c.waitStatus(id, 90*time.Second, terminal)
	if st.Status != wire.JobFailed {
		t.Fatalf("job ended %s over a changed input", st.Status)
	}
	if msg := fmt.Sprint(st.Error, st.Workflows); !strings.Contains(msg, "is not the file the pipeline started on") {
		t.Fatalf("the failure does not say the input changed: %s", msg)
	}
}
