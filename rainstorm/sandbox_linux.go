package rainstorm

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// apply sets l on process pid (0: this process), soft and hard alike, so
// the program cannot raise them again.
func (l ExecLimits) apply(pid int) error {
	var errs []error
	for _, r := range []struct {
		name     string
		resource int
		v        uint64
	}{
		{"cpu", unix.RLIMIT_CPU, l.CPUSeconds},
		{"address space", unix.RLIMIT_AS, l.MemoryBytes},
		{"processes", unix.RLIMIT_NPROC, l.Processes},
	} {
		if r.v == 0 {
			continue
		}
		lim := unix.Rlimit{Cur: r.v, Max: r.v}
		if err := unix.Prlimit(pid, r.resource, &lim, nil); err != nil {
			errs = append(errs, fmt.Errorf("rlimit %s: %w", r.name, err))
		}
	}
	return errors.Join(errs...)
}

// DetectCgroupParent returns the cgroup v2 directory this process may make
// program cgroups under: its own cgroup in the unified hierarchy (mounted
// at /sys/fs/cgroup on a v2 host, often /sys/fs/cgroup/unified on a hybrid
// one), if it can create a cgroup there. "" and why when there is none.
func DetectCgroupParent() (string, error) {
	mount, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	own, err := ownCgroup()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(mount, own)
	probe := filepath.Join(dir, "tempest-probe-"+randomSuffix())
	if err := os.Mkdir(probe, 0o755); err != nil {
		return "", fmt.Errorf("cgroup v2 at %s is not writable: %w", dir, err)
	}
	_ = os.Remove(probe)
	if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
		return "", fmt.Errorf("cgroup v2 at %s: %w", dir, err)
	}
	return dir, nil
}

func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent maj:min root mount opts [optional...] - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		if fs := strings.Fields(post); len(fs) > 0 && fs[0] == "cgroup2" {
			if f := strings.Fields(pre); len(f) >= 5 {
				return f[4], nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New("no cgroup v2 hierarchy is mounted")
}

func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return rest, nil
		}
	}
	return "", errors.New("this process is in no cgroup v2")
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// cgroup is one program start's cgroup v2. Its methods take a nil
// receiver as "no cgroup".
type cgroup struct {
	dir string
	fd  *os.File // open while the program starts (clone3 CLONE_INTO_CGROUP)
}

// cgroupPrefix starts the name of every program cgroup; the worker's pid
// follows, so a later worker can tell its dead predecessors' apart.
const cgroupPrefix = "tempest-exec-"

func newCgroup(parent string, l ExecLimits) (*cgroup, error) {
	return newCgroupNamed(parent, cgroupPrefix+strconv.Itoa(os.Getpid())+"-"+randomSuffix(), l)
}

func newCgroupNamed(parent, name string, l ExecLimits) (*cgroup, error) {
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	g := &cgroup{dir: dir}
	// Only where the parent delegates the controller do these files
	// exist; the rlimits hold either way.
	if l.MemoryBytes > 0 {
		g.set("memory.max", strconv.FormatUint(l.MemoryBytes, 10))
	}
	if l.Processes > 0 {
		g.set("pids.max", strconv.FormatUint(l.Processes, 10))
	}
	fd, err := os.Open(dir)
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("open cgroup: %w", err)
	}
	g.fd = fd
	return g, nil
}

func (g *cgroup) set(file, v string) {
	p := filepath.Join(g.dir, file)
	if _, err := os.Stat(p); err == nil {
		_ = os.WriteFile(p, []byte(v), 0)
	}
}

// attach makes the program start inside the cgroup: it is never outside,
// not even between its fork and its exec.
func (g *cgroup) attach(a *syscall.SysProcAttr) {
	if g == nil {
		return
	}
	a.UseCgroupFD = true
	a.CgroupFD = int(g.fd.Fd())
}

// detach closes what attach needed once the program has started.
func (g *cgroup) detach() {
	if g == nil || g.fd == nil {
		return
	}
	_ = g.fd.Close()
	g.fd = nil
}

// kill kills every process in the cgroup: at once by cgroup.kill (Linux
// 5.14), else one by one until none is left, since a process can fork
// while it is being killed.
func (g *cgroup) kill() {
	if g == nil {
		return
	}
	if err := os.WriteFile(filepath.Join(g.dir, "cgroup.kill"), []byte("1"), 0); err == nil {
		return
	}
	for range 100 {
		pids := g.procs()
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func (g *cgroup) procs() []int {
	b, err := os.ReadFile(filepath.Join(g.dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// remove waits (bounded) for the killed processes to be reaped by the
// kernel and removes the cgroup; one that will not empty stays, named in
// its directory for an operator.
func (g *cgroup) remove() {
	if g == nil {
		return
	}
	g.detach()
	deadline := time.Now().Add(execReapWait)
	for {
		err := os.Remove(g.dir)
		if err == nil || errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			return
		}
		g.kill()
		time.Sleep(10 * time.Millisecond)
	}
}

// SweepCgroups kills what is left in the program cgroups of workers that
// are gone (killed with SIGKILL, their programs outlived them) and removes
// those cgroups; a live worker's, this one's included, are left alone. It
// returns how many it removed.
func SweepCgroups(parent string) (int, error) {
	dirs, err := filepath.Glob(filepath.Join(parent, cgroupPrefix+"*"))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, dir := range dirs {
		pidPart, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(dir), cgroupPrefix), "-")
		pid, err := strconv.Atoi(pidPart)
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue // not ours to judge, ours, or its worker still runs
		}
		g := &cgroup{dir: dir}
		g.kill()
		g.remove()
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			n++
		}
	}
	return n, nil
}
