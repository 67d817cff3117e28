package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"tempest/swim"
)

// A node that stops answering for longer than its profile's confirmed
// suspicion window is declared dead while alive. The watch below records,
// from inside the node process, what such a silence looked like there, so
// the driver can tell its causes apart:
//
//   - "stall": a goroutine that wakes every watchTick did not run for
//     longer than stallThreshold. The whole Go process was not running (or
//     its scheduler was), and the event says how much of the window the
//     process's threads spent runnable but waiting for a CPU (schedstat),
//     how long Go's garbage collector stopped the world in it, and the
//     worst delay of a runnable goroutine in Go's own run queue;
//   - "quiet": the node answered no ping (direct or relayed) for longer
//     than quietThreshold while the process was running: memberlist's
//     packet handling was held up, or no ping reached the node;
//   - "udp": the kernel dropped UDP datagrams for the node because its
//     socket buffer was full (RcvbufErrors of the node's network namespace).
const (
	watchTick      = 50 * time.Millisecond
	sampleEvery    = 5 // ticks between schedstat samples
	stallThreshold = 300 * time.Millisecond
	quietThreshold = 1200 * time.Millisecond
)

// ackClock is the bench node's swim.StateEmbedder: it records when the
// node last answered a ping and when it last got an ack to its own probe.
// The one-byte payload makes memberlist hand acks back to PeerState.
type ackClock struct {
	answered atomic.Int64 // unix ns
	acked    atomic.Int64
}

var _ swim.StateEmbedder = (*ackClock)(nil)

var ackPayload = []byte{1}

func (c *ackClock) LocalState() []byte {
	c.answered.Store(time.Now().UnixNano())
	return ackPayload
}

func (c *ackClock) PeerState(swim.NodeInfo, []byte, time.Duration) {
	c.acked.Store(time.Now().UnixNano())
}

// schedSample is the sum over the process's threads of /proc's schedstat:
// time on a CPU and time runnable but waiting for one.
type schedSample struct {
	at       time.Time
	run      time.Duration
	wait     time.Duration
	schedLat *metrics.Float64Histogram
	udpRcv   int64
	udpIn    int64
}

func readSchedstat() (run, wait time.Duration) {
	dirs, _ := filepath.Glob("/proc/self/task/*/schedstat")
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread has exited
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			continue
		}
		r, _ := strconv.ParseInt(f[0], 10, 64)
		w, _ := strconv.ParseInt(f[1], 10, 64)
		run += time.Duration(r)
		wait += time.Duration(w)
	}
	return run, wait
}

// readUDP returns the UDP RcvbufErrors and InErrors counters of the
// network namespace this process runs in.
func readUDP() (rcvbuf, inErr int64) {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return 0, 0
	}
	var names, values []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Udp: "); ok {
			if names == nil {
				names = strings.Fields(rest)
			} else {
				values = strings.Fields(rest)
			}
		}
	}
	for i := range min(len(names), len(values)) {
		v, _ := strconv.ParseInt(values[i], 10, 64)
		switch names[i] {
		case "RcvbufErrors":
			rcvbuf = v
		case "InErrors":
			inErr = v
		}
	}
	return rcvbuf, inErr
}

const schedLatMetric = "/sched/latencies:seconds"

func sample() schedSample {
	s := schedSample{at: time.Now()}
	s.run, s.wait = readSchedstat()
	m := []metrics.Sample{{Name: schedLatMetric}}
	metrics.Read(m)
	if m[0].Value.Kind() == metrics.KindFloat64Histogram {
		s.schedLat = m[0].Value.Float64Histogram()
	}
	s.udpRcv, s.udpIn = readUDP()
	return s
}

// maxNewLatency is the lower bound of the highest bucket of Go's goroutine
// scheduling latency histogram that gained samples between a and b.
func maxNewLatency(a, b *metrics.Float64Histogram) time.Duration {
	if a == nil || b == nil || len(a.Counts) != len(b.Counts) {
		return 0
	}
	for i := len(b.Counts) - 1; i >= 0; i-- {
		if b.Counts[i] > a.Counts[i] {
			return time.Duration(max(0, b.Buckets[i]) * float64(time.Second))
		}
	}
	return 0
}

// gcPauseIn sums the stop-the-world pauses that ended in (from, to].
func gcPauseIn(from, to time.Time) (total time.Duration, n int) {
	var st debug.GCStats
	st.PauseQuantiles = nil
	debug.ReadGCStats(&st)
	for i, end := range st.PauseEnd {
		if end.After(from) && !end.After(to) && i < len(st.Pause) {
			total += st.Pause[i]
			n++
		}
	}
	return total, n
}

