package rainstorm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"tempest/wire"
	"tempest/workflow"
)

// Job confinement (docs/security.md): a job is untrusted input. What a
// pipeline may make a worker do beyond the built-in operators — run an
// exec program, read a file by `path:` — is off unless the worker's config
// allows it. Workers advertise what they allow (wire.Confinement, in their
// registration), managers refuse at submit a pipeline no worker of the
// datacenter may run and place each task only where it is allowed, and the
// worker checks again before it runs anything.

// ExecPolicy is a worker's `exec:` config.
type ExecPolicy struct {
	// Enabled lets exec stages run here, limited to the programs below.
	Enabled bool `yaml:"enabled"`
	// Programs are absolute paths of programs a job may name: by that
	// path, or by a bare name that resolves to it in Path.
	Programs []string `yaml:"programs"`
	// ProgramSums are hex SHA-256 sums of programs a job may upload
	// (`command: ./op.sh` beside the job file); `sha256sum op.sh` gives it.
	ProgramSums []string `yaml:"program_sums"`
	// Env names variables of the worker's environment passed on to the
	// programs (the secrets are never among them: the node removed them
	// from its environment when it read them).
	Env []string `yaml:"env"`
	// Path is the programs' PATH, where a bare name is looked up.
	Path string `yaml:"path"`
	// MaxLineBytes caps one answer line (1 MiB by default).
	MaxLineBytes int `yaml:"max_line_bytes"`
	// Limits per program start; 0 is no limit.
	Limits ExecLimits `yaml:",inline"`
	// User runs the programs as this user ("name" or "uid:gid") when the
	// worker runs as root; empty keeps the worker's own.
	User string `yaml:"user"`
	// Cgroup: "auto" puts each program in a cgroup v2 of its own where the
	// worker can make one (so a process that leaves the program's process
	// group still dies with it), "off" keeps to process groups.
	Cgroup string `yaml:"cgroup"`
}

// Exec limit defaults: generous for a stream operator, fatal to a runaway.
const (
	DefaultExecCPUSeconds  = 3600
	DefaultExecMemoryBytes = 4 << 30
	DefaultExecProcesses   = 4096
)

// DefaultExecPolicy is exec off, with the defaults a policy that turns it
// on starts from.
func DefaultExecPolicy() ExecPolicy {
	return ExecPolicy{
		Path:         DefaultExecPath,
		MaxLineBytes: DefaultExecMaxLine,
		Limits:       ExecLimits{CPUSeconds: DefaultExecCPUSeconds, MemoryBytes: DefaultExecMemoryBytes, Processes: DefaultExecProcesses},
		Cgroup:       "auto",
	}
}

// secretVariable reports whether name is one the nodes read secrets from.
func secretVariable(name string) bool {
	return strings.HasPrefix(name, "AUTH_SECRET") || strings.HasPrefix(name, "TEMPEST_")
}

// Check lists the policy's problems, each with its key.
func (p *ExecPolicy) Check() []string {
	var out []string
	for _, prog := range p.Programs {
		if !filepath.IsAbs(prog) || filepath.Clean(prog) != prog {
			out = append(out, fmt.Sprintf("exec.programs: %q must be an absolute, clean path", prog))
		}
	}
	for _, s := range p.ProgramSums {
		if b, err := hex.DecodeString(s); err != nil || len(b) != sha256.Size {
			out = append(out, fmt.Sprintf("exec.program_sums: %q is not a hex SHA-256", s))
		}
	}
	for _, name := range p.Env {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			out = append(out, fmt.Sprintf("exec.env: %q is not a variable name", name))
		} else if secretVariable(name) || name == "PATH" || strings.HasPrefix(name, "RAINSTORM_") {
			out = append(out, fmt.Sprintf("exec.env: %s may not be passed on (secrets, PATH and RAINSTORM_* are not the config's to give)", name))
		}
	}
	if p.MaxLineBytes < 0 {
		out = append(out, "exec.max_line_bytes: must not be negative")
	}
	if p.Cgroup != "" && p.Cgroup != "auto" && p.Cgroup != "off" {
		out = append(out, fmt.Sprintf("exec.cgroup: want auto or off, got %q", p.Cgroup))
	}
	if p.User != "" {
		if _, err := p.Credential(); err != nil {
			out = append(out, "exec.user: "+err.Error())
		}
	}
	if p.Enabled && len(p.Programs) == 0 && len(p.ProgramSums) == 0 {
		out = append(out, "exec.enabled: true needs exec.programs or exec.program_sums (the programs jobs may run)")
	}
	return out
}

