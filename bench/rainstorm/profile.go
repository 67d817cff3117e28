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
// exactly-once run (Go keeps frame pointers, so stacks are whole), then the
// self time of each leaf function summed by component. perf slows the
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
	rep := exec.Command("perf", "report", "-i", data, "--stdio", "--no-children", "-g", "none",
		"--sort", "comm,dso,sym", "--percent-limit", "0", "-q")
	out, err := rep.Output()
	if err != nil {
		return fmt.Errorf("perf report: %w", err)
	}
	summarise(out)
	return nil
}

// component names where a leaf function's time goes.
func component(dso, sym string) string {
	switch {
	case strings.Contains(sym, "encoding/csv"):
		return "CSV parsing (encoding/csv)"
	case strings.Contains(sym, "fxamacker/cbor"):
		return "CBOR encode/decode"
	case strings.Contains(sym, "crypto/") || strings.Contains(sym, "golang.org/x/crypto") ||
		strings.Contains(sym, "aes") || strings.Contains(sym, "gcm") || strings.Contains(sym, "sha256"):
		return "crypto (TLS/QUIC packets, sealed envelopes)"
	case strings.Contains(sym, "quic-go"):
		return "quic-go"
	case strings.Contains(sym, "bbolt"):
		return "bbolt"
	case strings.Contains(sym, "tempest/rainstorm"):
		return "rainstorm machines and operators"
	case strings.Contains(sym, "tempest/"):
		return "other tempest code"
	case strings.HasPrefix(sym, "runtime.gc") || strings.HasPrefix(sym, "runtime.scan") || strings.HasPrefix(sym, "runtime.mallocgc") ||
		strings.Contains(sym, "mspan") || strings.Contains(sym, "mheap") || strings.Contains(sym, "mcache") ||
		strings.HasPrefix(sym, "runtime.greyobject") || strings.HasPrefix(sym, "runtime.findObject") ||
		strings.HasPrefix(sym, "runtime.memclr") || strings.HasPrefix(sym, "runtime.markBits") || strings.HasPrefix(sym, "runtime.(*gcWork)") ||
		strings.HasPrefix(sym, "runtime.sweep") || strings.HasPrefix(sym, "runtime.heapBits") || strings.HasPrefix(sym, "runtime.wbBuf"):
		return "Go GC and allocation"
	case strings.HasPrefix(sym, "runtime.memmove"):
		return "memmove"
	case strings.HasPrefix(sym, "runtime."):
		return "Go runtime (scheduler, maps, channels, ...)"
	case dso == "[kernel.kallsyms]" || strings.HasPrefix(dso, "[kernel"):
		return "kernel (syscalls: UDP, files, futex)"
	case strings.HasPrefix(sym, "regexp") || strings.HasPrefix(sym, "strings.") || strings.HasPrefix(sym, "bytes."):
		return "strings, bytes, regexp"
	case strings.HasPrefix(sym, "sync") || strings.HasPrefix(sym, "internal/sync"):
		return "sync"
	}
	return "other"
}

// summarise reads `perf report --sort comm,dso,sym -g none -q` lines:
//
//	12.34%  tempest-worker  tempest-worker     [.] encoding/csv.(*Reader).readRecord
func summarise(out []byte) {
	byComm := map[string]map[string]float64{}
	commTotal := map[string]float64{}
	type leaf struct {
		comm, sym string
		pct       float64
	}
	var leaves []leaf
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || !strings.HasSuffix(f[0], "%") {
			continue
		}
		pct, err := strconv.ParseFloat(strings.TrimSuffix(f[0], "%"), 64)
		if err != nil {
			continue
		}
		comm, dso := f[1], f[2]
		sym := strings.Join(f[4:], " ")
		if !strings.HasPrefix(comm, "tempest-") {
			comm = "other threads"
		}
		c := component(dso, sym)
		if byComm[comm] == nil {
			byComm[comm] = map[string]float64{}
		}
		byComm[comm][c] += pct
		commTotal[comm] += pct
		leaves = append(leaves, leaf{comm, sym, pct})
	}
	for _, comm := range slices.Sorted(maps.Keys(byComm)) {
		fmt.Printf("%s: %.1f%% of all samples\n", comm, commTotal[comm])
		comps := byComm[comm]
		names := slices.Sorted(maps.Keys(comps))
		slices.SortStableFunc(names, func(a, b string) int { return int(1000 * (comps[b] - comps[a])) })
		for _, n := range names {
			if comps[n] >= 0.5 {
				fmt.Printf("  %5.1f%%  %s\n", 100*comps[n]/commTotal[comm], n)
			}
		}
	}
	slices.SortFunc(leaves, func(a, b leaf) int { return int(1000 * (b.pct - a.pct)) })
	fmt.Println("top functions (self time, % of all samples):")
	for _, l := range leaves[:min(15, len(leaves))] {
		fmt.Printf("  %5.1f%%  %-15s %s\n", l.pct, l.comm, l.sym)
	}
}
