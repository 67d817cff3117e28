package rainstorm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Exec defaults.
const (
	// DefaultExecCrashes is how many times in a row a program may die
	// without answering a single record before the stage fails.
	DefaultExecCrashes = 3
	// DefaultExecTimeout bounds the wait for one answer; a program that
	// stays silent longer is killed and counted as a crash.
	DefaultExecTimeout = 30 * time.Second
	// DefaultExecMaxLine caps one answer line. A longer one is a protocol
	// error that fails the task: the reader never holds more than this
	// (plus its 64 KiB buffer) of a line, however long the program makes it.
	DefaultExecMaxLine = 1 << 20
	// DefaultExecPath is the program's PATH, and where a bare program name
	// is looked up, when the worker's config names none.
	DefaultExecPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	stderrTail      = 2048
	execReadBuffer  = 64 << 10
	execWriteBuffer = 64 << 10
	// execReapWait bounds the wait for a killed program's processes to be
	// gone before its cgroup is removed.
	execReapWait = 5 * time.Second
)

// ExecOptions configures an exec operator. The zero value runs the program
// in its own process group with the minimal environment and the default
// line cap, without resource limits; the worker sets the rest from its
// config (docs/security.md, "Job confinement").
type ExecOptions struct {
	Dir string // working directory ("" = the caller's)
	// Env holds "NAME=value" entries for the program. Beside them it gets
	// only PATH and RAINSTORM_*: never the caller's own environment, so a
	// job cannot read what the node was started with.
	Env []string
	// Path is the program's PATH and where a bare program name is looked
	// up; DefaultExecPath when empty.
	Path       string
	MaxCrashes int
	Timeout    time.Duration
	// MaxLine caps an answer line in bytes; DefaultExecMaxLine when 0.
	MaxLine int
	// Limits are applied to the program (rlimits, and the cgroup's
	// memory.max and pids.max where the host lets them be set).
	Limits ExecLimits
	// Shim, when set, is the argv prefix of a program that applies Limits
	// to itself and then executes the operator's program (ExecShimMain,
	// which the worker binary runs when given ExecShimArg), so the limits
	// hold from the program's first instruction. Without it the limits are
	// set on the running program right after it starts.
	Shim []string
	// Credential runs the program as another user (the worker must be
	// root to set it); nil keeps the caller's.
	Credential *syscall.Credential
	// CgroupParent is a cgroup v2 directory the caller may create
	// cgroups under (DetectCgroupParent); each program start gets its own,
	// killed as a whole when the program ends, so even a process that left
	// the program's process group (setsid) dies with it. Empty: the
	// process group alone.
	CgroupParent string
	// Columns are the input's column names, passed to the program in
	// RAINSTORM_FIELDS (tab-separated); nil when unknown.
	Columns []string
	// Logger hears what could not be confined as configured (a cgroup
	// that could not be made); nil discards it.
	Logger *slog.Logger
}

// ExecLimits are the resource limits of one exec program; a zero field is
// no limit.
type ExecLimits struct {
	// CPUSeconds is RLIMIT_CPU: the program is killed (SIGKILL after
	// SIGXCPU) once it has used this much CPU time.
	CPUSeconds uint64 `yaml:"cpu_seconds"`
	// MemoryBytes is RLIMIT_AS (address space), and memory.max of the
	// program's cgroup where the memory controller is available.
	MemoryBytes uint64 `yaml:"memory_bytes"`
	// Processes is RLIMIT_NPROC (counted per user id, so it bites as meant
	// only for a dedicated Credential; root ignores it), and pids.max of
	// the program's cgroup where the pids controller is available.
	Processes uint64 `yaml:"processes"`
}

// Exec is an exec stage's operator for one task: one long-lived program
// speaking the line protocol of docs/rainstorm.md — one line per record in
// (fields separated by tabs, with \\ \t \n \r escaped), one line per record
// out, in order: "forward" (pass the record on unchanged), "forward" TAB
// fields (pass these fields on) or "filter" (drop it). The program must
// flush each answer. A program that dies is restarted and the unanswered
// records are sent again; after MaxCrashes deaths in a row with no record
// answered, Apply fails with the program's stderr tail.
type Exec struct {
	cs   *CompiledStage
	opts ExecOptions

	cmd    *exec.Cmd
	stdin  *os.File
	stdout *os.File
	out    *bufio.Reader
	stderr *tailBuffer
	waited chan error
	group  *cgroup // nil without one

	restarts int
	slab     fieldSlab // answers' field tables
	// w buffers the program's input; one per program, since a fresh
	// 64 KiB buffer per batch was most of what a batch allocated.
	w *bufio.Writer
}

