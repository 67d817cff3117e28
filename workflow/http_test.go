package workflow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tempest/internal/testutil"
)

// target is an HTTP server that counts the requests it receives, per path
// and in total, the way the integration test's target will.
type target struct {
	*httptest.Server
	total  atomic.Int64
	conns  atomic.Int64 // connections accepted
	mu     sync.Mutex
	byPath map[string]int64
}

func newTarget(t *testing.T, h http.HandlerFunc) *target {
	t.Helper()
	tg := &target{byPath: map[string]int64{}}
	tg.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tg.total.Add(1)
		tg.mu.Lock()
		tg.byPath[r.URL.Path]++
		tg.mu.Unlock()
		if h != nil {
			h(w, r)
		}
	}))
	// Connections are counted as the server accepts them: their client
	// addresses are no count, since a port freed by a connection the server
	// closed can be taken again by the next.
	tg.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			tg.conns.Add(1)
		}
	}
	tg.Start()
	t.Cleanup(tg.Close)
	return tg
}

func (tg *target) path(p string) int64 {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.byPath[p]
}

func runHTTP(t *testing.T, p HTTPParams, env Env) (Result, error) {
	t.Helper()
	return newRunner(t, "http", &p).Run(context.Background(), env)
}

func step(name, url string) HTTPStep { return HTTPStep{Name: name, Method: "GET", URL: url} }

