package workflow

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/quic-go/quic-go/http3"
)

// Protocol is the HTTP version an http workflow speaks. The zero value is
// HTTP/1.1, which is what specs from before the protocol key mean.
//
// Connection reuse differs by protocol, because what a "connection per VU"
// costs does:
//   - http1: each VU keeps its own keep-alive connection (one request at a
//     time per connection is HTTP/1.1's premise, and so the closed model's).
//   - h2, h2c: VUs share a pool, and each connection multiplexes as many
//     streams as the target's SETTINGS_MAX_CONCURRENT_STREAMS allows (250
//     for Go servers, 100 for nginx) before another is opened. That is how
//     real HTTP/2 clients load a server, and a connection per VU would
//     measure neither HTTP/2's multiplexing nor a realistic connection
//     count. The catch: VUs on one connection share its flow-control
//     window and head-of-line blocking on the TCP stream, so latency under
//     h2 includes contention between VUs that http1 does not have.
//   - h3: the same multiplexing over QUIC (quic-go's http3), one QUIC
//     connection shared by the VUs; connection_reuse: false is refused.
//
// With connection_reuse: false every protocol opens a connection (with its
// TLS handshake, if any) per request; under h2 and h2c the connection
// carries that one stream and is closed.
type Protocol uint8

// Protocols.
const (
	// ProtocolHTTP1 is HTTP/1.1, over TLS for https:// URLs.
	ProtocolHTTP1 Protocol = iota
	// ProtocolH2 is HTTP/2 over TLS (ALPN "h2"); https:// URLs only. It
	// never falls back to HTTP/1.1: a target that does not offer h2 fails
	// the handshake, so a run asking for h2 cannot quietly measure HTTP/1.1.
	ProtocolH2
	// ProtocolH2C is HTTP/2 over cleartext TCP with prior knowledge (RFC
	// 9113 §3.3: no Upgrade dance); http:// URLs only.
	ProtocolH2C
	// ProtocolH3 is HTTP/3 over QUIC; https:// URLs only.
	ProtocolH3
	// ProtocolGRPC is gRPC (over HTTP/2, by grpc-go): the grpc workflow
	// type's, never a job file's protocol: value.
	ProtocolGRPC
	// ProtocolWebSocket is WebSocket (RFC 6455, by coder/websocket): the
	// websocket workflow type's.
	ProtocolWebSocket
)

func (p Protocol) String() string {
	switch p {
	case ProtocolHTTP1:
		return "http1"
	case ProtocolH2:
		return "h2"
	case ProtocolH2C:
		return "h2c"
	case ProtocolH3:
		return "h3"
	case ProtocolGRPC:
		return "grpc"
	case ProtocolWebSocket:
		return "websocket"
	default:
		return fmt.Sprintf("Protocol(%d)", uint8(p))
	}
}

// parseProtocol reads a job file's protocol value.
func parseProtocol(s string) (Protocol, bool) {
	for p := ProtocolHTTP1; p <= ProtocolH3; p++ {
		if p.String() == s {
			return p, true
		}
	}
	return 0, false
}

// scheme is the URL scheme a protocol requires, or "" when any will do.
func (p Protocol) scheme() string {
	switch p {
	case ProtocolH2, ProtocolH3:
		return "https"
	case ProtocolH2C:
		return "http"
	default:
		return ""
	}
}

