package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"tempest/rainstorm"
	"tempest/wire"
)

// TestInstallProgramsChecksThePolicy: an uploaded program runs only if
// the SHA-256 of the bytes received is listed, a named one only if it
// resolves to a listed path (and the stage is pointed at that path).
func TestInstallProgramsChecksThePolicy(t *testing.T) {
	dir := t.TempDir()
	awk := filepath.Join(dir, "awk")
	if err := os.WriteFile(awk, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	upload := []byte("#!/bin/sh\nwhile read -r l; do echo forward; done\n")
	sum := sha256.Sum256(upload)
	params := func() *rainstorm.TaskParams {
		return &rainstorm.TaskParams{Spec: rainstorm.Spec{Stages: []rainstorm.Stage{
			{Name: "named", Op: rainstorm.OpExec, Command: []string{"awk", "-f", "x"}},
			{Name: "uploaded", Op: rainstorm.OpExec, Command: []string{"./op.sh"}},
		}}, Stage: 1, ProgramData: map[string][]byte{"./op.sh": upload}}
	}
	policy := rainstorm.DefaultExecPolicy()
	if _, err := installPrograms(params(), &policy); !errors.Is(err, rainstorm.ErrNotPermitted) {
		t.Fatalf("exec off: %v", err)
	}
	policy.Enabled, policy.Path, policy.Programs = true, dir, []string{awk}
	if _, err := installPrograms(params(), &policy); !errors.Is(err, rainstorm.ErrNotPermitted) {
		t.Fatalf("upload not listed: %v", err)
	}
	policy.ProgramSums = []string{hex.EncodeToString(sum[:])}
	p := params()
	cleanup, err := installPrograms(p, &policy)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	if got := p.Spec.Stages[0].Command; got[0] != awk || got[1] != "-f" {
		t.Fatalf("named program's command %v, want it at %s", got, awk)
	}
	if b, err := os.ReadFile(p.Spec.Stages[1].Command[0]); err != nil || string(b) != string(upload) {
		t.Fatalf("uploaded program installed at %q: %v", p.Spec.Stages[1].Command[0], err)
	}
	// A task of another stage runs neither program: nothing is checked
	// for it, and the upload it was not sent is no refusal.
	other := params()
	other.Stage, other.ProgramData = 3, nil
	other.Spec.Stages = append(other.Spec.Stages, rainstorm.Stage{Name: "count", Op: rainstorm.OpCount, Key: "1"})
	policy.Programs = nil
	if _, err := installPrograms(other, &policy); err != nil {
		t.Fatalf("a count task checked the exec stages' programs: %v", err)
	}
}

// TestWorkerRefusesWorkItsConfigDoesNotAllow: a dispatched exec task or
// path: source this worker's config does not allow is refused before
// anything runs, whatever the manager believed.
func TestWorkerRefusesWorkItsConfigDoesNotAllow(t *testing.T) {
	cfg := DefaultConfig()
	w := &Worker{cfg: cfg, registry: rainstorm.Registry(rainstorm.ParseOptions{})}
	for name, spec := range map[string]rainstorm.Spec{
		"exec": {Source: rainstorm.Source{Generate: &rainstorm.Generate{Records: 1, Keys: 1}},
			Stages: []rainstorm.Stage{{Name: "x", Op: rainstorm.OpExec, Command: []string{"/bin/sh"}}}},
		"path": {Source: rainstorm.Source{Path: "/etc/passwd", Format: rainstorm.FormatLines},
			Stages: []rainstorm.Stage{{Name: "x", Op: rainstorm.OpFilter, Matches: "."}}},
	} {
		stage := 1
		if name == "path" {
			stage = 0
		}
		b, err := wire.Marshal(&rainstorm.TaskParams{Spec: spec, Stage: stage})
		if err != nil {
			t.Fatal(err)
		}
		_, err = w.newRunner(&wire.WorkflowDispatch{JobID: "j"}, wire.WorkflowSpec{Name: "p", Type: rainstorm.TypeName, Cores: 1, Params: b})
		if !errors.Is(err, rainstorm.ErrNotPermitted) {
			t.Errorf("%s: newRunner = %v, want a refusal", name, err)
		}
	}
}

// An exec program starts in a directory of its own: empty, 0700, owned by
// the user it runs as, and removed with whatever it left once the task
// ends; never the worker's working directory (often its data directory).
func TestExecWorkDirIsPrivate(t *testing.T) {
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: 65534, Gid: 65534} // nobody: a dedicated exec.user
	}
	dir, cleanup, err := execWorkDir(cred)
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if dir == wd {
		t.Fatal("the program's working directory is the worker's")
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Fatalf("working directory mode %04o, want 0700", perm)
	}
	want := uint32(os.Geteuid())
	if cred != nil {
		want = cred.Uid
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != want {
		t.Fatalf("working directory owned by uid %d, want %d", uid, want)
	}
	if err := os.WriteFile(filepath.Join(dir, "left-behind"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	cleanup()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("working directory still there after the task: %v", err)
	}
}