func TestHTTPIterationsCountExactly(t *testing.T) {
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	// 1003 is not a multiple of 8: the remainder must be handed out too.
	p := HTTPParams{VUs: 8, Iterations: 1003, Steps: []HTTPStep{step("a", tg.URL+"/a"), step("b", tg.URL+"/b")}}
	res, err := runHTTP(t, p, Env{Cores: []int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != 2006 || res.Failed != 0 {
		t.Fatalf("completed %d failed %d, want 2006 and 0", res.Completed, res.Failed)
	}
	for _, st := range res.Steps {
		if st.Completed != 1003 || st.Latency.Count() != 1003 {
			t.Errorf("step %s: completed %d, %d latencies, want 1003", st.Name, st.Completed, st.Latency.Count())
		}
	}
	if tg.total.Load() != 2006 || tg.path("/a") != 1003 || tg.path("/b") != 1003 {
		t.Fatalf("target saw %d requests (/a %d, /b %d), want 1003 each", tg.total.Load(), tg.path("/a"), tg.path("/b"))
	}
}

func TestHTTPFewerIterationsThanVUs(t *testing.T) {
	tg := newTarget(t, nil)
	res, err := runHTTP(t, HTTPParams{VUs: 10, Iterations: 3, Steps: []HTTPStep{step("a", tg.URL)}}, Env{})
	if err != nil || res.Completed != 3 || tg.total.Load() != 3 {
		t.Fatalf("completed %d, target %d, err %v; want 3", res.Completed, tg.total.Load(), err)
	}
}

// With a duration, VUs finish the request in flight when time is up, so the
// target's count equals ours exactly.
func TestHTTPDurationMatchesTargetCount(t *testing.T) {
	tg := newTarget(t, nil)
	p := HTTPParams{VUs: 6, Duration: 300 * time.Millisecond, Steps: []HTTPStep{step("a", tg.URL+"/a"), step("b", tg.URL+"/b")}}
	res, err := runHTTP(t, p, Env{Cores: []int{0, 1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed == 0 {
		t.Fatal("nothing completed")
	}
	if got := res.Completed + res.Failed; got != tg.total.Load() {
		t.Fatalf("runner counted %d, target saw %d", got, tg.total.Load())
	}
	for _, st := range res.Steps {
		if got := st.Completed + st.Failed; got != tg.path("/"+st.Name) {
			t.Errorf("step %s counted %d, target saw %d", st.Name, got, tg.path("/"+st.Name))
		}
	}
}

func TestHTTPUnexpectedStatusCountsAsFailed(t *testing.T) {
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/broken":
			w.WriteHeader(http.StatusInternalServerError)
		case "/moved":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		}
	})
	// redirects: 0, so a 3xx is an outcome of its own.
	p := HTTPParams{VUs: 3, Iterations: 50, NoRedirects: true, Steps: []HTTPStep{
		step("ok", tg.URL+"/ok"),
		step("broken", tg.URL+"/broken"),
		{Name: "want-201", URL: tg.URL + "/ok", ExpectStatus: []int{201}},
		{Name: "want-500", URL: tg.URL + "/broken", ExpectStatus: []int{500}},
		step("moved", tg.URL+"/moved"),
	}}
	res, err := runHTTP(t, p, Env{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]int64{"ok": {50, 0}, "broken": {0, 50}, "want-201": {0, 50}, "want-500": {50, 0}, "moved": {50, 0}}
	for _, st := range res.Steps {
		w := want[st.Name]
		if st.Completed != w[0] || st.Failed != w[1] {
			t.Errorf("step %s: completed %d failed %d, want %v", st.Name, st.Completed, st.Failed, w)
		}
		if st.Failed > 0 && st.Errors[ErrorStatus] != st.Failed {
			t.Errorf("step %s: errors %v, want all of class status", st.Name, st.Errors)
		}
		// A response arrived every time, so every request has a latency.
		if st.Latency.Count() != 50 {
			t.Errorf("step %s: %d latencies, want 50", st.Name, st.Latency.Count())
		}
	}
	if tg.path("/elsewhere") != 0 {
		t.Fatal("a redirect was followed under redirects: 0")
	}
	if res.Failed != 100 || res.Completed+res.Failed != tg.total.Load() {
		t.Fatalf("failed %d (want 100), counted %d, target saw %d", res.Failed, res.Completed+res.Failed, tg.total.Load())
	}
}

func TestHTTPConnectionRefusedCountsAsFailed(t *testing.T) {
	url := fmt.Sprintf("http://127.0.0.1:%d/", testutil.FreeTCPPort(t))
	res, err := runHTTP(t, HTTPParams{VUs: 4, Iterations: 40, Steps: []HTTPStep{step("down", url)}}, Env{})
	if err != nil {
		t.Fatal(err)
	}
	st := res.Steps[0]
	if st.Completed != 0 || st.Failed != 40 || st.Errors[ErrorConnect] != 40 {
		t.Fatalf("completed %d failed %d errors %v, want 40 connect failures", st.Completed, st.Failed, st.Errors)
	}
	if st.Latency.Count() != 0 {
		t.Fatalf("%d latencies recorded for requests that never got a response", st.Latency.Count())
	}
}

func TestHTTPRequestTimeout(t *testing.T) {
	release := make(chan struct{})
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	p := HTTPParams{VUs: 2, Iterations: 4, Timeout: 50 * time.Millisecond, Steps: []HTTPStep{step("slow", tg.URL)}}
	res, err := runHTTP(t, p, Env{})
	if err != nil {
		t.Fatal(err)
	}
	if st := res.Steps[0]; st.Failed != 4 || st.Errors[ErrorTimeout] != 4 {
		t.Fatalf("failed %d errors %v, want 4 timeouts", st.Failed, st.Errors)
	}
}

// cancelMidRun starts a long run, cancels it once the target has seen
// minSeen requests, and checks the run returns promptly with the documented
// bound: target <= counted <= target + vus.
func cancelMidRun(t *testing.T, tg *target, vus int, minSeen int64) Result {
	t.Helper()
	run := newRunner(t, "http", &HTTPParams{VUs: vus, Duration: time.Hour, Steps: []HTTPStep{step("a", tg.URL)}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type ret struct {
		res Result
		err error
	}
	done := make(chan ret, 1)
	go func() {
		res, err := run.Run(ctx, Env{Cores: []int{0, 1}})
		done <- ret{res, err}
	}()
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if n := tg.total.Load(); n < minSeen {
			return fmt.Errorf("target has seen %d requests, waiting for %d", n, minSeen)
		}
		return nil
	})
	cancel()
	var r ret
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", r.err)
	}
	// Close waits for every handler, so the target's count is final.
	tg.Close()
	counted, seen := r.res.Completed+r.res.Failed, tg.total.Load()
	if counted < seen || counted > seen+int64(vus) {
		t.Fatalf("counted %d, target saw %d: want target <= counted <= target+%d", counted, seen, vus)
	}
	if got := r.res.Steps[0].Errors[ErrorCancelled]; got > int64(vus) {
		t.Fatalf("%d requests cancelled, more than the %d VUs", got, vus)
	}
	return r.res
}

func TestHTTPCancelAbortsRequestsInFlight(t *testing.T) {
	release := make(chan struct{})
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		select { // hold every request until the client gives up
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	res := cancelMidRun(t, tg, 8, 8)
	st := res.Steps[0]
	// Every VU was stuck in a request the target had seen.
	if st.Errors[ErrorCancelled] != 8 || st.Failed != 8 || st.Completed != 0 {
		t.Fatalf("completed %d failed %d errors %v, want 8 cancelled", st.Completed, st.Failed, st.Errors)
	}
}

func TestHTTPCancelUnderLoad(t *testing.T) {
	tg := newTarget(t, nil)
	res := cancelMidRun(t, tg, 16, 2000)
	if res.Completed < 2000-16 {
		t.Fatalf("completed %d, want most of the 2000 the target saw", res.Completed)
	}
}

func TestHTTPSendsMethodHeadersAndBody(t *testing.T) {
	type seen struct{ method, host, ua, ctype, trace, body string }
	got := make(chan seen, 10)
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.Host, r.UserAgent(), r.Header.Get("Content-Type"), r.Header.Get("X-Trace"), string(b)}
		w.WriteHeader(http.StatusCreated)
	})
	p := HTTPParams{VUs: 2, Iterations: 4, Steps: []HTTPStep{{
		Name: "create", Method: "POST", URL: tg.URL + "/items",
		Headers:      map[string]string{"Content-Type": "application/json", "x-trace": "abc", "Host": "api.example"},
		Body:         `{"n":1}`,
		ExpectStatus: []int{201},
	}}}
	res, err := runHTTP(t, p, Env{})
	if err != nil || res.Completed != 4 {
		t.Fatalf("completed %d, err %v; want 4", res.Completed, err)
	}
	want := seen{"POST", "api.example", defaultUserAgent, "application/json", "abc", `{"n":1}`}
	for range 4 {
		if s := <-got; s != want {
			t.Fatalf("target saw %+v, want %+v", s, want)
		}
	}
}

