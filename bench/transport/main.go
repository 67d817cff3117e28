// Command transport benchmarks Tempest's secure QUIC transport against a
// plain-TCP floor in the same process and the same run.
//
// For every (size, concurrency) cell it runs -reps repetitions of two
// measurements, alternating which goes first from one rep to the next so that
// machine noise falls on both alike:
//
//   - secure: two transport.QUIC nodes on 127.0.0.1 (DefaultConfig, shared
//     secret, TLS 1.3 + per-message HKDF/AES-256-GCM envelopes, replay guard,
//     rate limiter, circuit breaker). Node b echoes wire.TypePing; callers
//     on node a loop on Call(ctx, b.Addr(), &wire.Ping{Payload: size bytes}).
//   - tcp: the floor. A TCP server on loopback; each caller goroutine owns one
//     long-lived connection (one connection per caller: the simplest honest
//     floor, with no multiplexing, correlation ids or shared locks). Frames
//     are a 4-byte big-endian length followed by wire.Marshal(&wire.Ping{...});
//     the server wire.Unmarshals, wire.Marshals the same Ping back and writes
//     it. No crypto, no envelope.
//
// Each measurement builds fresh endpoints, warms up for -warmup with all
// callers running (the QUIC dial and handshake happen there), then counts the
// round trips completed inside a -duration window. rt/s is that count over
// the window; MB/s counts request plus response payload bytes (10^6 bytes).
// cpu/rt is process CPU time (user+sys, both ends, since they share the
// process) per round trip, and alloc/rt the bytes allocated per round trip:
// both are less sensitive to a noisy neighbour than rt/s.
//
// With -cpuprofile DIR, one extra pass per secure cell is run under the CPU
// profiler and written to DIR/secure-<size>B-c<concurrency>.pprof; profiled
// passes never feed the medians. -profile-tcp adds the same for the floors.
//
// -quic-floor adds a third, diagnostic kind: bare quic-go (same quic.Config,
// one stream per caller, the TCP floor's framing, no Tempest layers). It
// splits the gap into what quic-go itself costs (quic/tcp) and what Tempest
// adds on top (secure/quic).
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"tempest/security"
	"tempest/transport"
	"tempest/wire"
)