// NewExec returns the operator of an exec stage; the program starts on
// first use.
func (cs *CompiledStage) NewExec(opts ExecOptions) (*Exec, error) {
	if cs.Op != OpExec || len(cs.Command) == 0 {
		return nil, fmt.Errorf("stage %s: not an exec stage", cs.Name)
	}
	if opts.MaxCrashes <= 0 {
		opts.MaxCrashes = DefaultExecCrashes
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultExecTimeout
	}
	if opts.MaxLine <= 0 {
		opts.MaxLine = DefaultExecMaxLine
	}
	if opts.Path == "" {
		opts.Path = DefaultExecPath
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Exec{cs: cs, opts: opts}, nil
}

// Restarts is how many times the program has been restarted after dying.
func (e *Exec) Restarts() int { return e.restarts }

// ExecError is an exec stage that failed for good: the program could not
// start, or kept dying. Stderr is the tail of its standard error.
type ExecError struct {
	Stage    string
	Restarts int
	Err      error
	Stderr   string
}

func (e *ExecError) Error() string {
	msg := fmt.Sprintf("stage %s: exec: %v", e.Stage, e.Err)
	if e.Restarts > 0 {
		msg += fmt.Sprintf(" (after %d restarts)", e.Restarts)
	}
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += "; stderr: " + s
	}
	return msg
}

func (e *ExecError) Unwrap() error { return e.Err }

// LookProgram resolves an exec program's name as the program will be run:
// a name with a slash as it is, a bare name in path (a PATH value, the
// program's own, never the caller's).
func LookProgram(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue // a relative PATH entry would depend on the working directory
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in PATH %s", name, path)
}

// environ is the program's whole environment.
func (e *Exec) environ() []string {
	env := make([]string, 0, len(e.opts.Env)+3)
	env = append(env, "PATH="+e.opts.Path)
	env = append(env, e.opts.Env...)
	env = append(env, "RAINSTORM_STAGE="+e.cs.Name)
	if e.opts.Columns != nil {
		env = append(env, "RAINSTORM_FIELDS="+strings.Join(e.opts.Columns, "\t"))
	}
	return env
}

func (e *Exec) start() error {
	prog, err := LookProgram(e.cs.Command[0], e.opts.Path)
	if err != nil {
		return err
	}
	pr, pw, err := os.Pipe() // os pipes so reads can have deadlines
	if err != nil {
		return err
	}
	ir, iw, err := os.Pipe()
	if err != nil {
		pr.Close()
		pw.Close()
		return err
	}
	argv := append([]string{prog}, e.cs.Command[1:]...)
	if len(e.opts.Shim) > 0 {
		argv = append(append(slices.Clone(e.opts.Shim), e.opts.Limits.shimArgs()...), argv...)
	}
	e.stderr = &tailBuffer{}
	newCmd := func(g *cgroup) *exec.Cmd {
		cmd := &exec.Cmd{Path: argv[0], Args: argv, Dir: e.opts.Dir, Env: e.environ(), Stdin: ir, Stdout: pw, Stderr: e.stderr}
		// Its own process group, killed as one; a cgroup, where there is
		// one, also holds what leaves the group.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: e.opts.Credential}
		g.attach(cmd.SysProcAttr)
		return cmd
	}
	e.group = nil
	if e.opts.CgroupParent != "" {
		g, err := newCgroup(e.opts.CgroupParent, e.opts.Limits)
		if err != nil {
			e.opts.Logger.Warn("exec: no cgroup for the program; its process group and rlimits still apply", "stage", e.cs.Name, "err", err)
		} else {
			e.group = g
		}
	}
	cmd := newCmd(e.group)
	err = cmd.Start()
	if err != nil && e.group != nil {
		// Starting inside the cgroup can fail where starting cannot (a
		// kernel without clone3 into a cgroup, a parent that refuses it).
		e.opts.Logger.Warn("exec: could not start the program in its cgroup; its process group and rlimits still apply", "stage", e.cs.Name, "err", err)
		e.group.remove()
		e.group = nil
		cmd = newCmd(nil)
		err = cmd.Start()
	}
	e.group.detach()
	ir.Close()
	pw.Close()
	if err != nil {
		pr.Close()
		iw.Close()
		e.group.remove()
		e.group = nil
		return err
	}
	if len(e.opts.Shim) == 0 {
		if err := e.opts.Limits.apply(cmd.Process.Pid); err != nil {
			e.opts.Logger.Warn("exec: could not limit the program", "stage", e.cs.Name, "err", err)
		}
	}
	e.cmd, e.stdin, e.stdout = cmd, iw, pr
	e.out = bufio.NewReaderSize(pr, execReadBuffer)
	e.w = bufio.NewWriterSize(iw, execWriteBuffer)
	e.waited = make(chan error, 1)
	go func() { e.waited <- cmd.Wait() }() // owned: stop() always receives it
	return nil
}

