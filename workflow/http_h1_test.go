package workflow

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The http1 path (the h1 client) against real local servers, through the
// runner: whatever the server does to its connections and bodies, every
// request it saw is counted once, with the class the net/http path gives.
func TestH1AgainstRealServers(t *testing.T) {
	big := strings.Repeat("0123456789", 50<<10) + "END" // 500 KiB and a bit
	var n atomic.Int64
	cases := []struct {
		name    string
		handler http.HandlerFunc
		step    func(url string) HTTPStep
		reuse   bool
		// want: completed and failed over 200 requests, and the class of
		// the failures.
		completed, failed int64
		class             ErrorClass
		// conns bounds the connections the server saw (8 VUs).
		minConns, maxConns int
	}{
		{name: "keep-alive", handler: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") },
			reuse: true, completed: 200, minConns: 1, maxConns: 8},
		{name: "reuse off", handler: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") },
			completed: 200, minConns: 200, maxConns: 200},
		{name: "server closes every third", handler: func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1)%3 == 0 {
				w.Header().Set("Connection", "close")
			}
			io.WriteString(w, "ok")
		}, reuse: true, completed: 200, minConns: 200/3 + 1, maxConns: 200/3 + 8},
		{name: "chunked with expect_body across chunks", handler: func(w http.ResponseWriter, r *http.Request) {
			for _, piece := range []string{"hel", "lo wo", "rld"} {
				io.WriteString(w, piece)
				w.(http.Flusher).Flush()
			}
		}, step: func(url string) HTTPStep {
			return HTTPStep{Name: "a", URL: url, ExpectBody: "hello world"}
		}, reuse: true, completed: 200, minConns: 1, maxConns: 8},
		{name: "large body with expect_body at its end", handler: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, big)
		}, step: func(url string) HTTPStep {
			return HTTPStep{Name: "a", URL: url, ExpectBody: "9END"}
		}, reuse: true, completed: 200, minConns: 1, maxConns: 8},
		{name: "large POST body", handler: func(w http.ResponseWriter, r *http.Request) {
			if b, _ := io.ReadAll(r.Body); len(b) != 256<<10 {
				w.WriteHeader(http.StatusBadRequest)
			}
		}, step: func(url string) HTTPStep {
			return HTTPStep{Name: "a", Method: "POST", URL: url, Body: big[:256<<10]}
		}, reuse: true, completed: 200, minConns: 1, maxConns: 8},
		{name: "body cut short", handler: func(w http.ResponseWriter, r *http.Request) {
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			defer conn.Close()
			rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this")
			rw.Flush()
		}, reuse: true, failed: 200, class: ErrorBody, minConns: 200, maxConns: 200},
		{name: "garbage response", handler: func(w http.ResponseWriter, r *http.Request) {
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			defer conn.Close()
			rw.WriteString("NOT HTTP AT ALL\r\n\r\n")
			rw.Flush()
		}, reuse: true, failed: 200, class: ErrorTransport, minConns: 200, maxConns: 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tg := newTarget(t, tc.handler)
			st := step("a", tg.URL+"/a")
			if tc.step != nil {
				st = tc.step(tg.URL + "/a")
			}
			p := HTTPParams{VUs: 8, Iterations: 200, NoConnectionReuse: !tc.reuse, Steps: []HTTPStep{st}}
			res, err := runHTTP(t, p, Env{Cores: []int{0, 1}})
			if err != nil {
				t.Fatal(err)
			}
			countedOnce(t, tg, res)
			got := res.Steps[0]
			if got.Completed != tc.completed || got.Failed != tc.failed || got.Errors[tc.class] != tc.failed {
				t.Fatalf("completed %d failed %d errors %v, want %d, %d of class %s",
					got.Completed, got.Failed, got.Errors, tc.completed, tc.failed, tc.class)
			}
			if n := int(tg.conns.Load()); n < tc.minConns || n > tc.maxConns {
				t.Fatalf("server saw %d connections, want %d to %d", n, tc.minConns, tc.maxConns)
			}
		})
	}
}

// http1 over TLS: https:// steps go through the h1 client's TLS, as
// HTTP/1.1 (no h2 by ALPN), and a self-signed target without
// insecure_skip_verify fails every request before the server counts it.
func TestH1OverTLS(t *testing.T) {
	pt := newProtoTarget()
	srv := newTLSTarget(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			w.WriteHeader(http.StatusBadRequest)
		}
		pt.handler("HTTP/1.1")(w, r)
	}), true)
	for _, insecure := range []bool{true, false} {
		t.Run(fmt.Sprintf("insecure=%v", insecure), func(t *testing.T) {
			before := pt.total.Load()
			p := HTTPParams{VUs: 4, Iterations: 40, InsecureSkipVerify: insecure, Steps: []HTTPStep{step("a", srv.URL+"/a")}}
			res, err := runHTTP(t, p, Env{})
			if err != nil {
				t.Fatal(err)
			}
			seen := pt.total.Load() - before
			if insecure {
				if res.Completed != 40 || seen != 40 || pt.wrong.Load() != 0 {
					t.Fatalf("completed %d, server saw %d (%d as %v), want 40 over HTTP/1.1", res.Completed, seen, pt.wrong.Load(), pt.lastSeen.Load())
				}
				return
			}
			if res.Failed != 40 || res.Steps[0].Errors[ErrorTransport] != 40 || seen != 0 {
				t.Fatalf("failed %d errors %v, server saw %d; want 40 transport failures, none seen", res.Failed, res.Steps[0].Errors, seen)
			}
		})
	}
}

