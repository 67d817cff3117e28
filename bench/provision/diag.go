package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The diagnostic pass. The managers expose no pprof endpoint (their API
// serves /v1, /healthz and /metrics only) and the binaries cannot be
// changed from here, so the leader is profiled from outside with Linux
// perf: `perf record -e cpu-clock -g` samples its on-CPU stacks (Go keeps
// frame pointers, so the call chains are whole), and `perf trace -s` counts
// and times the syscalls that matter here (fdatasync, pwrite64, and the UDP
// sends and receives of QUIC) on every manager. Both slow the traced
// processes, so this pass runs after the measured reps and its rate is
// reported apart.

// tracedSyscalls are the syscalls perf trace follows.
var tracedSyscalls = "fdatasync,fsync,pwrite64,sendmsg,sendmmsg,recvmsg,recvmmsg"

type perfProc struct {
	name        string
	out         string
	cmd         *exec.Cmd
	interrupted bool
}

// interrupt sends SIGINT once: perf then writes its output and exits (a
// second SIGINT could cut the writing short).
func (p *perfProc) interrupt() {
	if !p.interrupted {
		p.interrupted = true
		_ = p.cmd.Process.Signal(os.Interrupt)
	}
}

func perfAvailable() bool {
	_, err := exec.LookPath("perf")
	return err == nil
}

func startPerf(name, out string, args ...string) (*perfProc, error) {
	cmd := exec.Command("perf", args...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf %s: %w", name, err)
	}
	return &perfProc{name: name, out: out, cmd: cmd}, nil
}

// stop interrupts perf and waits for it to finish writing.
func (p *perfProc) stop() error {
	p.interrupt()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		// perf exits non-zero after SIGINT on some versions; the output file
		// is what counts.
		if _, serr := os.Stat(p.out); serr != nil {
			return fmt.Errorf("perf %s: %v (%v)", p.name, serr, err)
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		return fmt.Errorf("perf %s did not stop", p.name)
	}
}

// syscallStat is one syscall's line of a perf trace summary, summed over a
// process's threads.
type syscallStat struct {
	Calls int           `json:"calls"`
	Total time.Duration `json:"total_ns"`
	Max   time.Duration `json:"max_ns"`
}

func (s syscallStat) avg() time.Duration {
	if s.Calls == 0 {
		return 0
	}
	return s.Total / time.Duration(s.Calls)
}

// parseTraceSummary reads `perf trace -s` output: a table per thread.
func parseTraceSummary(path string) (map[string]syscallStat, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := make(map[string]syscallStat)
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		// syscall calls errors total min avg max stddev%
		if len(f) != 8 || !strings.HasSuffix(f[7], "%") {
			continue
		}
		calls, err1 := strconv.Atoi(f[1])
		total, err2 := strconv.ParseFloat(f[3], 64)
		mx, err3 := strconv.ParseFloat(f[6], 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		s := out[f[0]]
		s.Calls += calls
		s.Total += time.Duration(total * float64(time.Millisecond))
		s.Max = max(s.Max, time.Duration(mx*float64(time.Millisecond)))
		out[f[0]] = s
	}
	return out, nil
}

// component is a share of the leader's CPU profile. Each sample is charged
// to the first component whose pattern matches any frame of its stack, so
// the shares add up to 100 % (allocation inside CBOR is CBOR, a sendmsg made
// by quic-go is QUIC, a placement running inside the HTTP handler is the
// manager's).
type component struct {
	Name    string  `json:"name"`
	Samples int     `json:"samples"`
	Share   float64 `json:"share_pct"`
	re      *regexp.Regexp
}

func components() []*component {
	mk := func(name, re string) *component { return &component{Name: name, re: regexp.MustCompile(re)} }
	return []*component{
		mk("envelope crypto (tempest/security: per-stream AEAD seal/open)", `^tempest/security\.`),
		mk("CBOR encode/decode (wire and store records)", `fxamacker/cbor`),
		mk("bbolt (commit, page writes, fdatasync in the kernel)", `^go\.etcd\.io/bbolt`),
		mk("logging (log/slog text handler, node.log writes)", `^log/slog`),
		mk("QUIC (quic-go, its packet protection and UDP syscalls)", `quic-go`),
		mk("SWIM (memberlist gossip and probes)", `hashicorp/memberlist|^tempest/swim\.`),
		mk("job file parsing (YAML)", `^go\.yaml\.in/yaml|^tempest/jobfile\.`),
		mk("garbage collector (mark workers, assists, sweep)", `^runtime\.(gcBgMarkWorker|gcAssistAlloc|bgsweep|bgscavenge)`),
		mk("Tempest transport other (demux, breakers, replay guard, ids)", `^tempest/(transport|wire)\.`),
		mk("manager logic (placement, job table, status, watch, metrics)", `^tempest/(manager|store|leadership|workflow)\.`),
		mk("HTTP API server and JSON", `^net/http\.|^encoding/json\.|^tempest/api\.`),
	}
}

// profileSummary is the leader's CPU profile, condensed.
type profileSummary struct {
	Samples    int          `json:"samples"`
	Components []*component `json:"components"`
	Other      float64      `json:"runtime_other_pct"`
	// Top are the functions with the most samples on CPU (self), for the
	// curious.
	Top []string `json:"top_self"`
}

// summarizePerf reads perf.data through `perf script` and charges each
// sample to a component.
func summarizePerf(data string) (profileSummary, error) {
	var ps profileSummary
	cmd := exec.Command("perf", "script", "-i", data, "-F", "comm,tid,ip,sym")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return ps, err
	}
	if err := cmd.Start(); err != nil {
		return ps, err
	}
	comps := components()
	self := make(map[string]int)
	var stack []string
	flush := func() {
		if len(stack) == 0 {
			return
		}
		ps.Samples++
		self[stack[0]]++
		for _, c := range comps {
			if slices.ContainsFunc(stack, c.re.MatchString) {
				c.Samples++
				stack = stack[:0]
				return
			}
		}
		stack = stack[:0]
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	inSample := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush()
			inSample = false
		case line[0] != ' ' && line[0] != '\t':
			flush()
			inSample = true
		case inSample:
			// "\t    4a5b6c runtime.futex+0x23" : address, symbol+offset
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			sym := f[1]
			if i := strings.LastIndex(sym, "+0x"); i > 0 {
				sym = sym[:i]
			}
			stack = append(stack, sym)
		}
	}
	flush()
	if err := cmd.Wait(); err != nil {
		return ps, fmt.Errorf("perf script: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	if ps.Samples == 0 {
		return ps, fmt.Errorf("perf script: no samples in %s", data)
	}
	acc := 0.0
	for _, c := range comps {
		c.Share = 100 * float64(c.Samples) / float64(ps.Samples)
		acc += c.Share
	}
	ps.Components = comps
	ps.Other = 100 - acc
	type kv struct {
		k string
		v int
	}
	var top []kv
	for k, v := range self {
		top = append(top, kv{k, v})
	}
	slices.SortFunc(top, func(a, b kv) int { return b.v - a.v })
	for _, t := range top[:min(15, len(top))] {
		ps.Top = append(ps.Top, fmt.Sprintf("%5.1f%% %s", 100*float64(t.v)/float64(ps.Samples), t.k))
	}
	return ps, nil
}

