package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// nodeEvent is an Event tagged with the index of the process that sent it.
// Ev "exit" is synthesised by the driver when a process ends.
type nodeEvent struct {
	from int
	ev   Event
}

// proc is one child process: a node or a hog.
type proc struct {
	idx  int
	name string
	cmd  *exec.Cmd
	log  string // file receiving its stderr, "" if discarded
	done chan struct{}
	// waitErr is set before done is closed.
	waitErr error
}

// procSpec says how to start a child.
type procSpec struct {
	idx     int
	name    string
	argv    []string // argv[0] is looked up in PATH unless it has a slash
	env     []string // added to the driver's environment
	logPath string   // stderr destination; "" discards it
	// setsid starts the child in a session of its own, which on Linux is
	// also a scheduling group of its own (autogroup).
	setsid bool
}

// startProc starts spec. If events is non-nil, the child's stdout is read as
// JSON events and delivered there until ctx ends (later lines are drained
// and dropped, so the child never blocks on a full pipe); a final "exit"
// event follows when the process has been reaped. Readers are tracked by wg.
func startProc(ctx context.Context, spec procSpec, events chan<- nodeEvent, wg *sync.WaitGroup, log *slog.Logger) (*proc, error) {
	cmd := exec.Command(spec.argv[0], spec.argv[1:]...)
	cmd.Env = append(os.Environ(), spec.env...)
	// Own process group: a Ctrl-C at the terminal reaches the driver only,
	// which then stops children in order. Pdeathsig covers a driver that is
	// itself killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: !spec.setsid, Setsid: spec.setsid, Pdeathsig: syscall.SIGKILL}
	var logFile *os.File
	if spec.logPath != "" {
		f, err := os.OpenFile(spec.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("%s log: %w", spec.name, err)
		}
		logFile = f
		cmd.Stderr = f
	}
	var stdout *bufio.Scanner
	if events != nil {
		r, err := cmd.StdoutPipe()
		if err != nil {
			closeQuietly(logFile)
			return nil, fmt.Errorf("%s stdout: %w", spec.name, err)
		}
		stdout = bufio.NewScanner(r)
		stdout.Buffer(make([]byte, 64<<10), 1<<20)
	}
	if err := cmd.Start(); err != nil {
		closeQuietly(logFile)
		return nil, fmt.Errorf("start %s: %w", spec.name, err)
	}
	// The child has its own copy of the log descriptor now.
	closeQuietly(logFile)
	p := &proc{idx: spec.idx, name: spec.name, cmd: cmd, log: spec.logPath, done: make(chan struct{})}
	wg.Go(func() {
		if stdout != nil {
			for stdout.Scan() {
				var ev Event
				if err := json.Unmarshal(stdout.Bytes(), &ev); err != nil {
					log.Warn("unparsable line from node", "node", p.name, "line", stdout.Text())
					continue
				}
				select {
				case events <- nodeEvent{from: p.idx, ev: ev}:
				case <-ctx.Done():
				}
			}
			if err := stdout.Err(); err != nil {
				log.Warn("reading node output", "node", p.name, "err", err)
			}
		}
		// Reads are finished, so Wait may close the pipe.
		p.waitErr = cmd.Wait()
		close(p.done)
		if events != nil {
			select {
			case events <- nodeEvent{from: p.idx, ev: Event{Ev: "exit", T: time.Now().UnixNano()}}:
			case <-ctx.Done():
			}
		}
	})
	return p, nil
}

func closeQuietly(f *os.File) {
	if f != nil {
		_ = f.Close()
	}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig unless the process has already been reaped (its pid may
// then belong to someone else).
func (p *proc) signal(sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s to %s (pid %d): %w", sig, p.name, p.pid(), err)
	}
	return nil
}

// stopProcs asks every process to stop with SIGTERM, waits up to grace,
// then SIGKILLs the rest and waits for them to be reaped. It returns only
// when every process has been reaped.
func stopProcs(procs []*proc, grace time.Duration, log *slog.Logger) {
	for _, p := range procs {
		if err := p.signal(syscall.SIGTERM); err != nil {
			log.Warn("stop", "err", err)
		}
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
wait:
	for _, p := range procs {
		select {
		case <-p.done:
		case <-deadline.C:
			break wait
		}
	}
	for _, p := range procs {
		if p.exited() {
			continue
		}
		log.Warn("process ignored SIGTERM, killing it", "proc", p.name, "pid", p.pid(), "grace", grace)
		if err := p.signal(syscall.SIGKILL); err != nil {
			log.Warn("stop", "err", err)
		}
	}
	for _, p := range procs {
		<-p.done
	}
}

// logTail returns the last n lines of a child's stderr log.
func logTail(path string, n int) string {
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
