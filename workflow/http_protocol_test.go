package workflow

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/quic-go/quic-go/http3"
)

func TestHTTPProtocolValidate(t *testing.T) {
	tls := func(proto Protocol) func(*HTTPParams) {
		return func(p *HTTPParams) {
			p.Protocol = proto
			for i := range p.Steps {
				p.Steps[i].URL = strings.Replace(p.Steps[i].URL, "http://", "https://", 1)
			}
		}
	}
	cleartext := func(p *HTTPParams) {
		p.Protocol = ProtocolH2C
		for i := range p.Steps {
			p.Steps[i].URL = strings.Replace(p.Steps[i].URL, "https://", "http://", 1)
		}
	}
	cases := []struct {
		name   string
		mutate func(*HTTPParams)
		want   string // empty means valid
	}{
		{"http1 mixes schemes", func(p *HTTPParams) {}, ""},
		{"http1 insecure", func(p *HTTPParams) { p.InsecureSkipVerify = true }, ""},
		{"h2", tls(ProtocolH2), ""},
		{"h2 insecure", func(p *HTTPParams) { tls(ProtocolH2)(p); p.InsecureSkipVerify = true }, ""},
		{"h2c", cleartext, ""},
		{"h2 with an http:// step", func(p *HTTPParams) { p.Protocol = ProtocolH2 },
			`steps[0].url: must be a https:// URL for protocol h2, got "http://127.0.0.1:8080/"`},
		{"h2 templated https", func(p *HTTPParams) { tls(ProtocolH2)(p); p.Steps[0].URL = "https://x/{{vu}}" }, ""},
		{"h2c with an https:// step", func(p *HTTPParams) { p.Protocol = ProtocolH2C },
			`steps[1].url: must be a http:// URL for protocol h2c`},
		{"h2c insecure", func(p *HTTPParams) { cleartext(p); p.InsecureSkipVerify = true },
			"insecure_skip_verify: does not apply to protocol h2c"},
		{"h3", tls(ProtocolH3), ""},
		{"h3 with an http:// step", func(p *HTTPParams) { p.Protocol = ProtocolH3 },
			`steps[0].url: must be a https:// URL for protocol h3`},
		{"h3 without connection reuse", func(p *HTTPParams) { tls(ProtocolH3)(p); p.NoConnectionReuse = true },
			"connection_reuse: false is not supported with protocol h3"},
		{"unknown protocol", func(p *HTTPParams) { p.Protocol = 9 }, "protocol: must be one of http1, h2, h2c or h3, got Protocol(9)"},
		{"bad url is reported once", func(p *HTTPParams) { tls(ProtocolH2)(p); p.Steps[0].URL = "ftp://x/" },
			`steps[0].url: must be an http:// or https:// URL with a host, got "ftp://x/"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := validHTTPParams()
			tc.mutate(&p)
			err := p.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("valid params refused: %v", err)
				}
				r, err := newHTTPRunner("wf", &p)
				if err != nil {
					t.Fatalf("valid params do not build a runner: %v", err)
				}
				if err := r.sender.close(); err != nil {
					t.Fatal(err)
				}
				return
			}
			var fes FieldErrors
			if !errors.As(err, &fes) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want FieldErrors containing %q", err, tc.want)
			}
			if len(fes) != 1 {
				t.Fatalf("%d problems, want 1: %v", len(fes), err)
			}
		})
	}
}

func TestHTTPParseProtocolKeys(t *testing.T) {
	str := func(line int, v string) *Node { return &Node{Kind: ScalarNode, Line: line, Value: v, Text: v} }
	boolean := func(line int, v bool) *Node {
		return &Node{Kind: ScalarNode, Line: line, Value: v, Text: map[bool]string{true: "true", false: "false"}[v]}
	}
	parse := func(fields ...Field) (*HTTPParams, []string) {
		fields = append(fields, Field{Key: "iterations", Line: 1, Value: &Node{Kind: ScalarNode, Line: 1, Value: int64(3), Text: "3"}},
			Field{Key: "steps", Line: 10, Value: &Node{Kind: ListNode, Line: 10, Items: []*Node{{Kind: MapNode, Line: 10, Fields: []Field{
				{Key: "name", Line: 10, Value: str(10, "s")},
				{Key: "url", Line: 11, Value: str(11, "https://x/")},
			}}}}})
		f := NewFields("workflows[0]", &Node{Kind: MapNode, Line: 1, Fields: fields})
		b := HTTPType{}.ParseParams(f)
		var problems []string
		for _, p := range f.Finish() {
			problems = append(problems, fmt.Sprintf("line %d: %s", p.Line, p))
		}
		if len(problems) > 0 {
			return nil, problems
		}
		p, err := HTTPType{}.DecodeParams(b)
		if err != nil {
			t.Fatal(err)
		}
		return p.(*HTTPParams), nil
	}

	p, problems := parse()
	if problems != nil || p.Protocol != ProtocolHTTP1 || p.InsecureSkipVerify {
		t.Fatalf("defaults: %+v, %v", p, problems)
	}
	p, problems = parse(Field{Key: "protocol", Line: 2, Value: str(2, "h2")}, Field{Key: "insecure_skip_verify", Line: 3, Value: boolean(3, true)})
	if problems != nil || p.Protocol != ProtocolH2 || !p.InsecureSkipVerify {
		t.Fatalf("h2: %+v, %v", p, problems)
	}
	for _, name := range []string{"http1", "h2", "h2c", "h3"} {
		if proto, ok := parseProtocol(name); !ok || proto.String() != name {
			t.Errorf("parseProtocol(%q) = %v, %v", name, proto, ok)
		}
	}

	cases := []struct {
		name   string
		fields []Field
		want   []string
	}{
		{"unknown protocol", []Field{{Key: "protocol", Line: 4, Value: str(4, "spdy")}},
			[]string{`line 4: workflows[0].protocol: must be one of http1, h2, h2c or h3, got "spdy"`}},
		{"protocol not a string", []Field{{Key: "protocol", Line: 5, Value: &Node{Kind: ListNode, Line: 5}}},
			[]string{`line 5: workflows[0].protocol: must be a string, got a list`}},
		{"insecure not a bool", []Field{{Key: "insecure_skip_verify", Line: 6, Value: str(6, "yes")}},
			[]string{`line 6: workflows[0].insecure_skip_verify: must be true or false, got "yes"`}},
		{"scheme mismatch at the step's line", []Field{{Key: "protocol", Line: 7, Value: str(7, "h2c")}},
			[]string{`line 11: workflows[0].steps[0].url: must be a http:// URL for protocol h2c, got "https://x/"`}},
		{"misspelt key", []Field{{Key: "protocl", Line: 8, Value: str(8, "h2")}},
			[]string{`line 8: workflows[0]: unknown key "protocl" (did you mean "protocol"?)`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, problems := parse(tc.fields...)
			if !reflect.DeepEqual(problems, tc.want) {
				t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(problems, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// protoTarget counts what a server saw: requests, requests that arrived
// over some other protocol than the one wanted, and distinct connections.
type protoTarget struct {
	total    atomic.Int64
	wrong    atomic.Int64
	lastSeen atomic.Value // string: the Proto of a wrong request
	mu       sync.Mutex
	conns    map[string]bool
}

func newProtoTarget() *protoTarget { return &protoTarget{conns: map[string]bool{}} }

func (pt *protoTarget) handler(wantProto string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		pt.total.Add(1)
		if r.Proto != wantProto {
			pt.wrong.Add(1)
			pt.lastSeen.Store(r.Proto)
		}
		pt.mu.Lock()
		pt.conns[r.RemoteAddr] = true
		pt.mu.Unlock()
		w.Write([]byte("ok"))
	}
}

func (pt *protoTarget) connCount() int {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return len(pt.conns)
}

// newH2Target is an HTTP/2-over-TLS server with httptest's self-signed
// certificate.
func newH2Target(t *testing.T, pt *protoTarget) *httptest.Server {
	t.Helper()
	return newTLSTarget(t, pt.handler("HTTP/2.0"), true)
}

// newTLSTarget is a TLS server that does not log the handshakes the
// refusal tests fail on purpose.
func newTLSTarget(t *testing.T, h http.Handler, h2 bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.EnableHTTP2 = h2
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// newH2CTarget speaks only HTTP/2 with prior knowledge on cleartext TCP, so
// an HTTP/1.1 request would fail rather than be counted.
func newH2CTarget(t *testing.T, pt *protoTarget) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(pt.handler("HTTP/2.0"))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// newH3Target serves HTTP/3 on a loopback UDP port with httptest's
// self-signed certificate. It returns an httptest.Server only for its URL
// (https://127.0.0.1:PORT, the UDP port the HTTP/3 server listens on) and
// cleanup; the TCP listener behind it is closed at once.
func newH3Target(t *testing.T, pt *protoTarget) *httptest.Server {
	t.Helper()
	return newH3TargetFor(t, pt.handler("HTTP/3.0"))
}

// newH3TargetFor is newH3Target serving h.
func newH3TargetFor(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	holder := httptest.NewUnstartedServer(http.NotFoundHandler())
	holder.StartTLS()
	cert := holder.TLS.Certificates
	holder.Close()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h3 := &http3.Server{
		Handler:   h,
		TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: cert}),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = h3.Serve(udp)
	}()
	t.Cleanup(func() {
		h3.Close()
		udp.Close()
		<-done
	})
	return &httptest.Server{URL: "https://" + udp.LocalAddr().String()}
}

// Each protocol against a real local server: every request arrives over the
// protocol asked for, and the server's count equals completed+failed.
func TestHTTPProtocolsAgainstRealServers(t *testing.T) {
	cases := []struct {
		name   string
		proto  Protocol
		target func(*testing.T, *protoTarget) *httptest.Server
		want   string
	}{
		{"http1", ProtocolHTTP1, func(t *testing.T, pt *protoTarget) *httptest.Server {
			srv := httptest.NewServer(pt.handler("HTTP/1.1"))
			t.Cleanup(srv.Close)
			return srv
		}, "HTTP/1.1"},
		{"h2", ProtocolH2, newH2Target, "HTTP/2.0"},
		{"h2c", ProtocolH2C, newH2CTarget, "HTTP/2.0"},
		{"h3", ProtocolH3, newH3Target, "HTTP/3.0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pt := newProtoTarget()
			srv := tc.target(t, pt)
			p := HTTPParams{VUs: 8, Iterations: 300, Protocol: tc.proto, InsecureSkipVerify: tc.proto == ProtocolH2 || tc.proto == ProtocolH3,
				Steps: []HTTPStep{step("a", srv.URL+"/a"), step("b", srv.URL+"/b")}}
			res, err := runHTTP(t, p, Env{Cores: []int{0, 1}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Completed != 600 || res.Failed != 0 {
				t.Fatalf("completed %d failed %d, want 600 and 0", res.Completed, res.Failed)
			}
			if got := pt.total.Load(); got != res.Completed+res.Failed {
				t.Fatalf("server saw %d requests, engine counted %d completed + %d failed", got, res.Completed, res.Failed)
			}
			if n := pt.wrong.Load(); n != 0 {
				t.Fatalf("%d requests arrived as %v, want %s", n, pt.lastSeen.Load(), tc.want)
			}
			// HTTP/2 multiplexes the VUs (see Protocol); Go's transport
			// holds back concurrent first dials to one host, so one
			// connection is usual. The bound leaves room for a race, not
			// for a connection per VU.
			if conns := pt.connCount(); tc.proto != ProtocolHTTP1 && conns > p.VUs/2 {
				t.Fatalf("%d VUs over %d connections: HTTP/2 should multiplex them", p.VUs, conns)
			}
		})
	}
}

// Under h2 and h2c one VU keeps one connection, and connection_reuse: false
// makes a connection per request, as under http1.
func TestHTTPProtocolConnectionReuse(t *testing.T) {
	for _, proto := range []Protocol{ProtocolH2, ProtocolH2C} {
		for _, reuse := range []bool{true, false} {
			t.Run(proto.String()+map[bool]string{true: "/reuse", false: "/no-reuse"}[reuse], func(t *testing.T) {
				pt := newProtoTarget()
				var srv *httptest.Server
				if proto == ProtocolH2 {
					srv = newH2Target(t, pt)
				} else {
					srv = newH2CTarget(t, pt)
				}
				p := HTTPParams{VUs: 1, Iterations: 20, Protocol: proto, InsecureSkipVerify: true,
					NoConnectionReuse: !reuse, Steps: []HTTPStep{step("a", srv.URL)}}
				if proto == ProtocolH2C {
					p.InsecureSkipVerify = false
				}
				res, err := runHTTP(t, p, Env{})
				if err != nil || res.Completed != 20 {
					t.Fatalf("completed %d, err %v", res.Completed, err)
				}
				want := 1
				if !reuse {
					want = 20
				}
				if got := pt.connCount(); got != want {
					t.Fatalf("%d connections for 20 requests from one VU, want %d", got, want)
				}
				if pt.wrong.Load() != 0 {
					t.Fatalf("requests arrived as %v", pt.lastSeen.Load())
				}
			})
		}
	}
}

// h2 refuses what it cannot do rather than measuring something else: a
// self-signed certificate without insecure_skip_verify, and a target that
// only speaks HTTP/1.1. Both fail every request before the server's
// handler runs, so the server counts none.
func TestHTTPH2Refusals(t *testing.T) {
	h1 := newProtoTarget()
	h1srv := newTLSTarget(t, h1.handler("HTTP/1.1"), false)
	h2 := newProtoTarget()
	h2srv := newH2Target(t, h2)
	cases := []struct {
		name     string
		pt       *protoTarget
		url      string
		insecure bool
	}{
		{"self-signed without insecure_skip_verify", h2, h2srv.URL, false},
		{"target without h2", h1, h1srv.URL, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := HTTPParams{VUs: 2, Iterations: 6, Protocol: ProtocolH2, InsecureSkipVerify: tc.insecure,
				Steps: []HTTPStep{step("a", tc.url)}}
			res, err := runHTTP(t, p, Env{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Completed != 0 || res.Failed != 6 || res.Steps[0].Errors[ErrorTransport] != 6 {
				t.Fatalf("completed %d failed %d errors %v, want 6 transport failures", res.Completed, res.Failed, res.Steps[0].Errors)
			}
			if got := tc.pt.total.Load(); got != 0 {
				t.Fatalf("server handled %d requests, want 0", got)
			}
		})
	}
}