// diagResult is the diagnostic pass.
type diagResult struct {
	Rep tpRep `json:"rep"`
	// Profiles are CPU profiles of the leader and of one follower.
	Profiles map[string]*profileSummary        `json:"profiles,omitempty"`
	Syscalls map[string]map[string]syscallStat `json:"syscalls,omitempty"` // node → syscall → stat
	Notes    []string                          `json:"notes,omitempty"`
	// SpanStarted and Span are the workflows started while perf trace was
	// attached, and for how long, to put the syscall counts per provision.
	SpanStarted float64       `json:"span_started"`
	Span        time.Duration `json:"span_ns"`
	spanStart   snapshot
}

// diagHooks attaches perf trace to every manager and, with record, perf
// record to the leader, for the window. Files are named after tag.
func diagHooks(c *cluster, outDir, tag string, record bool, res *diagResult) *windowHooks {
	var procs []*perfProc
	return &windowHooks{
		start: func() error {
			if record {
				targets := []node{c.leader}
				if len(c.followers) > 0 {
					targets = append(targets, c.followers[0])
				}
				for _, n := range targets {
					rec := filepath.Join(outDir, tag+"-"+n.Name+"-perf.data")
					p, err := startPerf("record", rec, "record", "-e", "cpu-clock", "-F", "999", "-g",
						"-p", strconv.Itoa(n.PID), "-o", rec)
					if err != nil {
						return err
					}
					p.name = n.Name
					procs = append(procs, p)
				}
			}
			for _, m := range c.managers() {
				out := filepath.Join(outDir, tag+"-trace-"+m.Name+".txt")
				p, err := startPerf("trace "+m.Name, out, "trace", "-s", "-e", tracedSyscalls,
					"-p", strconv.Itoa(m.PID), "-o", out)
				if err != nil {
					return err
				}
				p.name = m.Name
				procs = append(procs, p)
			}
			// perf attaches in well under 100 ms here; the span it traces
			// is counted from then. The window opens a little later.
			time.Sleep(100 * time.Millisecond)
			s, err := c.snapshot(context.Background())
			if err != nil {
				return err
			}
			res.spanStart = s
			time.Sleep(400 * time.Millisecond)
			return nil
		},
		end: func() error {
			res.Syscalls = make(map[string]map[string]syscallStat)
			for _, p := range procs {
				p.interrupt()
			}
			s, err := c.snapshot(context.Background())
			if err != nil {
				return err
			}
			res.Span = s.at.Sub(res.spanStart.at)
			res.SpanStarted = s.leader.started() - res.spanStart.leader.started()
			for _, p := range procs {
				if err := p.stop(); err != nil {
					res.Notes = append(res.Notes, err.Error())
					continue
				}
				if strings.HasSuffix(p.out, ".data") {
					prof, err := summarizePerf(p.out)
					if err != nil {
						res.Notes = append(res.Notes, err.Error())
						continue
					}
					if res.Profiles == nil {
						res.Profiles = make(map[string]*profileSummary)
					}
					res.Profiles[p.name] = &prof
				}
				if strings.HasSuffix(p.out, ".txt") {
					st, err := parseTraceSummary(p.out)
					if err != nil {
						res.Notes = append(res.Notes, err.Error())
						continue
					}
					res.Syscalls[p.name] = st
				}
			}
			return nil
		},
	}
}
