package rainstorm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"tempest/internal/testutil"
)

// answerOne runs script as an exec stage over one record and returns the
// fields of its answer.
func answerOne(t *testing.T, script string, opts ExecOptions) []string {
	t.Helper()
	ex, err := execStage(t, writeScript(t, script)).NewExec(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	out, err := ex.Apply(recs([]string{"a"}), nil, nil)
	if err != nil || len(out) != 1 {
		t.Fatalf("apply: %v, %d records", err, len(out))
	}
	return out[0].Fields
}

// TestExecEnvironmentIsMinimal: the program sees PATH, RAINSTORM_* and
// the variables it is given, never the caller's environment.
func TestExecEnvironmentIsMinimal(t *testing.T) {
	t.Setenv("TEMPEST_CANARY_SECRET", "canary-value-1234")
	got := strings.Join(answerOne(t, `read -r l; printf 'forward\t%s\n' "$(env | tr '\n' ' ')"`,
		ExecOptions{Env: []string{"LANG=C.UTF-8"}, Path: "/usr/bin:/bin"}), " ")
	if strings.Contains(got, "canary-value-1234") {
		t.Fatalf("the program saw the caller's environment: %s", got)
	}
	for _, want := range []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "RAINSTORM_STAGE=x"} {
		if !strings.Contains(got, want) {
			t.Fatalf("environment %q lacks %s", got, want)
		}
	}
}

// TestExecLongAnswerLineFailsAtTheCap: a line past MaxLine fails the
// stage at once with a clear message, without a restart and without
// reading the rest of the line.
func TestExecLongAnswerLineFailsAtTheCap(t *testing.T) {
	ex, err := execStage(t, writeScript(t, `read -r l; head -c 200000000 /dev/zero | tr '\0' a; echo`)).
		NewExec(ExecOptions{MaxLine: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	_, err = ex.Apply(recs([]string{"a"}), nil, nil)
	var ee *ExecError
	if !errors.As(err, &ee) || !errors.Is(err, ErrExecLineTooLong) || ee.Restarts != 0 {
		t.Fatalf("error %v, want ErrExecLineTooLong with no restart", err)
	}
	if !strings.Contains(err.Error(), "more than 1048576 bytes") {
		t.Fatalf("error %q does not name the cap", err)
	}
}

// TestExecAnswerAtTheCapIsFine: a line of exactly MaxLine bytes passes.
func TestExecAnswerAtTheCapIsFine(t *testing.T) {
	const capBytes = 200 << 10
	got := answerOne(t, `read -r l; printf 'forward\t'; head -c 204792 /dev/zero | tr '\0' b; echo`, ExecOptions{MaxLine: capBytes})
	if len(got) != 1 || len(got[0]) != capBytes-len("forward\t") {
		t.Fatalf("got %d fields (first %d bytes)", len(got), len(got[0]))
	}
}

// running reports the pids whose command line holds marker.
func running(marker string) []string {
	var pids []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err == nil && bytes.Contains(b, []byte(marker)) {
			pids = append(pids, filepath.Base(d))
		}
	}
	return pids
}

func leaveBehind(t *testing.T, detach string, opts ExecOptions) {
	t.Helper()
	marker := "tempest-leftover-" + randomSuffix()
	ready := filepath.Join(t.TempDir(), "ready")
	ex, err := execStage(t, writeScript(t, detach+` sh -c 'touch `+ready+`; sleep 600; echo `+marker+`' </dev/null >/dev/null 2>&1 &
while [ ! -e `+ready+` ]; do sleep 0.01; done
while read -r l; do echo forward; done`)).NewExec(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ex.Apply(recs([]string{"a"}), nil, nil); err != nil {
		t.Fatal(err)
	}
	if len(running(marker)) == 0 {
		t.Fatalf("the program's child %s is not running", marker)
	}
	if err := ex.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		if pids := running(marker); len(pids) > 0 {
			return fmt.Errorf("processes %v the program started still run after the stage closed", pids)
		}
		return nil
	})
}

// TestExecKillsItsProcessGroup: a child the program left running in its
// process group dies with it.
func TestExecKillsItsProcessGroup(t *testing.T) {
	leaveBehind(t, "", ExecOptions{})
}