// kill ends every process of the program: its cgroup when it has one
// (which also holds processes that left the group), and its process group.
func (e *Exec) kill() {
	e.group.kill()
	_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
}

// stop kills the program (if kill) or lets it end on closed input, and
// waits for it. Whatever it started is killed either way: nothing of a
// program outlives it. It returns the program's exit error.
func (e *Exec) stop(kill bool) error {
	if e.cmd == nil {
		return nil
	}
	e.stdin.Close()
	var err error
	if kill {
		e.kill()
		err = <-e.waited
	} else {
		select {
		case err = <-e.waited:
		case <-time.After(5 * time.Second):
			e.kill()
			err = <-e.waited
		}
	}
	// The program is gone; what it left behind in its group or cgroup
	// (a daemon, a `setsid sleep`) goes now.
	e.kill()
	e.group.remove()
	e.group = nil
	e.stdout.Close()
	e.cmd = nil
	return err
}

// Close ends the program: closed input, then a kill if it lingers.
func (e *Exec) Close() error {
	if err := e.stop(false); err != nil {
		return &ExecError{Stage: e.cs.Name, Err: fmt.Errorf("program exit: %w", err), Stderr: e.stderr.String()}
	}
	return nil
}

// Apply implements Transform.
func (e *Exec) Apply(in []Record, out []Record, bad func(error)) ([]Record, error) {
	crashes := 0
	for len(in) > 0 {
		if e.cmd == nil {
			if err := e.start(); err != nil {
				return out, &ExecError{Stage: e.cs.Name, Restarts: e.restarts, Err: fmt.Errorf("start %s: %w", e.cs.Command[0], err)}
			}
		}
		var n int
		var err error
		out, n, err = e.round(in, out)
		in = in[n:]
		if err == nil {
			return out, nil
		}
		exitErr := e.stop(true)
		tail := e.stderr.String()
		if n > 0 {
			crashes = 0
		}
		crashes++
		if crashes >= e.opts.MaxCrashes || errors.Is(err, ErrExecLineTooLong) {
			if exitErr != nil && !errors.Is(err, errProtocol) {
				err = fmt.Errorf("%w (%v)", err, exitErr)
			}
			return out, &ExecError{Stage: e.cs.Name, Restarts: e.restarts, Err: err, Stderr: tail}
		}
		e.restarts++
	}
	return out, nil
}

var errProtocol = errors.New("protocol error")

// ErrExecLineTooLong is an answer line over the cap: a protocol error that
// fails the task at once (a restart would only read the same line again).
var ErrExecLineTooLong = fmt.Errorf("%w: answer line too long", errProtocol)

// round sends in to the program and reads its answers, returning how many
// records were answered; an error means the program must be restarted.
func (e *Exec) round(in []Record, out []Record) ([]Record, int, error) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owned: joined below, ended by a kill closing the pipe
		defer wg.Done()
		w := e.w
		for i := range in {
			// Encoded straight into the writer's free space; Write
			// then copies nothing unless the line outgrows it.
			if _, err := w.Write(appendLine(w.AvailableBuffer(), in[i].Fields)); err != nil {
				return
			}
		}
		_ = w.Flush()
	}()
	n := 0
	var err error
	for n < len(in) {
		if n%256 == 0 {
			_ = e.stdout.SetReadDeadline(time.Now().Add(e.opts.Timeout))
		}
		var line []byte
		line, err = e.readLine()
		if err != nil {
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				err = fmt.Errorf("no answer within %s", e.opts.Timeout)
			case errors.Is(err, io.EOF):
				err = errors.New("program exited")
			}
			break
		}
		line = trimEOL(line)
		rec := &in[n]
		switch {
		case string(line) == "filter":
		case string(line) == "forward":
			out = append(out, *rec)
		case strings.HasPrefix(string(line), "forward\t"):
			fields := line[len("forward\t"):]
			out = append(out, Record{ID: rec.ID, Fields: appendFields(e.slab.take(lineFields(fields)), fields)})
		default:
			err = fmt.Errorf("%w: answered %q to record %d; want forward or filter", errProtocol, truncate(string(line), 60), rec.ID+1)
		}
		if err != nil {
			break
		}
		n++
	}
	if err != nil {
		e.kill() // unblocks the writer
	}
	wg.Wait()
	return out, n, err
}

