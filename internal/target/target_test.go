package target

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tempest/internal/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

// startTarget runs a target on a free loopback port and shuts it down when
// the test ends.
func startTarget(t testing.TB, mutate func(*Config)) (*Server, string) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return s, "http://" + s.Addr()
}

// newClient is a keep-alive client with room for conns idle connections;
// they are closed when the test ends.
func newClient(t testing.TB, conns int) *http.Client {
	t.Helper()
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

func do(c *http.Client, method, url string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func mustDo(t testing.TB, c *http.Client, method, url string) (int, []byte) {
	t.Helper()
	code, b, err := do(c, method, url, nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return code, b
}

func fetchStats(t testing.TB, c *http.Client, base string) Stats {
	t.Helper()
	code, b := mustDo(t, c, http.MethodGet, base+StatsPath)
	if code != http.StatusOK {
		t.Fatalf("GET %s: status %d: %s", StatsPath, code, b)
	}
	var st Stats
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("decode stats %s: %v", b, err)
	}
	return st
}

// run sends total requests from workers concurrent goroutines; fn makes one
// request and returns its status code. It returns how many of each code
// came back — the outside count.
func run(t *testing.T, workers, total int, fn func(i int) (int, error)) map[int]int {
	t.Helper()
	var (
		mu     sync.Mutex
		codes  = map[int]int{}
		next   atomic.Int64
		wg     sync.WaitGroup
		failed atomic.Int64
	)
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= total {
					return
				}
				code, err := fn(i)
				if err != nil {
					if failed.Add(1) == 1 {
						t.Errorf("request %d: %v", i, err)
					}
					continue
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d requests failed", n)
	}
	return codes
}

func TestCountsExactUnderConcurrency(t *testing.T) {
	const clients, perClient = 32, 100
	const total = clients * perClient
	s, base := startTarget(t, nil)
	c := newClient(t, clients)
	body := []byte("0123456789")

	// Every fourth request is a POST with a body, every tenth asks for a 503.
	got := run(t, clients, total, func(i int) (int, error) {
		method, url, b := http.MethodGet, base+"/load", []byte(nil)
		if i%4 == 0 {
			method, b = http.MethodPost, body
		}
		if i%10 == 0 {
			url = base + "/status/503"
		}
		code, _, err := do(c, method, url, b)
		return code, err
	})

	var posts, unavailable int
	for i := range total {
		if i%4 == 0 {
			posts++
		}
		if i%10 == 0 {
			unavailable++
		}
	}
	if got[200] != total-unavailable || got[503] != unavailable {
		t.Fatalf("client saw %v, want 200:%d 503:%d", got, total-unavailable, unavailable)
	}

	want := Stats{
		Requests: total,
		Errors:   uint64(unavailable),
		ByStatus: map[int]uint64{200: uint64(total - unavailable), 503: uint64(unavailable)},
		ByMethod: map[string]uint64{"GET": uint64(total - posts), "POST": uint64(posts)},
		BytesIn:  uint64(posts * len(body)),
	}
	for _, st := range []Stats{s.Stats(), fetchStats(t, c, base)} {
		st.StartedAt, st.UptimeSeconds = time.Time{}, 0
		if fmt.Sprint(st) != fmt.Sprint(want) {
			t.Errorf("stats = %+v\nwant    %+v", st, want)
		}
	}
}

func TestErrorRate(t *testing.T) {
	const total, workers, seed = 1000, 8, 42
	for _, rate := range []float64{0, 1, 0.5, 0.1} {
		t.Run(fmt.Sprint(rate), func(t *testing.T) {
			s, base := startTarget(t, func(c *Config) { c.ErrorRate, c.Seed = rate, seed })
			c := newClient(t, workers)
			got := run(t, workers, total, func(int) (int, error) {
				code, _, err := do(c, http.MethodGet, base+"/", nil)
				return code, err
			})

			// The count is fixed by the seed, however the requests interleaved.
			d := newDice(seed, rate, 0)
			want := 0
			for n := uint64(1); n <= total; n++ {
				if fail, _ := d.outcome(n); fail {
					want++
				}
			}
			if got[500] != want || got[200] != total-want {
				t.Fatalf("client saw %v, want 500:%d 200:%d", got, want, total-want)
			}
			if st := s.Stats(); st.Errors != uint64(want) || st.Requests != total {
				t.Fatalf("stats errors=%d requests=%d, want %d and %d", st.Errors, st.Requests, want, total)
			}
			// And the seeded sequence really is close to the rate asked for:
			// within 6 standard deviations of the binomial mean.
			mean, sd := total*rate, math.Sqrt(total*rate*(1-rate))
			if math.Abs(float64(want)-mean) > 6*sd {
				t.Fatalf("%d errors of %d at rate %v: outside %v ± %v", want, total, rate, mean, 6*sd)
			}
		})
	}
}

func TestDiceDistribution(t *testing.T) {
	const n, rate, jitter = 200_000, 0.3, time.Millisecond
	d := newDice(7, rate, jitter)
	var fails int
	var sum time.Duration
	for range n {
		fail, j := d.roll()
		if fail {
			fails++
		}
		if j < 0 || j >= jitter {
			t.Fatalf("jitter %s outside [0, %s)", j, jitter)
		}
		sum += j
	}
	mean, sd := n*rate, math.Sqrt(n*rate*(1-rate))
	if math.Abs(float64(fails)-mean) > 6*sd {
		t.Errorf("%d fails of %d: outside %v ± %v", fails, n, mean, 6*sd)
	}
	// Uniform on [0, J): mean J/2, standard error J/sqrt(12 n).
	avg := float64(sum) / n
	if se := float64(jitter) / math.Sqrt(12*n); math.Abs(avg-float64(jitter)/2) > 6*se {
		t.Errorf("mean jitter %v, want %v ± %v", time.Duration(avg), jitter/2, time.Duration(6*se))
	}
	if d2 := newDice(8, rate, jitter); d2.outcomeBits(1) == d.outcomeBits(1) {
		t.Errorf("seeds 7 and 8 rolled the same first outcome bits")
	}
}

func (d *dice) outcomeBits(n uint64) [2]uint64 {
	return [2]uint64{splitmix64(d.seed, 2*n), splitmix64(d.seed, 2*n+1)}
}

// Latency is checked as a lower bound only: responses are never early.
func TestLatencyIsALowerBound(t *testing.T) {
	const latency, jitter = 20 * time.Millisecond, 10 * time.Millisecond
	_, base := startTarget(t, func(c *Config) { c.Latency, c.Jitter = latency, jitter })
	c := newClient(t, 4)
	var short atomic.Int64
	run(t, 4, 20, func(int) (int, error) {
		start := time.Now()
		code, _, err := do(c, http.MethodGet, base+"/", nil)
		if time.Since(start) < latency {
			short.Add(1)
		}
		return code, err
	})
	if n := short.Load(); n > 0 {
		t.Fatalf("%d responses came back sooner than the %s latency", n, latency)
	}

	start := time.Now()
	if code, _ := mustDo(t, c, http.MethodGet, base+"/delay/30"); code != 200 {
		t.Fatalf("/delay/30: status %d", code)
	}
	if el := time.Since(start); el < 30*time.Millisecond {
		t.Fatalf("/delay/30 answered after %s", el)
	}
}

func TestRoutes(t *testing.T) {
	s, base := startTarget(t, func(c *Config) { c.ErrorRate = 1 }) // routes below bypass it
	c := newClient(t, 1)
	tests := []struct {
		method, path string
		code         int
		body         string
	}{
		{"GET", "/status/204", 204, ""},
		{"GET", "/status/299", 299, ""},
		{"DELETE", "/status/503", 503, ""},
		{"GET", "/status/404", 404, ""},
		{"GET", "/status/199", 400, string(badStatusBody.b)},
		{"GET", "/status/600", 400, string(badStatusBody.b)},
		{"GET", "/status/x", 400, string(badStatusBody.b)},
		{"GET", "/delay/0", 200, "ok"},
		{"GET", "/delay/x", 400, string(badDelayBody.b)},
		{"GET", "/delay/-1", 400, string(badDelayBody.b)},
		{"GET", "/delay/60001", 400, string(badDelayBody.b)},
		{"GET", "/delay/9223372036854775807", 400, string(badDelayBody.b)},
		{"PUT", "/anything/else", 500, "error\n"},
		{"BREW", "/", 500, "error\n"},
	}
	for _, tt := range tests {
		code, body := mustDo(t, c, tt.method, base+tt.path)
		if code != tt.code || string(body) != tt.body {
			t.Errorf("%s %s = %d %q, want %d %q", tt.method, tt.path, code, body, tt.code, tt.body)
		}
	}
	st := s.Stats()
	want := map[int]uint64{204: 1, 299: 1, 503: 1, 404: 1, 400: 7, 200: 1, 500: 2}
	if st.Requests != uint64(len(tests)) || st.Errors != 3 || fmt.Sprint(st.ByStatus) != fmt.Sprint(want) {
		t.Errorf("stats %+v, want %d requests, 3 errors, by_status %v", st, len(tests), want)
	}
	wantMethods := map[string]uint64{"GET": 11, "DELETE": 1, "PUT": 1, "OTHER": 1}
	if fmt.Sprint(st.ByMethod) != fmt.Sprint(wantMethods) {
		t.Errorf("by_method %v, want %v", st.ByMethod, wantMethods)
	}
}

func TestBodySize(t *testing.T) {
	// netHTTPBuffer and one past it: both must carry a Content-Length.
	for _, size := range []int{0, 1, DefaultBodySize, netHTTPBuffer, netHTTPBuffer + 1, 100_000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			s, base := startTarget(t, func(c *Config) { c.BodySize = size })
			c := newClient(t, 1)
			resp, err := c.Get(base + "/")
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.Repeat("ok", size)[:size]; string(b) != want {
				t.Fatalf("body %q, want %q", b, want)
			}
			if resp.ContentLength != int64(size) {
				t.Fatalf("Content-Length %d, want %d", resp.ContentLength, size)
			}
			if ct := resp.Header.Get("Content-Type"); size > 0 && ct != textPlain[0] {
				t.Fatalf("Content-Type %q, want %q", ct, textPlain[0])
			}
			if code, b := mustDo(t, c, http.MethodHead, base+"/"); code != 200 || len(b) != 0 {
				t.Fatalf("HEAD = %d with %d body bytes", code, len(b))
			}
			if st := s.Stats(); st.Requests != 2 || st.ByMethod["HEAD"] != 1 {
				t.Fatalf("stats %+v, want 2 requests, one HEAD", st)
			}
		})
	}
}

