package main

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The nodes expose no pprof endpoint and their binaries are not ours to
// change here, so the profile is taken from outside with Linux perf:
// `perf record -e cpu-clock -g` on every node process during one more
// exactly-once run (Go keeps frame pointers, so stacks are whole), then
// each sample put down to the component it was working for. perf slows the
// traced processes, so that run's rate is reported apart.

func (b *bench) profileRun() error {
	if _, err := exec.LookPath("perf"); err != nil {
		fmt.Println("\n== profile: perf is not installed; CPU by process above is all there is")
		return nil
	}
	pids := b.nodePIDs()
	var list []string
	for _, pid := range pids {
		list = append(list, strconv.Itoa(pid))
	}
	data := filepath.Join(b.dir, "perf.data")
	cmd := exec.Command("perf", "record", "-q", "-e", "cpu-clock", "-F", "499", "-g", "-o", data, "-p", strings.Join(list, ","))
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond) // perf attaches
	r, _, runErr := b.pipeline(true, nil)
	_ = cmd.Process.Signal(os.Interrupt)
	waitErr := cmd.Wait()
	if runErr != nil {
		return runErr
	}
	if waitErr != nil && !strings.Contains(waitErr.Error(), "interrupt") {
		return fmt.Errorf("perf record: %w: %s", waitErr, tail(stderr.Bytes()))
	}
	fmt.Printf("\n== profile of one exactly-once run under perf (%.0f records/s while sampled)\n", r.rate())
	out, err := exec.Command("perf", "script", "-i", data, "-F", "comm,ip,sym").Output()
	if err != nil {
		return fmt.Errorf("perf script: %w", err)
	}
	summarise(readSamples(out))
	return nil
}

// component names what a sample was doing: the innermost frame of its
// stack (leaf first) that belongs to a known component, so time in
// malloc, memmove or a syscall counts for the code that asked for it (a
// UDP send under quic-go is QUIC; an fdatasync under bbolt is bbolt).
// Samples with no such frame are runtime work on its own: GC, the
// scheduler, or else by leaf.
func component(frames []string) string {
	for _, f := range frames {
		switch {
		case strings.Contains(f, "encoding/csv") || strings.Contains(f, "tempest/rainstorm.(*Reader)"):
			return "CSV reading"
		case strings.Contains(f, "fxamacker/cbor"):
			return "CBOR encode/decode"
		case strings.Contains(f, "go.etcd.io/bbolt"):
			return "bbolt (store, fsync)"
		case strings.HasPrefix(f, "crypto/") || strings.Contains(f, "golang.org/x/crypto"):
			return "crypto (QUIC packets, sealed envelopes)"
		case strings.Contains(f, "quic-go"):
			return "quic-go (incl. UDP syscalls)"
		case strings.HasPrefix(f, "tempest/rainstorm"):
			return "rainstorm machines and operators"
		case strings.HasPrefix(f, "tempest/transport") || strings.HasPrefix(f, "tempest/security") || strings.HasPrefix(f, "tempest/wire"):
			return "tempest transport, security, wire"
		case strings.HasPrefix(f, "tempest/"):
			return "other tempest code (" + strings.SplitN(strings.TrimPrefix(f, "tempest/"), ".", 2)[0] + ")"
		}
	}
	for _, f := range frames {
		switch {
		case strings.Contains(f, "gcBgMarkWorker") || strings.Contains(f, "runtime.gcDrain") || strings.Contains(f, "bgsweep") ||
			strings.Contains(f, "bgscavenge") || strings.Contains(f, "runtime.gcStart"):
			return "Go GC (background)"
		case strings.HasPrefix(f, "runtime.schedule") || strings.HasPrefix(f, "runtime.mcall") || strings.HasPrefix(f, "runtime.park_m") ||
			strings.HasPrefix(f, "runtime.findRunnable") || strings.HasPrefix(f, "runtime.sysmon"):
			return "Go scheduler, idle"
		}
	}
	if len(frames) > 0 {
		return "other: " + frames[0]
	}
	return "other"
}

// sample is one perf sample: its process name and its stack, leaf first.
type sample struct {
	comm   string
	frames []string
}

// readSamples parses `perf script -F comm,ip,sym`: a line naming the
// process, then one indented "address symbol" line per frame, then a
// blank line.
func readSamples(out []byte) []sample {
	var all []sample
	var cur *sample
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			cur = nil
		case line[0] != ' ' && line[0] != '\t':
			all = append(all, sample{comm: strings.Fields(line)[0]})
			cur = &all[len(all)-1]
		case cur != nil:
			f := strings.Fields(line)
			if len(f) >= 2 {
				cur.frames = append(cur.frames, f[1])
			}
		}
	}
	return all
}

func summarise(samples []sample) {
	byComm := map[string]map[string]int{}
	commTotal := map[string]int{}
	cborBy := map[string]map[string]int{} // comm → tempest function that asked for CBOR
	for _, s := range samples {
		comm := s.comm
		if !strings.HasPrefix(comm, "tempest-") {
			comm = "other"
		}
		if byComm[comm] == nil {
			byComm[comm] = map[string]int{}
			cborBy[comm] = map[string]int{}
		}
		c := component(s.frames)
		byComm[comm][c]++
		commTotal[comm]++
		if c == "CBOR encode/decode" {
			cborBy[comm][caller(s.frames)]++
		}
	}
	fmt.Printf("%d samples; each sample goes to the innermost known component on its stack\n", len(samples))
	for _, comm := range slices.Sorted(maps.Keys(byComm)) {
		fmt.Printf("%s: %.1f%% of all samples\n", comm, 100*float64(commTotal[comm])/float64(len(samples)))
		comps := byComm[comm]
		names := slices.Sorted(maps.Keys(comps))
		slices.SortStableFunc(names, func(a, b string) int { return comps[b] - comps[a] })
		rest := 0
		for _, n := range names {
			if pct := 100 * float64(comps[n]) / float64(commTotal[comm]); pct >= 1 {
				fmt.Printf("  %5.1f%%  %s\n", pct, n)
			} else {
				rest += comps[n]
			}
		}
		fmt.Printf("  %5.1f%%  (each under 1%%)\n", 100*float64(rest)/float64(commTotal[comm]))
		by := cborBy[comm]
		callers := slices.Sorted(maps.Keys(by))
		slices.SortStableFunc(callers, func(a, b string) int { return by[b] - by[a] })
		for _, f := range callers[:min(4, len(callers))] {
			fmt.Printf("          CBOR for %s: %.1f%%\n", f, 100*float64(by[f])/float64(commTotal[comm]))
		}
	}
}

// caller is the innermost tempest function outside the wire codec on a
// stack: what a CBOR sample was encoding or decoding for.
func caller(frames []string) string {
	for _, f := range frames {
		if strings.HasPrefix(f, "tempest/") && !strings.HasPrefix(f, "tempest/wire.") {
			return f
		}
	}
	return "(no tempest frame)"
}