// validateProtocol checks protocol, insecure_skip_verify, and that every
// step's URL has the scheme the protocol needs: net/http would otherwise
// send an h2 job's http:// step as HTTP/1.1, or fail an h2c job's https://
// step at run time, one request at a time.
func (p *HTTPParams) validateProtocol(errs *FieldErrors) {
	switch p.Protocol {
	case ProtocolHTTP1, ProtocolH2, ProtocolH2C:
	case ProtocolGRPC, ProtocolWebSocket:
		if p.NoCookies || p.NoRedirects || p.Redirects != 0 || p.NoConnectionReuse {
			errs.add("protocol", "%s has no cookies, redirects or connection_reuse", p.Protocol)
		}
		return
	case ProtocolH3:
		if p.NoConnectionReuse {
			// http3.Transport keeps its QUIC connections; a connection per
			// request would need a transport per request, which measures
			// the client's setup rather than the target.
			errs.add("connection_reuse", "false is not supported with protocol h3")
		}
	default:
		errs.add("protocol", "must be one of http1, h2, h2c or h3, got %s", p.Protocol)
		return
	}
	if p.Protocol == ProtocolH2C && p.InsecureSkipVerify {
		errs.add("insecure_skip_verify", "does not apply to protocol h2c, which does not use TLS")
	}
	want := p.Protocol.scheme()
	if want == "" {
		return
	}
	for i, st := range p.Steps {
		s := st.URL
		if t, err := parseTemplate(s); err == nil {
			s = t.sample()
		}
		u, err := url.Parse(s)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			continue // the step's own check reports it
		}
		if u.Scheme != want {
			errs.add(JoinPath(IndexPath("steps", i), "url"), "must be a %s:// URL for protocol %s, got %q",
				want, p.Protocol, truncate(st.URL, 80))
		}
	}
}

// sender sends one request of a step for a VU and reads the whole
// response, writing its body to body (nil discards it). A failure comes with
// its error class. Calls for one VU never overlap: the executor runs at most
// one goroutine per VU index at a time.
type sender interface {
	// send sends rq, a request of step for VU vu (its method, URL and body
	// rendered from v by the caller, or a redirect's), with the step's
	// headers rendered from v; it writes the response body to body and
	// hands rq.head (if set) the response's header fields. sent is the
	// request body's length.
	send(ctx context.Context, vu, step int, v tmplVars, rq *hopRequest, body io.Writer) (status int, sent int64, class ErrorClass, err error)
	// close releases every connection; no send may be in flight.
	close() error
}