type fakeClock struct{ ns atomic.Int64 }

func newFakeClock(at time.Time) *fakeClock {
	c := &fakeClock{}
	c.ns.Store(at.UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func TestStatsJSON(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := newFakeClock(t0)
	_, base := startTarget(t, func(c *Config) { c.Clock = clock.Now })
	c := newClient(t, 1)
	mustDo(t, c, http.MethodGet, base+"/")
	if code, _, err := do(c, http.MethodPost, base+"/", []byte("abc")); err != nil || code != 200 {
		t.Fatalf("POST: %d %v", code, err)
	}
	clock.Advance(90 * time.Second)

	resp, err := c.Get(base + StatsPath)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("not a JSON object: %s: %v", raw, err)
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range doc {
			if !yield(k) {
				return
			}
		}
	})
	wantKeys := []string{"by_method", "by_status", "bytes_in", "errors", "in_flight", "requests", "started_at", "uptime_seconds"}
	if !slices.Equal(keys, wantKeys) {
		t.Fatalf("keys %v, want %v", keys, wantKeys)
	}
	want := map[string]string{
		"requests":       `2`,
		"errors":         `0`,
		"by_status":      `{"200":2}`,
		"by_method":      `{"GET":1,"POST":1}`,
		"bytes_in":       `3`,
		"in_flight":      `0`,
		"started_at":     `"2026-03-01T12:00:00Z"`,
		"uptime_seconds": `90`,
	}
	for k, v := range want {
		if string(doc[k]) != v {
			t.Errorf("%s = %s, want %s", k, doc[k], v)
		}
	}
}