func main() {
	var (
		duration   = flag.Duration("duration", 3*time.Second, "measured window per cell and rep")
		warmup     = flag.Duration("warmup", 500*time.Millisecond, "unmeasured warm-up before each window (dial, handshake, caches)")
		reps       = flag.Int("reps", 3, "repetitions per cell; medians are reported")
		concList   = flag.String("concurrency", "1,16", "comma-separated numbers of concurrent callers")
		sizeList   = flag.String("sizes", "1024,65536", "comma-separated payload sizes in bytes")
		profileDir = flag.String("cpuprofile", "", "directory for one CPU profile per secure cell (an extra pass per cell, not counted in the medians)")
		profileTCP = flag.Bool("profile-tcp", false, "with -cpuprofile, also profile the floor cells (tcp, and quic with -quic-floor)")
		quicFloor  = flag.Bool("quic-floor", false, "also run a third, diagnostic floor: bare quic-go streams (TLS 1.3, no envelope, no Tempest layers)")
	)
	flag.Parse()
	concs, err := parseInts(*concList)
	if err != nil {
		fatalf("-concurrency: %v", err)
	}
	sizes, err := parseInts(*sizeList)
	if err != nil {
		fatalf("-sizes: %v", err)
	}
	if *reps < 1 || *duration <= 0 || *warmup < 0 {
		fatalf("need -reps >= 1, -duration > 0 and -warmup >= 0")
	}
	for _, s := range sizes {
		if s > wire.MaxMessageSize/2 {
			fatalf("size %d too large (max %d)", s, wire.MaxMessageSize/2)
		}
	}
	if *profileDir != "" {
		if err := os.MkdirAll(*profileDir, 0o755); err != nil {
			fatalf("cpuprofile dir: %v", err)
		}
	}
	secret, err := security.GenerateSecret()
	if err != nil {
		fatalf("secret: %v", err)
	}

	fmt.Printf("# tempest transport benchmark  %s\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("# %s %s/%s GOMAXPROCS=%d NumCPU=%d\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.NumCPU())
	fmt.Printf("# duration=%s warmup=%s reps=%d concurrency=%v sizes=%v\n", *duration, *warmup, *reps, concs, sizes)
	fmt.Printf("# secure = transport.QUIC (TLS1.3 + HKDF/AES-GCM envelope), 2 nodes, StreamsPerPeer=%d\n", transport.DefaultConfig().StreamsPerPeer)
	fmt.Printf("# tcp    = plain TCP loopback, one long-lived connection per caller, 4-byte BE length + CBOR wire.Ping, no crypto\n")
	if *quicFloor {
		fmt.Printf("# quic   = bare quic-go: one connection, one stream per caller, same framing as tcp; only QUIC's own TLS 1.3 packet protection\n")
	}
	fmt.Printf("# MB/s = (request+response payload bytes)/s / 1e6; cpu/rt = process user+sys CPU per round trip; alloc/rt = heap bytes allocated per round trip\n\n")

	var cells []cell
	for _, size := range sizes {
		for _, conc := range concs {
			c := cell{size: size, conc: conc}
			kinds := []string{"secure", "tcp"}
			if *quicFloor {
				kinds = append(kinds, "quic")
			}
			for rep := 0; rep < *reps; rep++ {
				// Rotate the order each rep (with two kinds: alternate) so
				// no kind always runs first or always after the same one.
				order := append(slices.Clone(kinds[rep%len(kinds):]), kinds[:rep%len(kinds)]...)
				for _, kind := range order {
					r, err := run(kind, secret, size, conc, *warmup, *duration, "")
					if err != nil {
						fatalf("%s size=%d conc=%d rep=%d: %v", kind, size, conc, rep+1, err)
					}
					fmt.Printf("%-6s size=%-6d conc=%-3d rep=%d  %9.0f rt/s  %8.1f MB/s  cpu/rt %6.1fµs  alloc/rt %7.1fKiB  errors=%d\n",
						kind, size, conc, rep+1, r.rate(), r.mbps(size), r.cpuPerOp(), r.allocPerOp()/1024, r.errs)
					if r.errs > 0 {
						fmt.Printf("       first error: %v\n", r.firstErr)
					}
					switch kind {
					case "secure":
						c.secure = append(c.secure, r)
					case "tcp":
						c.tcp = append(c.tcp, r)
					case "quic":
						c.quic = append(c.quic, r)
					}
				}
			}
			cells = append(cells, c)
			if *profileDir != "" {
				profiled := []string{"secure"}
				if *profileTCP {
					profiled = kinds
				}
				for _, kind := range profiled {
					path := filepath.Join(*profileDir, fmt.Sprintf("%s-%dB-c%d.pprof", kind, size, conc))
					r, err := run(kind, secret, size, conc, *warmup, *duration, path)
					if err != nil {
						fatalf("profile %s size=%d conc=%d: %v", kind, size, conc, err)
					}
					fmt.Printf("%-6s size=%-6d conc=%-3d PROFILED %9.0f rt/s (not in medians) -> %s\n", kind, size, conc, r.rate(), path)
				}
			}
			fmt.Println()
		}
	}

	fmt.Println("## medians")
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "size\tconc\tsecure rt/s\tsecure MB/s\ttcp rt/s\ttcp MB/s\tratio secure/tcp\tpaired ratio\tsecure cpu/rt\ttcp cpu/rt\tsecure alloc/rt\ttcp alloc/rt\t")
	for _, c := range cells {
		s, t := median(c.secure, result.rate), median(c.tcp, result.rate)
		var paired []float64
		for i := range c.secure {
			paired = append(paired, c.secure[i].rate()/c.tcp[i].rate())
		}
		fmt.Fprintf(tw, "%d\t%d\t%.0f\t%.1f\t%.0f\t%.1f\t%.2f\t%.2f\t%.1fµs\t%.1fµs\t%.1fKiB\t%.1fKiB\t\n",
			c.size, c.conc, s, s*2*float64(c.size)/1e6, t, t*2*float64(c.size)/1e6, s/t, medianF(paired),
			median(c.secure, result.cpuPerOp), median(c.tcp, result.cpuPerOp),
			median(c.secure, result.allocPerOp)/1024, median(c.tcp, result.allocPerOp)/1024)
	}
	tw.Flush()
	fmt.Println("\n(ratio = median secure rt/s / median tcp rt/s; paired ratio = median over reps of secure/tcp within the same rep)")
	if *quicFloor {
		fmt.Println("\n## diagnostic: bare quic-go floor")
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "size\tconc\tquic rt/s\tquic MB/s\tquic/tcp\tsecure/quic\tquic cpu/rt\tquic alloc/rt\t")
		for _, c := range cells {
			q := median(c.quic, result.rate)
			fmt.Fprintf(tw, "%d\t%d\t%.0f\t%.1f\t%.2f\t%.2f\t%.1fµs\t%.1fKiB\t\n",
				c.size, c.conc, q, q*2*float64(c.size)/1e6, q/median(c.tcp, result.rate), median(c.secure, result.rate)/q,
				median(c.quic, result.cpuPerOp), median(c.quic, result.allocPerOp)/1024)
		}
		tw.Flush()
	}
	fmt.Println("\n## per-rep rt/s")
	for _, c := range cells {
		line := fmt.Sprintf("size=%-6d conc=%-3d secure %s | tcp %s", c.size, c.conc, joinRates(c.secure), joinRates(c.tcp))
		if len(c.quic) > 0 {
			line += " | quic " + joinRates(c.quic)
		}
		fmt.Println(line)
	}
	for _, c := range cells {
		for _, rs := range [][]result{c.secure, c.tcp, c.quic} {
			for _, r := range rs {
				if r.errs > 0 {
					fmt.Printf("\nWARNING: size=%d conc=%d had failed calls; see the per-rep lines above\n", c.size, c.conc)
					os.Exit(1)
				}
			}
		}
	}
}

