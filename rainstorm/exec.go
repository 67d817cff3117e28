package rainstorm

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
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
	stderrTail         = 2048
)

// ExecOptions configures an exec operator.
type ExecOptions struct {
	Dir        string   // working directory ("" = the caller's)
	Env        []string // added to the process environment
	MaxCrashes int
	Timeout    time.Duration
	// Columns are the input's column names, passed to the program in
	// RAINSTORM_FIELDS (tab-separated); nil when unknown.
	Columns []string
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

	restarts int
	wbuf     []byte
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

func (e *Exec) start() error {
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
	cmd := exec.Command(e.cs.Command[0], e.cs.Command[1:]...)
	cmd.Dir = e.opts.Dir
	cmd.Env = append(os.Environ(), e.opts.Env...)
	cmd.Env = append(cmd.Env, "RAINSTORM_STAGE="+e.cs.Name)
	if e.opts.Columns != nil {
		cmd.Env = append(cmd.Env, "RAINSTORM_FIELDS="+strings.Join(e.opts.Columns, "\t"))
	}
	cmd.Stdin, cmd.Stdout = ir, pw
	e.stderr = &tailBuffer{}
	cmd.Stderr = e.stderr
	err = cmd.Start()
	ir.Close()
	pw.Close()
	if err != nil {
		pr.Close()
		iw.Close()
		return err
	}
	e.cmd, e.stdin, e.stdout = cmd, iw, pr
	e.out = bufio.NewReaderSize(pr, 64<<10)
	e.waited = make(chan error, 1)
	go func() { e.waited <- cmd.Wait() }() // owned: stop() always receives it
	return nil
}

// stop kills the program (if kill) or lets it end on closed input, and
// waits for it. It returns the program's exit error.
func (e *Exec) stop(kill bool) error {
	if e.cmd == nil {
		return nil
	}
	e.stdin.Close()
	var err error
	if kill {
		_ = e.cmd.Process.Kill()
		err = <-e.waited
	} else {
		select {
		case err = <-e.waited:
		case <-time.After(5 * time.Second):
			_ = e.cmd.Process.Kill()
			err = <-e.waited
		}
	}
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
		if crashes >= e.opts.MaxCrashes {
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

// round sends in to the program and reads its answers, returning how many
// records were answered; an error means the program must be restarted.
func (e *Exec) round(in []Record, out []Record) ([]Record, int, error) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owned: joined below, ended by a kill closing the pipe
		defer wg.Done()
		w := bufio.NewWriterSize(e.stdin, 64<<10)
		for i := range in {
			e.wbuf = appendLine(e.wbuf[:0], in[i].Fields)
			if _, err := w.Write(e.wbuf); err != nil {
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
		line, err = e.out.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = e.out.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
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
			out = append(out, Record{ID: rec.ID, Fields: splitLine(line[len("forward\t"):])})
		default:
			err = fmt.Errorf("%w: answered %q to record %d; want forward or filter", errProtocol, truncate(string(line), 60), rec.ID+1)
		}
		if err != nil {
			break
		}
		n++
	}
	if err != nil {
		_ = e.cmd.Process.Kill() // unblocks the writer
	}
	wg.Wait()
	return out, n, err
}

func trimEOL(b []byte) []byte {
	b = b[:len(b)-1]
	if len(b) > 0 && b[len(b)-1] == '\r' {
		b = b[:len(b)-1]
	}
	return b
}

// appendLine encodes fields as one protocol line.
func appendLine(b []byte, fields []string) []byte {
	for i, f := range fields {
		if i > 0 {
			b = append(b, '\t')
		}
		for j := 0; j < len(f); j++ {
			switch c := f[j]; c {
			case '\\':
				b = append(b, '\\', '\\')
			case '\t':
				b = append(b, '\\', 't')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			default:
				b = append(b, c)
			}
		}
	}
	return append(b, '\n')
}

// splitLine decodes a protocol line's fields. An unknown escape is kept as
// written, so a program that changed the case of an escape does not lose
// the record.
func splitLine(line []byte) []string {
	var fields []string
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\t':
			fields = append(fields, cur.String())
			cur.Reset()
		case c == '\\' && i+1 < len(line):
			i++
			switch line[i] {
			case '\\':
				cur.WriteByte('\\')
			case 't':
				cur.WriteByte('\t')
			case 'n':
				cur.WriteByte('\n')
			case 'r':
				cur.WriteByte('\r')
			default:
				cur.WriteByte('\\')
				cur.WriteByte(line[i])
			}
		default:
			cur.WriteByte(c)
		}
	}
	return append(fields, cur.String())
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