// A slow target under the duration model: requests that outlive the
// request timeout fail as timeouts, the rest complete, and the server's
// count is still ours.
func TestH1SlowTargetTimesOut(t *testing.T) {
	var n atomic.Int64
	release := make(chan struct{})
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%4 == 0 {
			select { // a quarter hang until the client gives up
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		io.WriteString(w, "ok")
	})
	defer close(release)
	p := HTTPParams{VUs: 4, Iterations: 40, Timeout: 100 * time.Millisecond, Steps: []HTTPStep{step("a", tg.URL+"/a")}}
	res, err := runHTTP(t, p, Env{})
	if err != nil {
		t.Fatal(err)
	}
	st := res.Steps[0]
	if st.Completed+st.Failed != 40 || st.Failed != st.Errors[ErrorTimeout] || st.Failed < 10 {
		t.Fatalf("completed %d failed %d errors %v, want 40 in all and at least 10 timeouts", st.Completed, st.Failed, st.Errors)
	}
	tg.Close() // waits for the hung handlers, so the count is final
	if got := tg.total.Load(); got != 40 {
		t.Fatalf("target saw %d requests, want 40", got)
	}
}

// The request on the wire: what prepareStep and the h1 sender make of a
// step's method, headers, Host, body and URL user info, byte for byte.
func TestH1RequestBytes(t *testing.T) {
	ln := newRawListener(t)
	base := "http://" + ln.addr
	tail := "Connection: close\r\n\r\n"
	ua := "User-Agent: " + defaultUserAgent + "\r\n"
	cases := []struct {
		name string
		step HTTPStep
		want string
	}{
		{"method, headers and body", HTTPStep{
			Method: "POST", URL: base + "/p?q={{vu}}",
			Headers: map[string]string{"x-b": "2", "X-A": "1", "Host": "h.example", "Content-Length": "999", "x-dyn": "{{iteration}}"},
			Body:    "body{{vu}}",
		}, "POST /p?q=1 HTTP/1.1\r\nHost: h.example\r\n" + ua + "X-A: 1\r\nX-B: 2\r\n" +
			"X-Dyn: 0\r\nContent-Length: 5\r\n" + tail + "body1"},
		{"empty POST has a length", HTTPStep{Method: "POST", URL: base + "/"},
			"POST / HTTP/1.1\r\nHost: " + ln.addr + "\r\n" + ua + "Content-Length: 0\r\n" + tail},
		{"user info is basic auth", HTTPStep{Method: "GET", URL: "http://u:p@" + ln.addr + "/a"},
			"GET /a HTTP/1.1\r\nHost: " + ln.addr + "\r\n" + ua + "Authorization: Basic dTpw\r\n" + tail},
		{"user info in a templated URL", HTTPStep{Method: "GET", URL: "http://u:p@" + ln.addr + "/{{vu}}"},
			"GET /1 HTTP/1.1\r\nHost: " + ln.addr + "\r\n" + ua + "Authorization: Basic dTpw\r\n" + tail},
		{"a step's Authorization wins", HTTPStep{Method: "GET", URL: "http://u:p@" + ln.addr + "/a",
			Headers: map[string]string{"Authorization": "Bearer x"}},
			"GET /a HTTP/1.1\r\nHost: " + ln.addr + "\r\nAuthorization: Bearer x\r\n" + ua + tail},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.step.Name = "a"
			p := HTTPParams{VUs: 1, Iterations: 1, NoConnectionReuse: true, Steps: []HTTPStep{tc.step}}
			res, err := runHTTP(t, p, Env{})
			if err != nil || res.Completed != 1 {
				t.Fatalf("completed %d, err %v", res.Completed, err)
			}
			if r := <-ln.requests; r != tc.want {
				t.Fatalf("request bytes\n%q\nwant\n%q", r, tc.want)
			}
		})
	}
}

// rawListener answers each connection's first request with a fixed 200 and
// hands over the request's bytes exactly as they arrived.
type rawListener struct {
	addr     string
	requests chan string
}

func newRawListener(t *testing.T) *rawListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := &rawListener{addr: ln.Addr().String(), requests: make(chan string, 16)}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(conn)
			var raw strings.Builder
			length := 0
			for {
				line, err := br.ReadString('\n')
				raw.WriteString(line)
				if err != nil || line == "\r\n" {
					break
				}
				if v, ok := strings.CutPrefix(line, "Content-Length: "); ok {
					fmt.Sscanf(v, "%d", &length)
				}
			}
			body := make([]byte, length)
			io.ReadFull(br, body)
			raw.Write(body)
			rl.requests <- raw.String()
			io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
			conn.Close()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return rl
}