// TestExecCgroupKillsWhatLeftTheGroup: a child in a session of its own
// (setsid) left the process group; the program's cgroup still kills it.
func TestExecCgroupKillsWhatLeftTheGroup(t *testing.T) {
	parent, err := DetectCgroupParent()
	if err != nil {
		t.Skipf("no writable cgroup v2 on this host (%v): the process group is all there is", err)
	}
	leaveBehind(t, "setsid", ExecOptions{CgroupParent: parent})
	left, _ := filepath.Glob(filepath.Join(parent, "tempest-exec-*"))
	for _, d := range left {
		if strings.Contains(d, "-"+strconv.Itoa(os.Getpid())+"-") {
			t.Fatalf("cgroup %s was not removed", d)
		}
	}
}

// TestExecLimits: the limits hold in the program, through the shim and
// set after start alike.
func TestExecLimits(t *testing.T) {
	lim := ExecLimits{CPUSeconds: 77, MemoryBytes: 3 << 30, Processes: 999}
	script := `read -r l; printf 'forward\t%s\n' "$(grep -E '^Max (cpu time|address space|processes)' /proc/self/limits | tr -s ' ' | tr '\n' ';')"`
	for name, opts := range map[string]ExecOptions{
		"shim":        {Limits: lim, Shim: []string{os.Args[0], ExecShimArg}},
		"after start": {Limits: lim},
	} {
		t.Run(name, func(t *testing.T) {
			got := strings.Join(answerOne(t, script, opts), " ")
			for _, want := range []string{"Max cpu time 77 77", "Max processes 999 999", "Max address space 3221225472 3221225472"} {
				if !strings.Contains(got, want) {
					t.Fatalf("limits %q lack %q", got, want)
				}
			}
		})
	}
}

// TestSweepCgroupsEndsADeadWorkersPrograms: programs a worker left behind
// when it was killed outright die when the next worker starts; a live
// worker's cgroups are left alone.
func TestSweepCgroupsEndsADeadWorkersPrograms(t *testing.T) {
	parent, err := DetectCgroupParent()
	if err != nil {
		t.Skipf("no writable cgroup v2 on this host: %v", err)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead, err := newCgroupNamed(parent, cgroupPrefix+strconv.Itoa(gone.Process.Pid)+"-test", ExecLimits{})
	if err != nil {
		t.Fatal(err)
	}
	mine, err := newCgroup(parent, ExecLimits{})
	if err != nil {
		t.Fatal(err)
	}
	defer mine.remove()
	marker := "tempest-orphan-" + randomSuffix()
	orphan := exec.Command("sh", "-c", "sleep 600; echo "+marker)
	orphan.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	dead.attach(orphan.SysProcAttr)
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	dead.detach()
	waited := make(chan error, 1)
	go func() { waited <- orphan.Wait() }() // owned: received below
	// Others may be there too (left by workers killed in other tests).
	if n, err := SweepCgroups(parent); err != nil || n < 1 {
		t.Fatalf("SweepCgroups = %d, %v; want the dead worker's cgroup among them", n, err)
	}
	if _, err := os.Stat(dead.dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the dead worker's cgroup is still there: %v", err)
	}
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("the dead worker's program still runs")
	}
	if _, err := os.Stat(mine.dir); err != nil {
		t.Fatalf("this worker's own cgroup was swept: %v", err)
	}
}

// TestExecRunsAsTheConfiguredUser: a worker running as root runs the
// program as exec.user.
func TestExecRunsAsTheConfiguredUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a program as another user")
	}
	script := writeScript(t, `read -r l; printf 'forward\t%s\n' "$(id -u):$(id -g)"`)
	for d := filepath.Dir(script); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil { // nobody must reach the script
			t.Fatal(err)
		}
	}
	ex, err := execStage(t, script).NewExec(ExecOptions{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	out, err := ex.Apply(recs([]string{"a"}), nil, nil)
	if err != nil || len(out) != 1 || out[0].Fields[0] != "65534:65534" {
		t.Fatalf("ran as %v (%v), want 65534:65534", out, err)
	}
}
