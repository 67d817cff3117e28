// Command engine runs Tempest's http workflow runner in-process (closed
// model, one GET step, Env.Cores = [0]) and prints one line of results plus
// its own CPU time from getrusage, for bench/loadgen/run.sh. With -rss-at it
// also samples VmRSS before the run and that long into it (with the runtime's
// stack and heap figures), to measure memory per idle VU against a slow
// target.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"tempest/wire"
	"tempest/workflow"
)

func rssKB() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return n
		}
	}
	return -1
}

// memSample is the process's memory while the VUs wait: VmRSS, and the Go
// runtime's own split of it into goroutine stacks and heap in use.
type memSample struct {
	rssKB, stackKB, heapKB, liveKB int64
	goroutines                     int
}

// sampleMem reads RSS and the runtime's figures first, as the VUs left
// them, then collects garbage and reads the live heap: what the VUs hold,
// without what their dials and handshakes left for the collector.
func sampleMem() memSample {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := memSample{rssKB: rssKB(), stackKB: int64(ms.StackInuse >> 10), heapKB: int64(ms.HeapInuse >> 10),
		goroutines: runtime.NumGoroutine()}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	m.liveKB = int64(ms.HeapAlloc >> 10)
	return m
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func main() {
	url := flag.String("url", "http://127.0.0.1:18080/", "target URL")
	vus := flag.Int("vus", 50, "virtual users (closed model)")
	dur := flag.Duration("d", 10*time.Second, "duration")
	rssAt := flag.Duration("rss-at", 0, "if set, sample VmRSS this long into the run")
	cpuProfile := flag.String("cpuprofile", "", "if set, write a CPU profile of the run to this file")
	insecure := flag.Bool("insecure", false, "accept any TLS certificate (a self-signed https target)")
	flag.Parse()

	p := workflow.HTTPParams{VUs: *vus, Duration: *dur, Steps: []workflow.HTTPStep{{Name: "get", Method: "GET", URL: *url}},
		InsecureSkipVerify: *insecure}
	params, err := wire.Marshal(&p)
	if err != nil {
		fmt.Fprintln(os.Stderr, "marshal:", err)
		os.Exit(1)
	}
	run, err := workflow.DefaultRegistry().New(wire.WorkflowSpec{Name: "loadgen", Type: "http", Cores: 1, Params: params})
	if err != nil {
		fmt.Fprintln(os.Stderr, "new:", err)
		os.Exit(1)
	}
	rss0 := rssKB()
	// The sampler is waited for below, after the run.
	var during memSample
	var wg sync.WaitGroup
	if *rssAt > 0 {
		wg.Go(func() { time.Sleep(*rssAt); during = sampleMem() })
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "cpuprofile:", err)
			os.Exit(1)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "cpuprofile:", err)
			os.Exit(1)
		}
	}
	cpu0 := cpuSeconds()
	start := time.Now()
	res, err := run.Run(context.Background(), workflow.Env{Cores: []int{0}})
	wall := time.Since(start).Seconds()
	cpu := cpuSeconds() - cpu0
	pprof.StopCPUProfile()
	if err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		os.Exit(1)
	}
	var p50, p99 time.Duration
	if len(res.Steps) > 0 && res.Steps[0].Latency != nil && res.Steps[0].Latency.Count() > 0 {
		p50 = res.Steps[0].Latency.Percentile(50)
		p99 = res.Steps[0].Latency.Percentile(99)
	}
	fmt.Printf("completed=%d failed=%d wall_s=%.3f p50_ms=%.3f p99_ms=%.3f cpu_s=%.3f\n",
		res.Completed, res.Failed, wall, float64(p50.Microseconds())/1000, float64(p99.Microseconds())/1000, cpu)
	wg.Wait()
	if *rssAt > 0 {
		per := func(kb int64) float64 { return float64(kb) / float64(*vus) }
		fmt.Printf("rss_before_kb=%d rss_during_kb=%d vus=%d kb_per_vu=%.2f stack_kb_per_vu=%.2f heap_kb_per_vu=%.2f live_heap_kb_per_vu=%.2f goroutines=%d\n",
			rss0, during.rssKB, *vus, per(during.rssKB-rss0), per(during.stackKB), per(during.heapKB), per(during.liveKB), during.goroutines)
	}
}