func TestResetAndControlRoutes(t *testing.T) {
	s, base := startTarget(t, nil)
	c := newClient(t, 1)
	for range 5 {
		if code, _, err := do(c, http.MethodPost, base+"/x", []byte("hello")); err != nil || code != 200 {
			t.Fatalf("POST: %d %v", code, err)
		}
	}
	before := s.Stats()
	if before.Requests != 5 || before.BytesIn != 25 {
		t.Fatalf("before reset: %+v", before)
	}

	// Wrong methods on control routes are refused, and nothing on them counts.
	if code, _ := mustDo(t, c, http.MethodGet, base+ResetPath); code != http.StatusMethodNotAllowed {
		t.Fatalf("GET %s = %d", ResetPath, code)
	}
	if code, _ := mustDo(t, c, http.MethodPost, base+StatsPath); code != http.StatusMethodNotAllowed {
		t.Fatalf("POST %s = %d", StatsPath, code)
	}
	if code, _ := mustDo(t, c, http.MethodPost, base+ResetPath); code != http.StatusNoContent {
		t.Fatalf("POST %s = %d", ResetPath, code)
	}
	st := fetchStats(t, c, base)
	if st.Requests != 0 || st.Errors != 0 || st.BytesIn != 0 || len(st.ByStatus) != 0 || len(st.ByMethod) != 0 {
		t.Fatalf("after reset: %+v", st)
	}
	if !st.StartedAt.Equal(before.StartedAt) {
		t.Fatalf("reset moved started_at from %s to %s", before.StartedAt, st.StartedAt)
	}
	mustDo(t, c, http.MethodGet, base+"/")
	if st := s.Stats(); st.Requests != 1 {
		t.Fatalf("after reset and one request: %+v", st)
	}
}