type cell struct {
	size, conc        int
	secure, tcp, quic []result
}

type result struct {
	ops      int64
	errs     int64
	firstErr error
	window   time.Duration
	cpu      time.Duration // process user+sys during the window
	alloc    uint64        // heap bytes allocated during the window
}

func (r result) rate() float64 { return float64(r.ops) / r.window.Seconds() }
func (r result) mbps(size int) float64 {
	return r.rate() * 2 * float64(size) / 1e6
}
func (r result) cpuPerOp() float64 {
	if r.ops == 0 {
		return 0
	}
	return float64(r.cpu.Microseconds()) / float64(r.ops)
}
func (r result) allocPerOp() float64 {
	if r.ops == 0 {
		return 0
	}
	return float64(r.alloc) / float64(r.ops)
}

func median(rs []result, f func(result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return medianF(v)
}

func medianF(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func joinRates(rs []result) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%.0f", r.rate())
	}
	return strings.Join(parts, " ")
}

// run builds fresh endpoints of the given kind, drives them and tears them
// down. profile, if set, is where the window's CPU profile goes.
func run(kind, secret string, size, conc int, warmup, window time.Duration, profile string) (result, error) {
	payload := make([]byte, size)
	rand.Read(payload)
	var (
		callers []caller
		cleanup func()
		err     error
	)
	switch kind {
	case "secure":
		callers, cleanup, err = newSecure(secret, payload, conc)
	case "tcp":
		callers, cleanup, err = newTCP(payload, conc)
	case "quic":
		callers, cleanup, err = newQUICFloor(payload, conc)
	default:
		err = fmt.Errorf("unknown kind %q", kind)
	}
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	return drive(callers, warmup, window, profile)
}

// caller performs one round trip with the given sequence number.
type caller func(seq uint64) error

// drive runs every caller in its own goroutine until the window closes and
// counts the round trips that completed inside it.
func drive(callers []caller, warmup, window time.Duration, profile string) (result, error) {
	const (
		phaseWarm = iota
		phaseMeasure
		phaseStop
	)
	var phase atomic.Int32
	type counter struct {
		ops, errs int64
		firstErr  error
		_         [48]byte // keep callers' counters on separate cache lines
	}
	counts := make([]counter, len(callers))
	var wg sync.WaitGroup
	for i, call := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &counts[i]
			for seq := uint64(1); ; seq++ {
				if phase.Load() == phaseStop {
					return
				}
				err := call(seq)
				if err != nil {
					// Counted whatever the phase: a failure during warm-up
					// is still a failure of the thing being measured.
					c.errs++
					if c.firstErr == nil {
						c.firstErr = err
					}
					continue
				}
				if phase.Load() == phaseMeasure {
					c.ops++
				}
			}
		}()
	}
	time.Sleep(warmup)
	runtime.GC() // start every window with the same, clean heap
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			phase.Store(phaseStop)
			wg.Wait()
			return result{}, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			phase.Store(phaseStop)
			wg.Wait()
			return result{}, err
		}
	}
	cpu0, alloc0 := cpuTime(), allocBytes()
	t0 := time.Now()
	phase.Store(phaseMeasure)
	time.Sleep(window)
	phase.Store(phaseStop)
	elapsed := time.Since(t0)
	cpu1, alloc1 := cpuTime(), allocBytes()
	if profile != "" {
		pprof.StopCPUProfile()
	}
	wg.Wait()
	r := result{window: elapsed, cpu: cpu1 - cpu0, alloc: alloc1 - alloc0}
	for i := range counts {
		r.ops += counts[i].ops
		r.errs += counts[i].errs
		if r.firstErr == nil {
			r.firstErr = counts[i].firstErr
		}
	}
	if r.ops == 0 {
		return r, fmt.Errorf("no round trip completed (first error: %v)", r.firstErr)
	}
	return r, nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func allocBytes() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// ---- secure: the Tempest QUIC transport ------------------------------------