// Credential is the user the programs run as; nil for the worker's own.
func (p *ExecPolicy) Credential() (*syscall.Credential, error) {
	if p.User == "" {
		return nil, nil
	}
	if u, g, ok := strings.Cut(p.User, ":"); ok {
		uid, err1 := strconv.ParseUint(u, 10, 32)
		gid, err2 := strconv.ParseUint(g, 10, 32)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%q: want a user name or uid:gid", p.User)
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	u, err := user.Lookup(p.User)
	if err != nil {
		return nil, err
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("user %s has no numeric uid and gid", p.User)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// Confinement is what a worker with this policy and these source
// directories advertises.
func (p *ExecPolicy) Confinement(sourceDirs []string) *wire.Confinement {
	c := &wire.Confinement{SourceDirs: slices.Clone(sourceDirs)}
	if p.Enabled {
		c.Exec = true
		c.ExecPrograms = slices.Clone(p.Programs)
		for _, s := range p.ProgramSums {
			c.ExecSums = append(c.ExecSums, strings.ToLower(s))
		}
	}
	return c
}

// Need is one thing a pipeline asks of the worker that runs a task beyond
// cores: an exec program, or a file read by `path:`.
type Need struct {
	Field   string // the job file's key that asks, for refusals
	Stage   int    // the task's stage (0: the source)
	Program string // an exec program as the job names it
	Sum     string // its SHA-256 when uploaded with the job
	Path    string // a path: source's file
}

func (n Need) String() string {
	switch {
	case n.Path != "":
		return "source path " + n.Path
	case n.Sum != "":
		return fmt.Sprintf("exec program %s (uploaded, sha256 %s)", n.Program, n.Sum)
	}
	return "exec program " + n.Program
}

// PipelineNeeds lists what a pipeline's tasks need; programs maps the
// uploaded programs' names to their sums (TaskParams.Programs).
func PipelineNeeds(s *Spec, programs map[string]string) []Need {
	var out []Need
	if s.Source.Path != "" {
		out = append(out, Need{Field: "source.path", Path: s.Source.Path})
	}
	for i, st := range s.Stages {
		if st.Op == OpExec && len(st.Command) > 0 {
			out = append(out, Need{Field: workflow.IndexPath("stages", i+len(s.Source.Chain)) + ".command", Stage: i + 1,
				Program: st.Command[0], Sum: programs[st.Command[0]]})
		}
	}
	return out
}

// Needs is what this task needs of its worker.
func (p *TaskParams) Needs() []Need {
	var out []Need
	for _, n := range PipelineNeeds(&p.Spec, p.Programs) {
		if n.Stage == p.Stage {
			out = append(out, n)
		}
	}
	return out
}

// ErrNotPermitted is a need the worker's confinement does not allow.
var ErrNotPermitted = errors.New("not allowed")

// Permits says whether a worker advertising c may meet n: nil, or why not
// (wrapping ErrNotPermitted). A bare program name is taken to mean a
// listed program of that name; the worker resolves it and checks again.
func Permits(c *wire.Confinement, n Need) error {
	if n.Path != "" {
		p := filepath.Clean(n.Path)
		if !filepath.IsAbs(p) {
			return fmt.Errorf("%w: a path: source must be an absolute path", ErrNotPermitted)
		}
		if c != nil {
			for _, d := range c.SourceDirs {
				if within(p, filepath.Clean(d)) {
					return nil
				}
			}
		}
		return fmt.Errorf("%w: %s is under no directory the worker's config lists in source_dirs", ErrNotPermitted, n.Path)
	}
	if c == nil || !c.Exec {
		return fmt.Errorf("%w: exec is off (a worker's config turns it on: exec.enabled with exec.programs or exec.program_sums)", ErrNotPermitted)
	}
	switch {
	case n.Sum != "":
		if slices.Contains(c.ExecSums, strings.ToLower(n.Sum)) {
			return nil
		}
		return fmt.Errorf("%w: uploaded program %s (sha256 %s) is not in exec.program_sums", ErrNotPermitted, n.Program, n.Sum)
	case LocalProgram(n.Program):
		return fmt.Errorf("%w: program %s is relative to the job file and was not uploaded with it", ErrNotPermitted, n.Program)
	case filepath.IsAbs(n.Program):
		if slices.Contains(c.ExecPrograms, filepath.Clean(n.Program)) {
			return nil
		}
	default:
		for _, p := range c.ExecPrograms {
			if filepath.Base(p) == n.Program {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: program %s is not in exec.programs", ErrNotPermitted, n.Program)
}

// within reports whether path p is dir or under it (both clean).
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

// Resolve is the worker's own check of an exec program against its
// policy: it returns the absolute path to run. An uploaded program (sum
// set, its bytes' SHA-256 as the worker computed it) must be listed by
// sum; any other must resolve, in the policy's PATH, to a listed path.
func (p *ExecPolicy) Resolve(program, sum string) (string, error) {
	n := Need{Program: program, Sum: sum}
	if err := Permits(p.Confinement(nil), n); err != nil {
		return "", err
	}
	if sum != "" {
		return program, nil
	}
	path := p.Path
	if path == "" {
		path = DefaultExecPath
	}
	prog, err := LookProgram(program, path)
	if err != nil {
		return "", err
	}
	prog = filepath.Clean(prog)
	if !slices.Contains(p.Programs, prog) {
		return "", fmt.Errorf("%w: program %s resolves to %s, which is not in exec.programs", ErrNotPermitted, program, prog)
	}
	return prog, nil
}

// OpenSource opens a `path:` source's file for a worker whose config
// lists dirs: the path, cleaned and with its symlinks resolved, must lie
// under one of them (resolved too), so neither `..` nor a link leads out;
// the file opened is checked again by its descriptor, so a link swapped in
// between cannot either.
func OpenSource(path string, dirs []string) (*os.File, error) {
	n := Need{Path: path}
	if err := Permits(&wire.Confinement{SourceDirs: dirs}, n); err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(filepath.Clean(path))
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", path, err)
	}
	if !underAny(real, dirs) {
		return nil, fmt.Errorf("%w: %s leads to %s, under no directory in source_dirs", ErrNotPermitted, path, real)
	}
	f, err := os.Open(real)
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", path, err)
	}
	if opened, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd()))); err == nil && !underAny(opened, dirs) {
		f.Close()
		return nil, fmt.Errorf("%w: %s opened %s, under no directory in source_dirs", ErrNotPermitted, path, opened)
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("source %s: not a regular file", path)
	}
	return f, nil
}

func underAny(real string, dirs []string) bool {
	for _, d := range dirs {
		rd, err := filepath.EvalSymlinks(filepath.Clean(d))
		if err == nil && within(real, rd) {
			return true
		}
	}
	return false
}

// IdentifyFile reads f whole for its size and SHA-256 and puts it back at
// its start. Unlike a prefix or an mtime it tells apart any two different
// files (copies on two workers have different mtimes and must still
// match); the price is one more read per source start, about 4.5 s per GB
// at the 224 MB/s measured on a busy 2-core machine without SHA
// extensions (docs/rainstorm.md, "Confinement"). A cancelled or superseded
// task stops reading at once (ctx), not after the whole file.
func IdentifyFile(ctx context.Context, f *os.File) (*wire.RainstormFileID, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	h := sha256.New()
	n, err := io.Copy(h, ctxReader{ctx, f})
	if err != nil {
		return nil, fmt.Errorf("hash source: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return &wire.RainstormFileID{Size: n, SHA256: h.Sum(nil)}, nil
}

// ctxReader ends a long read when ctx does, between two reads.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// SameFile compares a recorded identity with the file found now: nil, or
// an error for the task saying what changed.
func SameFile(path string, recorded, found *wire.RainstormFileID) error {
	if recorded == nil || found == nil {
		return nil
	}
	sameRange := (recorded.Range == nil) == (found.Range == nil) && (recorded.Range == nil || *recorded.Range == *found.Range)
	if recorded.Size == found.Size && string(recorded.SHA256) == string(found.SHA256) && sameRange {
		return nil
	}
	what := "file"
	if found.Range != nil {
		what = fmt.Sprintf("file's range (bytes %d-%d then, %d-%d now)", rangeOf(recorded).From, rangeOf(recorded).To, found.Range.From, found.Range.To)
	}
	return fmt.Errorf("source %s is not the file the pipeline started on (then %d bytes, sha256 %x; now %d bytes, sha256 %x of the %s): "+
		"resuming would produce other records under the same ids, so the source fails", path,
		recorded.Size, recorded.SHA256, found.Size, found.SHA256, what)
}

func rangeOf(id *wire.RainstormFileID) wire.RainstormFileRange {
	if id.Range == nil {
		return wire.RainstormFileRange{}
	}
	return *id.Range
}

// CheckRunAs refuses exec on a worker running as root (euid 0) without
// exec.user: its programs would be root, and nothing else confines what
// root reads. `exec.user: root` says so on purpose and is taken.
func (p *ExecPolicy) CheckRunAs(euid int) error {
	if p.Enabled && euid == 0 && p.User == "" {
		return errors.New("exec.enabled on a worker running as root needs exec.user: its programs would run as root and could read every file of the host (set exec.user to an unprivileged user, or to root to accept that)")
	}
	return nil
}