// newSender picks the client for p's protocol. http1 (the default) uses the
// lean client in workflow/internal/h1, a connection per VU, for plain and
// TLS targets alike: on one core it sends well over twice what net/http does
// per CPU-second and holds no buffers while a VU waits (bench/README.md).
// h2, h2c and h3 stay on net/http and quic-go's http3, whose multiplexing
// and flow control are the point of those protocols.
func newSender(steps []preparedStep, vus int, p *HTTPParams) (sender, error) {
	switch p.Protocol {
	case ProtocolHTTP1:
		return newH1Sender(steps, vus, p)
	case ProtocolGRPC:
		return newGRPCSender(steps, vus, p)
	case ProtocolWebSocket:
		return newWSSender(steps, vus, p)
	}
	tlsCfg, err := p.tlsConfig()
	if err != nil {
		return nil, err
	}
	tr, err := newLoadTransport(vus, !p.NoConnectionReuse, p.Protocol, tlsCfg)
	if err != nil {
		return nil, err
	}
	timeout := p.Timeout
	if timeout == 0 {
		timeout = DefaultRequestTimeout
	}
	return &netHTTPSender{steps: steps, timeout: timeout, client: &http.Client{
		Transport: tr,
		// The runner follows redirects itself, so that each hop is a
		// request counted and timed under its step, the same for every
		// protocol; the client's own would hide the hops.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}, nil
}

// netHTTPSender sends through net/http (h2, h2c) or http3 (h3), whose
// transports pool connections across VUs.
type netHTTPSender struct {
	steps   []preparedStep
	timeout time.Duration
	client  *http.Client
}

func (s *netHTTPSender) send(ctx context.Context, _, step int, v tmplVars, rq *hopRequest, sink io.Writer) (int, int64, ErrorClass, error) {
	st := &s.steps[step]
	reqCtx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var body io.Reader
	if rq.body != "" {
		body = strings.NewReader(rq.body)
	}
	sent := int64(len(rq.body))
	req, err := http.NewRequestWithContext(reqCtx, rq.method, rq.url, body)
	if err != nil {
		// A static URL was built once already by prepareStep; a templated
		// one is checked by Validate's sample. Count, don't hide.
		return 0, sent, ErrorTransport, err
	}
	req.Header = st.headerFor(v)
	if rq.crossHost || rq.cookie != "" {
		// The step's set is shared by its requests: change a copy.
		req.Header = req.Header.Clone()
		if rq.crossHost {
			req.Header.Del("Authorization")
			req.Header.Del("Cookie")
		}
		if rq.cookie != "" {
			req.Header.Set("Cookie", rq.cookie)
		}
	}
	if st.host != nil && rq.first {
		req.Host = st.host.render(v)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, sent, classify(ctx, reqCtx, err), err
	}
	if rq.head != nil {
		rq.head.fromHTTP(resp.Header)
	}
	if sink == nil {
		sink = io.Discard
	}
	_, err = io.Copy(sink, resp.Body)
	resp.Body.Close()
	if err != nil {
		class := classify(ctx, reqCtx, err)
		if class == ErrorTransport || class == ErrorConnect {
			class = ErrorBody
		}
		return 0, sent, class, err
	}
	return resp.StatusCode, sent, "", nil
}

// close releases every connection once no request is in flight: see
// closeTransport.
func (s *netHTTPSender) close() error { return closeTransport(s.client.Transport) }

func classify(ctx, reqCtx context.Context, err error) ErrorClass {
	if ctx.Err() != nil {
		return ErrorCancelled
	}
	if errors.Is(reqCtx.Err(), context.DeadlineExceeded) {
		return ErrorTimeout
	}
	var dnsErr *net.DNSError
	var opErr *net.OpError
	if errors.As(err, &dnsErr) || errors.As(err, &opErr) && opErr.Op == "dial" {
		return ErrorConnect
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return ErrorTimeout
	}
	return ErrorTransport
}

// newLoadTransport tunes net/http for generating load rather than for a
// typical client:
//   - h2 and h2c share multiplexed connections (see Protocol), with up to
//     one idle connection kept per VU;
//   - reuse off (connection_reuse: false) dials per request, for a job that
//     loads a target's accept path or TLS handshakes;
//   - exactly one protocol is enabled, so the run measures the protocol
//     the job file names and never a fallback;
//   - Proxy nil: a stray HTTP_PROXY in a worker's environment must not send
//     the load to a proxy instead of the target;
//   - no transparent gzip: requests are exactly what the job file says and
//     decompression is not part of what is measured.
//
// Timeouts live in each request's context (dial, TLS, headers and body all
// under the step's timeout). http1 does not come here: it has its own client
// (newSender).
func newLoadTransport(vus int, reuse bool, proto Protocol, tlsCfg *tls.Config) (http.RoundTripper, error) {
	if proto == ProtocolH3 {
		if tlsCfg == nil {
			tlsCfg = &tls.Config{}
		}
		return &http3.Transport{TLSClientConfig: tlsCfg, DisableCompression: true}, nil
	}
	return newTCPTransport(vus, reuse, proto, tlsCfg)
}

// newTCPTransport is the net/http transport for h2 and h2c.
func newTCPTransport(vus int, reuse bool, proto Protocol, tlsCfg *tls.Config) (*http.Transport, error) {
	protocols := new(http.Protocols)
	switch proto {
	case ProtocolH2:
		protocols.SetHTTP2(true)
	case ProtocolH2C:
		protocols.SetUnencryptedHTTP2(true)
	default:
		return nil, fmt.Errorf("protocol %s has no transport", proto)
	}
	t := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0, // bounded per host below
		MaxIdleConnsPerHost: vus,
		IdleConnTimeout:     90 * time.Second,
		DisableKeepAlives:   !reuse,
		DisableCompression:  true,
		// Protocols alone decides; this keeps HTTP/2 on should a custom
		// TLSClientConfig ever be read under the pre-Protocols rules.
		ForceAttemptHTTP2: proto == ProtocolH2,
		Protocols:         protocols,
	}
	// The job file's CA, client certificate, or insecure_skip_verify (for
	// self-signed targets, on its explicit say-so); nil: the defaults.
	t.TLSClientConfig = tlsCfg
	return t, nil
}

// closeTransport releases every connection rt holds once no request is in
// flight. CloseIdleConnections also makes an http.Transport close
// connections that turn idle after it, so no read or write loop goroutine
// outlives the run; a transport that owns more than connections (an HTTP/3
// transport's UDP socket) is an io.Closer as well.
func closeTransport(rt http.RoundTripper) error {
	if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
	if c, ok := rt.(io.Closer); ok {
		if err := c.Close(); err != nil {
			return fmt.Errorf("close transport: %w", err)
		}
	}
	return nil
}