func TestHTTPReportsAreMonotonic(t *testing.T) {
	tg := newTarget(t, nil)
	rep := newReports()
	p := HTTPParams{VUs: 4, Iterations: 1000, Steps: []HTTPStep{step("a", tg.URL+"/a"), step("b", tg.URL+"/b")}}
	res, err := runHTTP(t, p, Env{Cores: []int{0, 1}, Report: rep.report, ReportInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	all := rep.all()
	var prev Snapshot
	for i, s := range all {
		if s.Completed < prev.Completed || s.Failed < prev.Failed || s.Elapsed < prev.Elapsed {
			t.Fatalf("report %d went backwards: %+v after %+v", i, s, prev)
		}
		var sum int64
		for j, st := range s.Steps {
			sum += st.Completed
			if prev.Steps != nil && st.Completed < prev.Steps[j].Completed {
				t.Fatalf("report %d: step %s went backwards", i, st.Name)
			}
			if st.Latency.Count() != st.Completed+st.Failed {
				t.Fatalf("report %d: step %s has %d latencies for %d outcomes", i, st.Name, st.Latency.Count(), st.Completed+st.Failed)
			}
		}
		if sum != s.Completed {
			t.Fatalf("report %d: steps sum to %d, total says %d", i, sum, s.Completed)
		}
		prev = s
	}
	if last := all[len(all)-1]; last.Completed != res.Completed || last.Completed != 2000 {
		t.Fatalf("final report %d, result %d, want 2000", last.Completed, res.Completed)
	}
	t.Logf("%d reports", len(all))
}

func TestLoadTransportIgnoresProxyEnvironment(t *testing.T) {
	// http1 has its own client (h1), which dials the URL's host and knows
	// nothing of proxies.
	for _, proto := range []Protocol{ProtocolH2, ProtocolH2C} {
		tr, err := newTCPTransport(8, true, proto, nil)
		if err != nil {
			t.Fatalf("%s: %v", proto, err)
		}
		if tr.Proxy != nil {
			t.Fatalf("%s: the load transport must not take a proxy from the environment", proto)
		}
		if tr.MaxIdleConnsPerHost != 8 || !tr.DisableCompression {
			t.Fatalf("%s: transport %+v", proto, tr)
		}
	}
}

func TestRecorderShardsFollowCores(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	for cores, want := range map[int]int{0: 1, 1: 1, 2: min(2, procs), 64: min(maxShards, procs)} {
		env := Env{Cores: make([]int, cores)}
		if got := len(newRecorder([]string{"a"}, nil, env.parallelism(), false).shards); got != want {
			t.Errorf("%d cores: %d shards, want %d", cores, got, want)
		}
	}
}

// Every response is counted by status code and its body bytes summed; a
// failure is counted by class. The wire form carries them, and merging two
// workers' step stats adds them up.
func TestHTTPCountsStatusesErrorsAndBytes(t *testing.T) {
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bad" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		io.WriteString(w, "0123456789")
	})
	post := HTTPStep{Name: "good", Method: "POST", URL: tg.URL + "/good", Body: "abc"}
	p := HTTPParams{VUs: 2, Iterations: 40, Steps: []HTTPStep{post, step("bad", tg.URL+"/bad")}}
	res, err := runHTTP(t, p, Env{Cores: []int{0}})
	if err != nil {
		t.Fatal(err)
	}
	stats, err := res.StepStats()
	if err != nil {
		t.Fatal(err)
	}
	good, bad := stats[0], stats[1]
	if good.Statuses[200] != 40 || good.BytesReceived != 400 || good.BytesSent != 120 || len(good.Errors) != 0 {
		t.Errorf("good: statuses %v received %d sent %d errors %v; want 200:40, 400 and 120 bytes, no errors",
			good.Statuses, good.BytesReceived, good.BytesSent, good.Errors)
	}
	if bad.Statuses[503] != 40 || bad.Errors[string(ErrorStatus)] != 40 || bad.FailedCount != 40 {
		t.Errorf("bad: statuses %v errors %v failed %d; want 503:40, status:40, 40", bad.Statuses, bad.Errors, bad.FailedCount)
	}
	merged, err := MergeStepStats(stats, stats)
	if err != nil {
		t.Fatal(err)
	}
	if merged[0].Statuses[200] != 80 || merged[0].BytesReceived != 800 || merged[1].Errors[string(ErrorStatus)] != 80 {
		t.Errorf("merged: %+v", merged)
	}
}
