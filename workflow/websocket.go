package workflow

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"time"

	"github.com/coder/websocket"
)

// WSType is the websocket workflow type: the http type's load models,
// histograms, checks, captures and thresholds, with each step an exchange
// on the VU's WebSocket connection (coder/websocket). A step sends its
// message (send:, templated like a body) and waits for the replies it
// expects (expect: {match, count, timeout}); its latency is from the send
// to the last expected reply, so each exchange is a sample of the step's
// histogram. A step with hold: keeps the connection open for that long,
// counting what arrives, then closes it. The connection is opened by the
// VU's first step (whose latency includes the handshake) and kept for the
// next steps and iterations while their url is the same.
type WSType struct{ HTTPType }

// WSTypeName is the job file's type: value.
const WSTypeName = "websocket"

// Name implements Type.
func (WSType) Name() string { return WSTypeName }

// wsStatus is an exchange's status: the handshake's 101, which every
// exchange on the connection stands on. A failed exchange fails with a
// class (timeout, connect, body, transport) instead.
const wsStatus = http.StatusSwitchingProtocols

// DefaultWSTimeout is how long a step waits for its replies unless its
// expect says otherwise.
const DefaultWSTimeout = 10 * time.Second

// maxWSMessage bounds a message read (coder/websocket's default is 32 KiB).
const maxWSMessage = 1 << 20

// WSExchange is one websocket step's exchange.
type WSExchange struct {
	// Count is how many replies matching Match the step waits for (after
	// sending, if it sends); 0 with a message to send means 1, and a step
	// that sends nothing and holds waits for none.
	Count int `cbor:"1,keyasint,omitempty"`
	// Match is a regular expression a reply must match to count; empty
	// matches any. Replies that do not match are read and skipped.
	Match string `cbor:"2,keyasint,omitempty"`
	// Timeout bounds the wait for the replies; zero means
	// DefaultWSTimeout.
	Timeout time.Duration `cbor:"3,keyasint,omitempty"`
	// Hold keeps the connection open this long after the exchange,
	// reading whatever arrives, and then closes it.
	Hold time.Duration `cbor:"4,keyasint,omitempty"`
}

// ParseParams implements Type: the http type's load keys, data, setup,
// TLS and request_timeout (which bounds a connection's opening handshake;
// a step's expect.timeout bounds its replies); each step has url (ws://
// or wss://), send, expect and hold instead of method, body and redirects.
func (WSType) ParseParams(f *Fields) []byte {
	p := parseLoad(f)
	p.Protocol = ProtocolWebSocket
	p.InsecureSkipVerify, _ = f.Bool("insecure_skip_verify")
	p.TLS = parseTLS(f)
	parseRequests(f, &p)
	return f.Encode(&p)
}

func parseWSExchange(sf *Fields) *WSExchange {
	ex := &WSExchange{}
	if ef, ok := sf.Object("expect"); ok {
		if n, ok := ef.Int("count"); ok {
			if n < 1 || n > maxWSCount {
				ef.Errorf("count", "must be between 1 and %d, got %d", maxWSCount, n)
			}
			ex.Count = int(n)
		}
		ex.Match, _ = ef.String("match")
		if d, ok := ef.Duration("timeout"); ok {
			ex.Timeout = d
		}
	}
	if d, ok := sf.Duration("hold"); ok {
		ex.Hold = d
	}
	return ex
}

const maxWSCount = 10_000

// replies is how many matching replies the exchange waits for.
func (ex *WSExchange) replies(sends bool) int {
	switch {
	case ex.Count > 0:
		return ex.Count
	case sends:
		return 1
	}
	return 0
}

func (ex *WSExchange) validate(errs *FieldErrors, path, body string) {
	if ex == nil {
		errs.add(path, "a websocket step needs send, expect or hold")
		return
	}
	if ex.Count < 0 || ex.Count > maxWSCount {
		errs.add(JoinPath(JoinPath(path, "expect"), "count"), "must be between 1 and %d, got %d", maxWSCount, ex.Count)
	}
	if _, err := regexp.Compile(ex.Match); err != nil || len(ex.Match) > maxExpectBody {
		errs.add(JoinPath(JoinPath(path, "expect"), "match"), "must be a regular expression of at most %d bytes", maxExpectBody)
	}
	if ex.Timeout < 0 || ex.Timeout > MaxRequestTimeout {
		errs.add(JoinPath(JoinPath(path, "expect"), "timeout"), "must be between 0 (default %s) and %s, got %s",
			fmtDuration(DefaultWSTimeout), fmtDuration(MaxRequestTimeout), fmtDuration(ex.Timeout))
	}
	if ex.Hold < 0 || ex.Hold > MaxThinkTime {
		errs.add(JoinPath(path, "hold"), "must be between 0 and %s, got %s", fmtDuration(MaxThinkTime), fmtDuration(ex.Hold))
	}
	if body == "" && ex.Count == 0 && ex.Hold == 0 {
		errs.add(path, "a websocket step needs send, expect or hold")
	}
}

func checkWSURL(s string) error {
	if s == "" {
		return errors.New("is required")
	}
	if len(s) > maxURLLen {
		return fmt.Errorf("must be at most %d bytes, got %d", maxURLLen, len(s))
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		return fmt.Errorf("must be a ws:// or wss:// URL with a host, got %q", truncate(s, 80))
	}
	return nil
}

// wsSender runs websocket steps: each VU has one connection, used by its
// goroutine alone, to its steps' URL.
type wsSender struct {
	steps []preparedStep
	ex    []*WSExchange // per step (setup steps first, as the runner's)
	match []*regexp.Regexp
	tls   *tls.Config
	dial  time.Duration // bounds the opening handshake (request_timeout)
	conns []wsConn      // per VU
}