func waitInFlight(t *testing.T, s *Server, n int64) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, time.Millisecond, func() error {
		if got := s.Stats().InFlight; got != n {
			return fmt.Errorf("in_flight %d, want %d", got, n)
		}
		return nil
	})
}

func TestAbandonedRequestIsNotCounted(t *testing.T) {
	s, base := startTarget(t, func(c *Config) { c.Latency = 30 * time.Second })
	c := newClient(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/", nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitInFlight(t, s, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v, want canceled", err)
	}
	waitInFlight(t, s, 0)
	if st := s.Stats(); st.Requests != 0 {
		t.Fatalf("abandoned request counted: %+v", st)
	}
}

func TestShutdownWaitsForInFlight(t *testing.T) {
	s, err := New(Config{Addr: "127.0.0.1:0", BodySize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, 1)
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, _, err := do(c, http.MethodGet, "http://"+s.Addr()+"/delay/100", nil)
		done <- result{code, err}
	}()
	waitInFlight(t, s, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if r := <-done; r.err != nil || r.code != 200 {
		t.Fatalf("in-flight request: %d %v, want 200", r.code, r.err)
	}
	if st := s.Stats(); st.Requests != 1 || st.InFlight != 0 {
		t.Fatalf("after shutdown: %+v", st)
	}
	if _, _, err := do(c, http.MethodGet, "http://"+s.Addr()+"/", nil); err == nil {
		t.Fatal("request after shutdown succeeded")
	}
}

func TestShutdownDeadlineCutsWaitsShort(t *testing.T) {
	s, err := New(Config{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, 1)
	done := make(chan error, 1)
	go func() {
		_, _, err := do(c, http.MethodGet, "http://"+s.Addr()+"/delay/60000", nil)
		done <- err
	}()
	waitInFlight(t, s, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want deadline exceeded", err)
	}
	if err := <-done; err == nil {
		t.Fatal("cut-short request got a response")
	}
	if st := s.Stats(); st.Requests != 0 || st.InFlight != 0 {
		t.Fatalf("after forced shutdown: %+v", st)
	}
}

func TestServeAndStartErrors(t *testing.T) {
	s, _ := startTarget(t, nil)
	if err := s.Start(context.Background()); !errors.Is(err, ErrAlreadyServing) {
		t.Errorf("second Start: %v, want ErrAlreadyServing", err)
	}

	taken, err := New(Config{Addr: s.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	if err := taken.Start(context.Background()); err == nil || !strings.Contains(err.Error(), s.Addr()) {
		t.Errorf("Start on a taken port: %v, want a listen error naming %s", err, s.Addr())
	}

	noAddr, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := noAddr.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "Addr") {
		t.Errorf("Start without Addr: %v", err)
	}

	// Serve on a caller's listener returns nil after Shutdown.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- served.Serve(ln) }()
	c := newClient(t, 1)
	testutil.Eventually(t, 5*time.Second, time.Millisecond, func() error {
		_, _, err := do(c, http.MethodGet, "http://"+ln.Addr().String()+"/", nil)
		return err
	})
	if served.Addr() != ln.Addr().String() {
		t.Errorf("Addr() = %q, want %q", served.Addr(), ln.Addr())
	}
	c.CloseIdleConnections()
	if err := served.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-serveErr; err != nil {
		t.Fatalf("Serve after Shutdown: %v", err)
	}
}

func TestValidate(t *testing.T) {
	for _, cfg := range []Config{{}, DefaultConfig(), {Addr: ":0", Latency: MaxDelay, ErrorRate: 1, BodySize: MaxBodySize}} {
		if err := cfg.Validate(); err != nil {
			t.Errorf("Validate(%+v): %v", cfg, err)
		}
	}
	tests := []struct {
		name   string
		cfg    Config
		fields []string
	}{
		{"addr without port", Config{Addr: "localhost"}, []string{"Addr"}},
		{"addr named port", Config{Addr: "127.0.0.1:http"}, []string{"Addr"}},
		{"addr port too big", Config{Addr: "127.0.0.1:70000"}, []string{"Addr"}},
		{"negative latency", Config{Latency: -1}, []string{"Latency"}},
		{"negative jitter", Config{Jitter: -1}, []string{"Jitter"}},
		{"too slow", Config{Latency: MaxDelay, Jitter: 1}, []string{"Latency"}},
		{"sum overflows", Config{Latency: math.MaxInt64, Jitter: 1}, []string{"Latency"}},
		{"rate above 1", Config{ErrorRate: 1.01}, []string{"ErrorRate"}},
		{"rate negative", Config{ErrorRate: -0.1}, []string{"ErrorRate"}},
		{"rate NaN", Config{ErrorRate: math.NaN()}, []string{"ErrorRate"}},
		{"body negative", Config{BodySize: -1}, []string{"BodySize"}},
		{"body huge", Config{BodySize: MaxBodySize + 1}, []string{"BodySize"}},
		{"everything at once", Config{Addr: "x", Latency: -1, Jitter: -1, ErrorRate: 2, BodySize: -1},
			[]string{"Addr", "Latency", "Jitter", "ErrorRate", "BodySize"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if err == nil {
				t.Fatal("Validate accepted it")
			}
			for _, f := range tt.fields {
				if !strings.Contains(err.Error(), f+":") {
					t.Errorf("error %q does not name %s", err, f)
				}
			}
			if _, nerr := New(tt.cfg); nerr == nil {
				t.Error("New accepted it")
			}
		})
	}
}

// nullWriter is the least a ResponseWriter can be, so that AllocsPerRun
// sees the handler's own allocations and not a recorder's.
type nullWriter struct{ h http.Header }

func (w *nullWriter) Header() http.Header         { return w.h }
func (w *nullWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *nullWriter) WriteHeader(int)             {}

func TestHotPathDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops sync.Pool items and adds allocations")
	}
	s, err := New(Config{BodySize: 2, ErrorRate: 0.5, Jitter: time.Microsecond, Latency: time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	w := &nullWriter{h: http.Header{}}
	for _, path := range []string{"/", "/status/503", "/delay/0"} {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		if n := testing.AllocsPerRun(1000, func() { s.ServeHTTP(w, r) }); n != 0 {
			t.Errorf("GET %s: %v allocations per request, want 0", path, n)
		}
	}
}
