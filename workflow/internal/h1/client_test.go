package h1

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tempest/internal/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

// server is a real net/http server that counts requests and connections.
type server struct {
	*httptest.Server
	requests atomic.Int64
	conns    atomic.Int64
	closeReq atomic.Int64 // requests that asked for Connection: close
}

func newServer(t *testing.T, tls bool, h http.HandlerFunc) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		if r.Close {
			s.closeReq.Add(1)
		}
		if h != nil {
			h(w, r)
		}
	}))
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // the TLS refusal case fails handshakes on purpose
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	if tls {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

// request builds a Request for rawURL.
func request(t *testing.T, method, rawURL string) *Request {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return &Request{Method: method, Addr: u.Host, TLS: u.Scheme == "https", ServerName: u.Hostname(),
		URI: u.RequestURI(), Host: u.Host, Header: []byte("User-Agent: h1-test\r\n"), Timeout: 10 * time.Second}
}

func TestClientConnectionReuse(t *testing.T) {
	cases := []struct {
		name      string
		noReuse   bool
		wantConns int64
		wantClose int64
	}{
		{"keep-alive", false, 1, 0},
		{"reuse off", true, 20, 20},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, false, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
			c := NewTransport(Config{NoReuse: tc.noReuse}).NewClient()
			defer c.Close()
			req := request(t, "GET", srv.URL+"/")
			for range 20 {
				if status, err := c.Do(context.Background(), req, nil); err != nil || status != 200 {
					t.Fatalf("status %d, err %v", status, err)
				}
			}
			if got := srv.conns.Load(); got != tc.wantConns {
				t.Fatalf("%d connections for 20 requests, want %d", got, tc.wantConns)
			}
			if got := srv.closeReq.Load(); got != tc.wantClose {
				t.Fatalf("%d requests asked to close, want %d", got, tc.wantClose)
			}
		})
	}
}

// closingServer answers one request per connection and then closes it
// without saying so, the way a server whose keep-alive timeout fired does;
// closed receives after each close, so the client's next request always
// meets a closed connection.
type closingServer struct {
	ln       net.Listener
	requests atomic.Int64
	closed   chan struct{}
	wg       sync.WaitGroup
}

func newClosingServer(t *testing.T) *closingServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &closingServer{ln: ln, closed: make(chan struct{}, 100)}
	s.wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.serve(conn)
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.wg.Wait()
	})
	return s
}

func (s *closingServer) serve(conn net.Conn) {
	defer func() {
		conn.Close()
		s.closed <- struct{}{}
	}()
	req, err := http.ReadRequest(bufio.NewReader(conn))
	if err != nil {
		return // the client's idle check or a retried request's dead connection
	}
	io.Copy(io.Discard, req.Body)
	s.requests.Add(1)
	io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
}

func TestClientServerClosesConnections(t *testing.T) {
	cases := []struct {
		name   string
		method string
		// A POST, which could not be retried, always peeks first and finds
		// the close; so does any request with idleCheck 1ns. Otherwise the
		// request goes out, meets the closed connection, and is retried
		// (GET is idempotent).
		idleCheck time.Duration
	}{
		{"retried GET", "GET", 0},
		{"POST checks first", "POST", 0},
		{"idle check GET", "GET", time.Nanosecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newClosingServer(t)
			c := NewTransport(Config{IdleCheck: tc.idleCheck}).NewClient()
			defer c.Close()
			req := request(t, tc.method, "http://"+srv.ln.Addr().String()+"/")
			req.Body = "payload"
			for i := range 10 {
				if status, err := c.Do(context.Background(), req, nil); err != nil || status != 200 {
					t.Fatalf("request %d: status %d, err %v", i, status, err)
				}
				<-srv.closed
			}
			if got := srv.requests.Load(); got != 10 {
				t.Fatalf("server handled %d requests, want 10", got)
			}
		})
	}
}

// A response that says Connection: close is read to its end and the next
// request dials.
func TestClientHonoursConnectionClose(t *testing.T) {
	var n atomic.Int64
	srv := newServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%3 == 0 {
			w.Header().Set("Connection", "close")
		}
		io.WriteString(w, "ok")
	})
	c := NewTransport(Config{}).NewClient()
	defer c.Close()
	req := request(t, "GET", srv.URL+"/")
	for i := range 30 {
		if status, err := c.Do(context.Background(), req, nil); err != nil || status != 200 {
			t.Fatalf("request %d: status %d, err %v", i, status, err)
		}
	}
	if got := srv.requests.Load(); got != 30 {
		t.Fatalf("server handled %d requests, want 30", got)
	}
	if got := srv.conns.Load(); got != 10 {
		t.Fatalf("%d connections, want 10 (one per 3 requests)", got)
	}
}