func newSecure(secret string, payload []byte, conc int) ([]caller, func(), error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	node := func(id string) (*transport.QUIC, error) {
		// Each node gets its own keyring, as separate processes would.
		kr, err := security.NewKeyring(secret, "")
		if err != nil {
			return nil, err
		}
		cfg := transport.DefaultConfig()
		cfg.NodeID = id
		cfg.Keyring = kr
		cfg.Logger = quiet
		// The default limit (20k msgs/s per source and class) is a policy
		// that a loopback benchmark could hit; raise it out of the way but
		// keep a limit set so the limiter's per-message cost stays in the
		// path being measured.
		for i := range cfg.RateLimit.Limits {
			cfg.RateLimit.Limits[i] = security.Limit{PerSecond: 1e9, Burst: 1 << 30}
		}
		cfg.DrainTimeout = time.Second
		cfg.Linger = time.Millisecond // teardown only; no effect on the window
		return transport.NewQUIC(cfg)
	}
	srv, err := node("bench-server")
	if err != nil {
		return nil, nil, fmt.Errorf("server node: %w", err)
	}
	srv.Handle(wire.TypePing, func(_ context.Context, _ transport.Peer, msg wire.Message) (wire.Message, error) {
		return msg, nil
	})
	cli, err := node("bench-client")
	if err != nil {
		srv.Close()
		return nil, nil, fmt.Errorf("client node: %w", err)
	}
	addr := srv.Addr()
	ctx := context.Background()
	callers := make([]caller, conc)
	for i := range callers {
		req := &wire.Ping{Payload: payload}
		callers[i] = func(seq uint64) error {
			req.Seq = seq
			resp, err := cli.Call(ctx, addr, req)
			if err != nil {
				return err
			}
			return checkEcho(resp, seq, len(payload))
		}
	}
	cleanup := func() {
		cli.Close()
		srv.Close()
	}
	return callers, cleanup, nil
}

func checkEcho(resp wire.Message, seq uint64, size int) error {
	p, ok := resp.(*wire.Ping)
	if !ok {
		return fmt.Errorf("reply is %T, want *wire.Ping", resp)
	}
	if p.Seq != seq || len(p.Payload) != size {
		return fmt.Errorf("reply seq %d len %d, want seq %d len %d", p.Seq, len(p.Payload), seq, size)
	}
	return nil
}

// ---- tcp: the plain floor ----------------------------------------------------

func newTCP(payload []byte, conc int) ([]caller, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	var (
		srvWG sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	srvWG.Add(1)
	go func() {
		defer srvWG.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			srvWG.Add(1)
			go func() {
				defer srvWG.Done()
				defer c.Close()
				serveTCP(c)
			}()
		}
	}()
	var clients []net.Conn
	cleanup := func() {
		for _, c := range clients {
			c.Close()
		}
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		srvWG.Wait()
	}
	callers := make([]caller, conc)
	for i := range callers {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		clients = append(clients, c)
		callers[i] = framedCaller(c, bufio.NewReaderSize(c, 64<<10), payload)
	}
	return callers, cleanup, nil
}

// framedCaller sends length-prefixed CBOR Pings on w and reads the echoes
// from r: the floors' client side.
func framedCaller(w io.Writer, r io.Reader, payload []byte) caller {
	var wbuf, rbuf []byte
	req := &wire.Ping{Payload: payload}
	return func(seq uint64) error {
		req.Seq = seq
		body, err := wire.Marshal(req)
		if err != nil {
			return err
		}
		wbuf = appendFrame(wbuf[:0], body)
		if _, err := w.Write(wbuf); err != nil {
			return err
		}
		var frame []byte
		frame, rbuf, err = readFrame(r, rbuf)
		if err != nil {
			return err
		}
		var resp wire.Ping
		if err := wire.Unmarshal(frame, &resp); err != nil {
			return err
		}
		return checkEcho(&resp, seq, len(payload))
	}
}

// serveTCP echoes Ping frames until the connection closes.
func serveTCP(c net.Conn) {
	serveEcho(c, bufio.NewReaderSize(c, 64<<10))
}

// serveEcho is the floors' server side: decode each Ping frame from r,
// encode it again and write it to w.
func serveEcho(w io.Writer, r io.Reader) {
	var rbuf, wbuf []byte
	for {
		frame, nb, err := readFrame(r, rbuf)
		rbuf = nb
		if err != nil {
			return
		}
		var p wire.Ping
		if err := wire.Unmarshal(frame, &p); err != nil {
			return
		}
		body, err := wire.Marshal(&p)
		if err != nil {
			return
		}
		wbuf = appendFrame(wbuf[:0], body)
		if _, err := w.Write(wbuf); err != nil {
			return
		}
	}
}

// readFrame reads one length-prefixed frame into buf (grown as needed); the
// returned frame is valid until the next call. It mirrors transport's framing.
func readFrame(r io.Reader, buf []byte) (frame, newBuf []byte, err error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, buf, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > wire.MaxMessageSize {
		return nil, buf, errors.New("frame too large")
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, buf, err
	}
	return buf, buf, nil
}

func appendFrame(dst, payload []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	return append(dst, payload...)
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench/transport: "+format+"\n", args...)
	os.Exit(2)
}