func msOf(d time.Duration) int64 { return d.Milliseconds() }

// watch runs until ctx ends, emitting the events described above.
func watch(ctx context.Context, em *emitter, clock *ackClock) {
	tick := time.NewTicker(watchTick)
	defer tick.Stop()
	prev := sample()
	last := prev.at
	quietSince := time.Time{}
	var quietMax time.Duration
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		gap := now.Sub(last)
		last = now

		if gap >= stallThreshold {
			cur := sample()
			gc, gcs := gcPauseIn(prev.at, cur.at)
			em.emit(Event{Ev: "stall", Watch: &WatchInfo{
				GapMS:      msOf(gap),
				WindowMS:   msOf(cur.at.Sub(prev.at)),
				RunMS:      msOf(cur.run - prev.run),
				WaitMS:     msOf(cur.wait - prev.wait),
				GCMS:       msOf(gc),
				GCs:        gcs,
				GoSchedMS:  msOf(maxNewLatency(prev.schedLat, cur.schedLat)),
				AnsweredMS: msSince(now, clock.answered.Load()),
			}, T: now.UnixNano()})
			prev = cur
		} else if n%sampleEvery == 0 {
			cur := sample()
			if cur.udpRcv > prev.udpRcv || cur.udpIn > prev.udpIn {
				em.emit(Event{Ev: "udp", Watch: &WatchInfo{RcvbufErrs: cur.udpRcv - prev.udpRcv, InErrs: cur.udpIn - prev.udpIn}})
			}
			prev = cur
		}

		// A quiet spell is reported when it ends, with its length.
		if a := clock.answered.Load(); a != 0 {
			since := now.Sub(time.Unix(0, a))
			switch {
			case since >= quietThreshold:
				if quietSince.IsZero() {
					quietSince = time.Unix(0, a)
				}
				quietMax = max(quietMax, since)
			case !quietSince.IsZero():
				em.emit(Event{Ev: "quiet", Watch: &WatchInfo{GapMS: msOf(quietMax), StartT: quietSince.UnixNano()}, T: now.UnixNano()})
				quietSince, quietMax = time.Time{}, 0
			}
		}
	}
}

func msSince(now time.Time, unixNS int64) int64 {
	if unixNS == 0 {
		return -1
	}
	return msOf(now.Sub(time.Unix(0, unixNS)))
}

// WatchInfo is the detail of a stall, quiet or udp event.
type WatchInfo struct {
	GapMS      int64 `json:"gap_ms,omitempty"`
	StartT     int64 `json:"start_t,omitempty"`
	WindowMS   int64 `json:"window_ms,omitempty"`
	RunMS      int64 `json:"run_ms,omitempty"`
	WaitMS     int64 `json:"wait_ms,omitempty"`
	GCMS       int64 `json:"gc_ms,omitempty"`
	GCs        int   `json:"gcs,omitempty"`
	GoSchedMS  int64 `json:"gosched_ms,omitempty"`
	AnsweredMS int64 `json:"answered_ms,omitempty"`
	RcvbufErrs int64 `json:"rcvbuf_errs,omitempty"`
	InErrs     int64 `json:"in_errs,omitempty"`
}

func (w *WatchInfo) String() string {
	if w == nil {
		return "-"
	}
	return fmt.Sprintf("%+v", *w)
}

// watchTotals is what the nodes' watch saw, for a trial or summed over a
// run: process stalls of stallThreshold or more, the longest with its
// detail, quiet spells (no ping answered) and UDP receive-buffer drops.
type watchTotals struct {
	Stalls      int        `json:"stalls"`
	MaxStall    *WatchInfo `json:"max_stall,omitempty"`
	Quiets      int        `json:"quiets"`
	MaxQuietMS  int64      `json:"max_quiet_ms"`
	UDPRcvbuf   int64      `json:"udp_rcvbuf_errors"`
	UDPInErrors int64      `json:"udp_in_errors"`
}

// add sums o into w: counts add up, the longest stall and quiet spell win.
func (w *watchTotals) add(o watchTotals) {
	w.Stalls += o.Stalls
	if o.MaxStall != nil && (w.MaxStall == nil || o.MaxStall.GapMS > w.MaxStall.GapMS) {
		w.MaxStall = o.MaxStall
	}
	w.Quiets += o.Quiets
	w.MaxQuietMS = max(w.MaxQuietMS, o.MaxQuietMS)
	w.UDPRcvbuf += o.UDPRcvbuf
	w.UDPInErrors += o.UDPInErrors
}