type wsConn struct {
	c   *websocket.Conn
	url string
}

func newWSSender(steps []preparedStep, vus int, p *HTTPParams) (sender, error) {
	all := append(append([]HTTPStep(nil), p.Setup...), p.Steps...)
	if len(all) != len(steps) {
		return nil, fmt.Errorf("websocket: %d steps prepared for %d", len(steps), len(all))
	}
	tlsCfg, err := p.tlsConfig()
	if err != nil {
		return nil, err
	}
	dial := p.Timeout
	if dial <= 0 {
		dial = DefaultRequestTimeout
	}
	s := &wsSender{steps: steps, ex: make([]*WSExchange, len(all)), match: make([]*regexp.Regexp, len(all)), tls: tlsCfg, dial: dial, conns: make([]wsConn, vus)}
	for i, st := range all {
		ex := st.WS
		if ex == nil {
			ex = &WSExchange{}
		}
		s.ex[i] = ex
		if ex.Match != "" {
			if s.match[i], err = regexp.Compile(ex.Match); err != nil {
				return nil, fmt.Errorf("step %q: expect.match: %w", st.Name, err)
			}
		}
	}
	return s, nil
}

// conn returns vu's connection to u, opening it (and closing one to
// another URL) when needed.
func (s *wsSender) conn(ctx context.Context, vu int, u string, hdr http.Header) (*websocket.Conn, ErrorClass, error) {
	vc := &s.conns[vu]
	if vc.c != nil && vc.url == u {
		return vc.c, "", nil
	}
	if vc.c != nil {
		_ = vc.c.CloseNow()
		vc.c = nil
	}
	// Proxy nil, as the http type's transports: a stray HTTP_PROXY in a
	// worker's environment must not send the load to a proxy.
	tr := &http.Transport{Proxy: nil}
	if s.tls != nil {
		tr.TLSClientConfig = s.tls.Clone()
	}
	opts := &websocket.DialOptions{HTTPHeader: hdr, HTTPClient: &http.Client{Transport: tr}}
	dctx, cancel := context.WithTimeout(ctx, s.dial)
	defer cancel()
	c, resp, err := websocket.Dial(dctx, u, opts)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ErrorCancelled, err
		}
		return nil, ErrorConnect, err
	}
	c.SetReadLimit(maxWSMessage)
	vc.c, vc.url = c, u
	return c, "", nil
}

func (s *wsSender) drop(vu int) {
	if vc := &s.conns[vu]; vc.c != nil {
		_ = vc.c.CloseNow()
		vc.c = nil
	}
}

// send runs one exchange: the message out, then the replies in until the
// expected number matched, the last of them written to body for captures
// and checks. A reply that does not come in time fails the exchange with
// class timeout (and, as coder/websocket closes a connection whose read
// was cut off, the VU's next step dials again); a broken connection fails
// it with class transport, as does a hold cut short.
func (s *wsSender) send(ctx context.Context, vu, step int, v tmplVars, rq *hopRequest, body io.Writer) (int, int64, ErrorClass, error) {
	ex := s.ex[step]
	// The step's headers go with the handshake (a token, a cookie).
	c, class, err := s.conn(ctx, vu, rq.url, s.steps[step].headerFor(v))
	if err != nil {
		return 0, 0, class, err
	}
	var sent int64
	if rq.body != "" {
		if err := c.Write(ctx, websocket.MessageText, []byte(rq.body)); err != nil {
			s.drop(vu)
			return 0, 0, wsClass(ctx, nil, err), err
		}
		sent = int64(len(rq.body))
	}
	if want := ex.replies(rq.body != ""); want > 0 {
		timeout := ex.Timeout
		if timeout == 0 {
			timeout = DefaultWSTimeout
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		var last []byte
		for got := 0; got < want; {
			_, msg, err := c.Read(rctx)
			if err != nil {
				cancel()
				s.drop(vu)
				return 0, sent, wsClass(ctx, rctx, err), fmt.Errorf("%d of %d replies: %w", got, want, err)
			}
			if s.match[step] == nil || s.match[step].Match(msg) {
				got++
				last = msg
			}
		}
		cancel()
		if body != nil {
			if _, err := io.Copy(body, bytes.NewReader(last)); err != nil {
				return 0, sent, ErrorBody, err
			}
		}
	}
	if ex.Hold > 0 {
		hctx, cancel := context.WithTimeout(ctx, ex.Hold)
		defer cancel()
		for {
			_, msg, err := c.Read(hctx)
			if err != nil {
				// The hold's end closes the connection (coder/websocket
				// closes one whose read is cut off), as it means to.
				s.drop(vu)
				if errors.Is(hctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
					break
				}
				return 0, sent, wsClass(ctx, nil, err), fmt.Errorf("hold: %w", err)
			}
			if body != nil {
				_, _ = body.Write(msg) // counted as received, like a body
			}
		}
	}
	return wsStatus, sent, "", nil
}

func wsClass(ctx, rctx context.Context, err error) ErrorClass {
	switch {
	case ctx.Err() != nil:
		return ErrorCancelled
	case rctx != nil && errors.Is(rctx.Err(), context.DeadlineExceeded):
		return ErrorTimeout
	}
	return ErrorTransport
}

func (s *wsSender) close() error {
	var errs []error
	for i := range s.conns {
		if c := s.conns[i].c; c != nil {
			if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
				errs = append(errs, err)
			}
			s.conns[i].c = nil
		}
	}
	return errors.Join(errs...)
}