func TestClientTimeoutAndCancel(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := newServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		io.WriteString(w, "ok")
	})
	c := NewTransport(Config{}).NewClient()
	defer c.Close()

	slow := request(t, "GET", srv.URL+"/slow")
	slow.Timeout = 50 * time.Millisecond
	_, err := c.Do(context.Background(), slow, nil)
	var ne net.Error
	var he *Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.As(err, &he) || he.Phase != PhaseHeader {
		t.Fatalf("error %v, want a timeout reading the header", err)
	}
	// The client dials again after a failure.
	if status, err := c.Do(context.Background(), request(t, "GET", srv.URL+"/"), nil); err != nil || status != 200 {
		t.Fatalf("after a timeout: status %d, err %v", status, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Do(ctx, request(t, "GET", srv.URL+"/slow"), nil)
		done <- err
	}()
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if n := srv.requests.Load(); n < 3 {
			return fmt.Errorf("server has seen %d requests, waiting for 3", n)
		}
		return nil
	})
	cancel()
	select {
	case err := <-done:
		if err == nil || ctx.Err() == nil {
			t.Fatalf("cancelled request returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled request did not return")
	}
}

// bodies: chunked and length-delimited, small and large, each read to the
// end and handed over byte for byte, with the connection kept.
func TestClientBodies(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 512<<10) // 8 MiB
	cases := []struct {
		name    string
		method  string
		reqBody string
		handler http.HandlerFunc
		want    string
	}{
		{"empty", "GET", "", func(w http.ResponseWriter, r *http.Request) {}, ""},
		{"large content-length", "GET", "", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			io.WriteString(w, big)
		}, big},
		{"chunked in pieces", "GET", "", func(w http.ResponseWriter, r *http.Request) {
			for i := range 50 {
				fmt.Fprintf(w, "piece %d;", i)
				w.(http.Flusher).Flush()
			}
		}, func() string {
			var b strings.Builder
			for i := range 50 {
				fmt.Fprintf(&b, "piece %d;", i)
			}
			return b.String()
		}()},
		{"large chunked", "GET", "", func(w http.ResponseWriter, r *http.Request) {
			w.(http.Flusher).Flush() // no Content-Length: net/http chunks the rest
			io.WriteString(w, big)
		}, big},
		{"large request body echoed", "POST", big[:1<<20], func(w http.ResponseWriter, r *http.Request) {
			// Read first: net/http closes a connection whose response
			// starts before a large request body was read.
			b, _ := io.ReadAll(r.Body)
			w.Write(b)
		}, big[:1<<20]},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, false, tc.handler)
			c := NewTransport(Config{}).NewClient()
			defer c.Close()
			req := request(t, tc.method, srv.URL+"/")
			req.Body = tc.reqBody
			for range 3 {
				h := sha256.New()
				status, err := c.Do(context.Background(), req, h)
				if err != nil || status != 200 {
					t.Fatalf("status %d, err %v", status, err)
				}
				if got, want := h.Sum(nil), sha256.Sum256([]byte(tc.want)); string(got) != string(want[:]) {
					t.Fatal("body differs from what the server sent")
				}
			}
			if got := srv.conns.Load(); got != 1 {
				t.Fatalf("%d connections for 3 requests, want 1", got)
			}
		})
	}
}

func TestClientTLSAndDialErrors(t *testing.T) {
	srv := newServer(t, true, func(w http.ResponseWriter, r *http.Request) {
		if r.Proto != "HTTP/1.1" || r.TLS == nil {
			w.WriteHeader(http.StatusBadRequest)
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String() + "/"
	ln.Close()
	cases := []struct {
		name      string
		url       string
		insecure  bool
		wantPhase Phase
		wantErr   bool
	}{
		{"https", srv.URL + "/", true, 0, false},
		{"self-signed refused", srv.URL + "/", false, PhaseHandshake, true},
		{"connection refused", refused, false, PhaseDial, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{}
			if tc.insecure {
				cfg.TLS = &tls.Config{InsecureSkipVerify: true}
			}
			c := NewTransport(cfg).NewClient()
			defer c.Close()
			for range 3 {
				status, err := c.Do(context.Background(), request(t, "GET", tc.url), nil)
				if !tc.wantErr {
					if err != nil || status != 200 {
						t.Fatalf("status %d, err %v", status, err)
					}
					continue
				}
				var he *Error
				if !errors.As(err, &he) || he.Phase != tc.wantPhase {
					t.Fatalf("error %v, want one in phase %s", err, tc.wantPhase)
				}
			}
		})
	}
	if got := srv.conns.Load(); got != 1+3 {
		t.Fatalf("TLS server saw %d connections, want 1 kept alive plus 3 refused handshakes", got)
	}
}
