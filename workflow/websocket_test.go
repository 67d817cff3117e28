package workflow

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"tempest/wire"
)

// echoServer is an echo endpoint built on coder/websocket, counting the
// connections it accepted and the messages it echoed. A message "twice"
// gets one reply, never two.
type echoServer struct {
	conns, msgs atomic.Int64
}

func (e *echoServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	e.conns.Add(1)
	for {
		typ, msg, err := c.Read(r.Context())
		if err != nil {
			return
		}
		e.msgs.Add(1)
		if err := c.Write(r.Context(), typ, msg); err != nil {
			return
		}
	}
}

func runWS(t *testing.T, p *HTTPParams) Result {
	t.Helper()
	p.Protocol = ProtocolWebSocket
	b, err := wire.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	r, err := WSType{}.New(wire.WorkflowSpec{Name: "ws", Type: WSTypeName, Cores: 1, Params: b})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(t.Context(), Env{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Every message sent is echoed and counted once on both sides; each
// exchange is one sample of its step's histogram; a hold keeps the
// connection, then closes it, so each iteration dials once.
func TestWebSocketEchoExactCounts(t *testing.T) {
	echo := &echoServer{}
	srv := httptest.NewServer(echo)
	t.Cleanup(srv.Close)
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/echo"
	res := runWS(t, &HTTPParams{VUs: 3, Iterations: 20, Steps: []HTTPStep{
		{Name: "hello", URL: url, Body: `{"vu": {{vu}}, "n": {{iteration}}}`, WS: &WSExchange{Match: `"vu"`},
			Captures: []HTTPCapture{{Name: "n", Source: CaptureJSON, Expr: "n"}},
			Checks:   []HTTPCheck{{Name: "echoed", Kind: CheckJSON, Path: "vu", Op: OpExists}}},
		{Name: "again", URL: url, Body: `n={{n}}`, WS: &WSExchange{Match: `^n=[0-9]+$`, Hold: 20 * time.Millisecond}},
	}})
	if got := echo.msgs.Load(); got != 40 || res.Completed != 40 || res.Failed != 0 {
		t.Fatalf("echoed %d messages; the run counted %d completed, %d failed; want 40, 40, 0", got, res.Completed, res.Failed)
	}
	if got := echo.conns.Load(); got != 20 {
		t.Fatalf("%d connections, want one per iteration (the hold closes it)", got)
	}
	hello := stepNamed(t, res, "hello")
	if hello.Latency.Count() != 20 || hello.Statuses[wsStatus] != 20 {
		t.Fatalf("hello: %d samples, statuses %v", hello.Latency.Count(), hello.Statuses)
	}
	if c := checkCounts(hello); c["echoed"] != [2]int64{20, 0} {
		t.Fatalf("checks %v", c)
	}
}

// A reply that never comes fails the exchange with class timeout, after
// the step's own timeout; the VU dials again for its next exchange.
func TestWebSocketMissingReplyTimesOut(t *testing.T) {
	echo := &echoServer{}
	srv := httptest.NewServer(echo)
	t.Cleanup(srv.Close)
	url := "ws" + strings.TrimPrefix(srv.URL, "http")
	res := runWS(t, &HTTPParams{VUs: 1, Iterations: 3, Steps: []HTTPStep{
		{Name: "twice", URL: url, Body: "ping", WS: &WSExchange{Count: 2, Timeout: 100 * time.Millisecond}}}})
	st := stepNamed(t, res, "twice")
	if st.Failed != 3 || st.Errors[ErrorTimeout] != 3 || echo.msgs.Load() != 3 || echo.conns.Load() != 3 {
		t.Fatalf("failed %d (%v), server saw %d messages on %d connections; want 3 timeouts, 3 and 3", st.Failed, st.Errors, echo.msgs.Load(), echo.conns.Load())
	}
}

func TestWebSocketValidate(t *testing.T) {
	for _, tc := range []struct {
		step HTTPStep
		want string
	}{
		{HTTPStep{Name: "a", URL: "http://h/", Body: "x", WS: &WSExchange{}}, "steps[0].url: must be a ws:// or wss:// URL"},
		{HTTPStep{Name: "a", URL: "ws://h/", WS: &WSExchange{}}, "steps[0]: a websocket step needs send, expect or hold"},
		{HTTPStep{Name: "a", URL: "ws://h/", Body: "x", WS: &WSExchange{Match: "("}}, "steps[0].expect.match: must be a regular expression"},
		{HTTPStep{Name: "a", URL: "ws://h/", Body: "x", WS: &WSExchange{}, ExpectStatus: []int{200}}, "steps[0].expect_status[0]: must be 101"},
	} {
		p := HTTPParams{VUs: 1, Iterations: 1, Protocol: ProtocolWebSocket, Steps: []HTTPStep{tc.step}}
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want %q", err, tc.want)
		}
	}
}

// request_timeout bounds a connection's opening handshake: against a
// listener that accepts and never answers, each dial fails as a connect
// error after it, so a 2 s run fails many times, not once at its end.
func TestWebSocketRequestTimeoutBoundsTheHandshake(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Accepted connections are held open, unanswered, until the test ends;
	// only the accept loop touches held until it has returned.
	var held []net.Conn
	done := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range held {
			c.Close()
		}
	})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	str := func(v string) *Node { return &Node{Kind: ScalarNode, Line: 1, Value: v, Text: v} }
	step := &Node{Kind: MapNode, Line: 2, Fields: []Field{
		{Key: "name", Line: 2, Value: str("silent")},
		{Key: "url", Line: 2, Value: str("ws://" + ln.Addr().String())},
		{Key: "send", Line: 2, Value: str("ping")},
	}}
	f := NewFields("workflows[0]", &Node{Kind: MapNode, Line: 1, Fields: []Field{
		{Key: "vus", Line: 1, Value: &Node{Kind: ScalarNode, Line: 1, Value: int64(1), Text: "1"}},
		{Key: "duration", Line: 1, Value: str("2s")},
		{Key: "request_timeout", Line: 1, Value: str("100ms")},
		{Key: "steps", Line: 2, Value: &Node{Kind: ListNode, Line: 2, Items: []*Node{step}}},
	}})
	b := WSType{}.ParseParams(f)
	if probs := f.Finish(); len(probs) > 0 {
		t.Fatalf("parse: %v", probs)
	}
	pa, err := WSType{}.DecodeParams(b)
	if err != nil {
		t.Fatal(err)
	}
	p := pa.(*HTTPParams)
	if p.Timeout != 100*time.Millisecond {
		t.Fatalf("request_timeout read as %v", p.Timeout)
	}
	res := runWS(t, p)
	st := stepNamed(t, res, "silent")
	if st.Errors[ErrorConnect] < 3 {
		t.Fatalf("%d connect failures in a 2 s run with a 100 ms handshake bound (errors %v); want several", st.Errors[ErrorConnect], st.Errors)
	}
}
