package workflow

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"time"

	"tempest/workflow/internal/h1"
)

// h1Sender is the http1 path: one h1.Client (one connection) per VU,
// created on the VU's first request, so a run's connections are as many as
// the VUs that have sent something.
type h1Sender struct {
	tr      *h1.Transport
	steps   []h1Step
	timeout time.Duration
	// clients is indexed by VU. Each slot is only touched by the goroutine
	// running that VU (sender's contract), then by close once all have
	// returned.
	clients []*h1.Client
}

// h1Step is a preparedStep in the form the h1 client sends.
type h1Step struct {
	*preparedStep
	// target is where a static URL goes; nil when the URL is templated and
	// is parsed per request.
	target *h1Target
	// header is the static header lines, User-Agent included, encoded once;
	// crossHost the same without Authorization and Cookie, for a redirect
	// to another host.
	header, crossHost []byte
	// dyn is the templated headers with their names canonical, as net/http
	// would send them.
	dyn []dynHeader
	// hasAuth: the step sets Authorization itself, which wins over a URL's
	// user info.
	hasAuth bool
}

// h1Target is a parsed http:// or https:// URL.
type h1Target struct {
	addr       string // host:port to dial
	tls        bool
	serverName string
	uri        string // request-target
	host       string // Host header
	// auth is the Authorization value for a URL with user info, which
	// net/http would send as basic auth.
	auth string
}

func parseH1Target(raw string) (*h1Target, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("parse url: %w", err)
	}
	t := &h1Target{host: u.Host, serverName: u.Hostname(), uri: u.RequestURI()}
	port := u.Port()
	switch u.Scheme {
	case "http":
		port = cmpOr(port, "80")
	case "https":
		port = cmpOr(port, "443")
		t.tls = true
	default:
		return nil, fmt.Errorf("url %q: scheme must be http or https", truncate(raw, 80))
	}
	if t.serverName == "" {
		return nil, fmt.Errorf("url %q has no host", truncate(raw, 80))
	}
	t.addr = net.JoinHostPort(t.serverName, port)
	if u.User != nil {
		pass, _ := u.User.Password()
		t.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pass))
	}
	return t, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// h1Skips reports whether a step header (canonical name) is one the client
// writes itself, or one that would contradict the framing it writes; net/http
// drops the same ones. Under connection_reuse: false the client writes
// Connection too.
func h1Skips(name string, noReuse bool) bool {
	switch name {
	case "Host", "Content-Length", "Transfer-Encoding", "Trailer":
		return true
	case "Connection":
		return noReuse
	}
	return false
}

func newH1Sender(steps []preparedStep, vus int, p *HTTPParams) (*h1Sender, error) {
	tlsCfg, err := p.tlsConfig()
	if err != nil {
		return nil, err
	}
	cfg := h1.Config{NoReuse: p.NoConnectionReuse, TLS: tlsCfg}
	s := &h1Sender{tr: h1.NewTransport(cfg), timeout: p.Timeout, clients: make([]*h1.Client, vus)}
	if s.timeout == 0 {
		s.timeout = DefaultRequestTimeout
	}
	for i := range steps {
		st := h1Step{preparedStep: &steps[i]}
		if !st.url.dynamic {
			t, err := parseH1Target(st.url.static)
			if err != nil {
				return nil, fmt.Errorf("step %q: %w", st.name, err)
			}
			st.target = t
		}
		// Sorted, so every run sends the same bytes.
		keys := make([]string, 0, len(st.preparedStep.header))
		for k := range st.preparedStep.header {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if h1Skips(k, p.NoConnectionReuse) {
				continue
			}
			for _, v := range st.preparedStep.header[k] {
				st.header = fmt.Appendf(st.header, "%s: %s\r\n", k, v)
				if !private(k) {
					st.crossHost = fmt.Appendf(st.crossHost, "%s: %s\r\n", k, v)
				}
			}
		}
		for _, d := range st.dynHeaders {
			if k := http.CanonicalHeaderKey(d.key); !h1Skips(k, p.NoConnectionReuse) {
				st.dyn = append(st.dyn, dynHeader{key: k, value: d.value})
			}
		}
		st.hasAuth = st.preparedStep.header.Get("Authorization") != "" ||
			slices.ContainsFunc(st.dyn, func(d dynHeader) bool { return d.key == "Authorization" })
		if st.target != nil && st.target.auth != "" && !st.hasAuth {
			st.header = fmt.Appendf(st.header, "Authorization: %s\r\n", st.target.auth)
		}
		s.steps = append(s.steps, st)
	}
	return s, nil
}

// private reports whether a step header (canonical name) stays with the
// step's own host when a redirect leads elsewhere.
func private(name string) bool { return name == "Authorization" || name == "Cookie" }

func (s *h1Sender) send(ctx context.Context, vu, step int, v tmplVars, rq *hopRequest, body io.Writer) (int, int64, ErrorClass, error) {
	st := &s.steps[step]
	t := st.target
	if t == nil || !rq.first {
		var err error
		if t, err = parseH1Target(rq.url); err != nil {
			return 0, 0, ErrorTransport, err // Validate checked the sample rendering; count, don't hide
		}
	}
	req := h1.Request{
		Method: rq.method, Addr: t.addr, TLS: t.tls, ServerName: t.serverName,
		URI: t.uri, Host: t.host, Header: st.header, Body: rq.body, Timeout: s.timeout,
	}
	if rq.head != nil {
		req.OnHeader = rq.head.onHeader
	}
	if rq.crossHost {
		req.Header = st.crossHost
	}
	// A static first request has its URL's user info in header already.
	if (t != st.target) && t.auth != "" && (!st.hasAuth || rq.crossHost) {
		req.Extra = append(req.Extra, h1.Field{Name: "Authorization", Value: t.auth})
	}
	if st.host != nil && rq.first {
		req.Host = st.host.render(v)
	}
	for _, d := range st.dyn {
		if rq.crossHost && private(d.key) {
			continue
		}
		req.Extra = append(req.Extra, h1.Field{Name: d.key, Value: d.value.render(v)})
	}
	if rq.cookie != "" {
		req.Extra = append(req.Extra, h1.Field{Name: "Cookie", Value: rq.cookie})
	}
	c := s.clients[vu]
	if c == nil {
		c = s.tr.NewClient()
		s.clients[vu] = c
	}
	status, err := c.Do(ctx, &req, body)
	sent := int64(len(req.Body))
	if err != nil {
		return 0, sent, classifyH1(ctx, err), err
	}
	return status, sent, "", nil
}

func (s *h1Sender) close() error {
	for _, c := range s.clients {
		if c != nil {
			c.Close()
		}
	}
	return nil
}

// classifyH1 maps an h1 client error to the classes net/http's path uses:
// connect for a failed dial, body once the headers had arrived, timeout and
// cancelled whatever the phase.
func classifyH1(ctx context.Context, err error) ErrorClass {
	if ctx.Err() != nil {
		return ErrorCancelled
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		return ErrorTimeout
	}
	var he *h1.Error
	if errors.As(err, &he) {
		switch he.Phase {
		case h1.PhaseDial:
			return ErrorConnect
		case h1.PhaseBody:
			return ErrorBody
		}
	}
	return ErrorTransport
}