// readLine reads one answer line, holding at most MaxLine bytes of it: a
// longer line is ErrExecLineTooLong as soon as it passes the cap, never
// read to its end.
func (e *Exec) readLine() ([]byte, error) {
	line, err := e.out.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return line, err
	}
	long := append([]byte(nil), line...)
	for errors.Is(err, bufio.ErrBufferFull) {
		if len(long) > e.opts.MaxLine {
			return nil, fmt.Errorf("%w: more than %d bytes (exec.max_line_bytes); a record's answer must fit", ErrExecLineTooLong, e.opts.MaxLine)
		}
		line, err = e.out.ReadSlice('\n')
		long = append(long, line...)
	}
	if err == nil && len(long) > e.opts.MaxLine+1 {
		return nil, fmt.Errorf("%w: %d bytes, more than %d (exec.max_line_bytes); a record's answer must fit", ErrExecLineTooLong, len(long)-1, e.opts.MaxLine)
	}
	return long, err
}

func trimEOL(b []byte) []byte {
	b = b[:len(b)-1]
	if len(b) > 0 && b[len(b)-1] == '\r' {
		b = b[:len(b)-1]
	}
	return b
}

// lineSpecial is what a field's bytes must escape on a protocol line.
const lineSpecial = "\\\t\n\r"

// appendLine encodes fields as one protocol line. A field is copied in
// runs between the bytes it escapes, so a field with none (nearly every
// one) is one copy.
func appendLine(b []byte, fields []string) []byte {
	for i, f := range fields {
		if i > 0 {
			b = append(b, '\t')
		}
		for {
			j := strings.IndexAny(f, lineSpecial)
			if j < 0 {
				b = append(b, f...)
				break
			}
			b = append(b, f[:j]...)
			switch f[j] {
			case '\\':
				b = append(b, '\\', '\\')
			case '\t':
				b = append(b, '\\', 't')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			}
			f = f[j+1:]
		}
	}
	return append(b, '\n')
}

// splitLine decodes a protocol line's fields. An unknown escape is kept as
// written, so a program that changed the case of an escape does not lose
// the record. The fields are cut from one string per line, so a line
// costs two allocations however many fields it has (a builder per field
// cost one per field, twenty a record for a whole input record).
func splitLine(line []byte) []string {
	return appendFields(make([]string, 0, lineFields(line)), line)
}

// lineFields is how many fields a protocol line holds: one more than its
// tabs (an escaped tab is a backslash and a t, never a tab byte).
func lineFields(line []byte) int { return 1 + bytes.Count(line, []byte{'\t'}) }

// appendFields appends line's fields, decoded as splitLine does, to
// fields, which must have room for lineFields(line) of them.
func appendFields(fields []string, line []byte) []string {
	if bytes.IndexByte(line, '\\') < 0 {
		s := string(line)
		for {
			i := strings.IndexByte(s, '\t')
			if i < 0 {
				return append(fields, s)
			}
			fields = append(fields, s[:i])
			s = s[i+1:]
		}
	}
	// Unescape into one buffer, noting where each field ends (an escaped
	// tab is in a field, not between two), then cut the fields from it.
	buf := make([]byte, 0, len(line))
	ends := make([]int, 0, cap(fields))
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\t':
			ends = append(ends, len(buf))
		case c == '\\' && i+1 < len(line):
			i++
			switch line[i] {
			case '\\':
				buf = append(buf, '\\')
			case 't':
				buf = append(buf, '\t')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			default:
				buf = append(buf, '\\', line[i])
			}
		default:
			buf = append(buf, c)
		}
	}
	s := string(buf)
	from := 0
	for _, end := range ends {
		fields = append(fields, s[from:end])
		from = end
	}
	return append(fields, s[from:])
}

// tailBuffer keeps the last bytes a program wrote to stderr.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > stderrTail {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-stderrTail:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
