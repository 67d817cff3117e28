// Package h1 is a lean HTTP/1.1 client for load generation: one connection
// per virtual user, used by one goroutine at a time, with no goroutines of its
// own and no allocation per request on the keep-alive path.
//
// net/http's Transport runs a read and a write goroutine per connection and
// hands every request and response between them over channels; a load
// generator that owns one connection per VU needs none of that, and on one
// core the hand-offs, their allocations and the garbage they make cost more
// than the syscalls. Here a request is encoded into a pooled buffer and
// written with one write, and the response is parsed straight out of a pooled
// bufio.Reader in the VU's own goroutine. Between requests a connection holds
// no buffers, so an idle or thinking VU costs its goroutine and its socket.
//
// The client speaks only what a load test needs: one request at a time per
// connection (no pipelining), Content-Length and chunked bodies, responses
// delimited by close, 1xx interim responses skipped, TLS for https, no
// redirects, no compression, no proxies, no cookies. Redirects and cookies are
// the caller's: OnHeader hands it the response's header fields.
package h1

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"sync"
	"time"
)

// Phase says where a request failed, for the caller's error classes.
type Phase uint8

// Phases of a request.
const (
	// PhaseDial covers the TCP connect; a TLS handshake is PhaseHandshake.
	PhaseDial Phase = iota
	PhaseHandshake
	PhaseWrite
	// PhaseHeader is reading the status line and headers.
	PhaseHeader
	// PhaseBody is reading the body, once the headers have arrived.
	PhaseBody
)

func (p Phase) String() string {
	switch p {
	case PhaseDial:
		return "dial"
	case PhaseHandshake:
		return "tls handshake"
	case PhaseWrite:
		return "write request"
	case PhaseHeader:
		return "read response header"
	case PhaseBody:
		return "read response body"
	default:
		return fmt.Sprintf("Phase(%d)", uint8(p))
	}
}

// Error is a failed request, with the phase it failed in.
type Error struct {
	Phase Phase
	Addr  string
	Err   error
}

func (e *Error) Error() string { return fmt.Sprintf("%s %s: %v", e.Phase, e.Addr, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// ErrMalformed is wrapped by every error about what the server sent.
var ErrMalformed = errors.New("malformed HTTP/1.1 response")

// maxHeaderBytes bounds a response's status line and headers together, so a
// target cannot make a VU buffer without limit; net/http allows 10 MB, which
// no target under load test needs.
const maxHeaderBytes = 1 << 20

// readBufSize is a pooled reader's buffer: it holds a typical response's
// headers, and bodies stream through it.
const readBufSize = 4 << 10

// DefaultIdleCheck is how long a connection may sit unused before the next
// request first checks that the server has not closed it. Servers close idle
// keep-alive connections after seconds (Node.js after 5), and a request on
// such a connection would fail; checking costs a syscall, so connections in
// steady use skip it. Requests that could not be retried (non-idempotent
// methods) always check a reused connection first.
const DefaultIdleCheck = time.Second

// Config says how a Transport's clients connect.
type Config struct {
	// TLS is the base configuration for https targets; ServerName is set
	// per connection. Nil means the defaults.
	TLS *tls.Config
	// NoReuse closes each connection after one request and sends
	// "Connection: close", so every request dials.
	NoReuse bool
	// Dialer dials TCP; nil means a net.Dialer with 30 s keep-alives.
	Dialer *net.Dialer
	// IdleCheck overrides DefaultIdleCheck when positive.
	IdleCheck time.Duration
}

// Request is one request. Header holds complete header lines ("Name:
// value\r\n") other than Host, Content-Length and Connection, which the
// client writes itself.
type Request struct {
	Method string
	// Addr is host:port to dial; TLS and ServerName say how to secure it.
	Addr       string
	TLS        bool
	ServerName string
	// URI is the request-target ("/path?query"); Host the Host header.
	URI    string
	Host   string
	Header []byte
	// Extra holds further header fields, for values rendered per request.
	Extra []Field
	Body  string
	// Timeout bounds the request from dialling (if it must) to its last
	// body byte. It must be positive.
	Timeout time.Duration
	// OnHeader, when set, is called with each header field of the final
	// response (interim 1xx ones are skipped), in order, before the body is
	// read. name and value alias the read buffer: they are valid only
	// during the call. Callers that keep per-VU state pass a method value
	// made once, so a request allocates nothing for it.
	OnHeader func(name, value []byte)
}

// Field is a header field.
type Field struct{ Name, Value string }

// Transport is what a run's clients share: the config and the buffer pools.
// Buffers are taken for one request and given back, so they are as many as
// the requests in flight rather than the VUs.
type Transport struct {
	cfg     Config
	readers sync.Pool // *bufio.Reader
	writers sync.Pool // *[]byte
}

// NewTransport returns a Transport for cfg.
func NewTransport(cfg Config) *Transport {
	if cfg.Dialer == nil {
		cfg.Dialer = &net.Dialer{KeepAlive: 30 * time.Second}
	}
	if cfg.IdleCheck <= 0 {
		cfg.IdleCheck = DefaultIdleCheck
	}
	t := &Transport{cfg: cfg}
	t.readers.New = func() any { return bufio.NewReaderSize(nil, readBufSize) }
	t.writers.New = func() any { b := make([]byte, 0, 1024); return &b }
	return t
}

// NewClient returns an unconnected client; it dials on its first request.
func (t *Transport) NewClient() *Client { return &Client{t: t} }

// Client is one VU's connection. It is not safe for concurrent use: a VU
// sends one request at a time.
type Client struct {
	t    *Transport
	conn net.Conn // nil when not connected
	// addr, tls and serverName are what conn is connected to.
	addr       string
	tls        bool
	serverName string
	reused     bool      // conn has carried a whole exchange before
	lastUsed   time.Time // when the last exchange on conn started
	// ctx is the context whose cancellation stopCancel would abort conn's
	// I/O on: one registration per connection, not per request.
	ctx        context.Context
	stopCancel func() bool
}

// Do sends req and reads the whole response, writing the body to body (nil
// discards it). It returns the status code. Cancelling ctx aborts a request
// in flight. A request on a reused connection that fails before any byte of
// the response arrives is retried once on a new connection when that is safe
// (see retryable), as net/http does: the server most likely closed the idle
// connection as the request went out.
func (c *Client) Do(ctx context.Context, req *Request, body io.Writer) (int, error) {
	start := time.Now()
	status, wrote, err := c.exchange(ctx, req, start, body)
	if err != nil && c.retryable(ctx, req, wrote, err) {
		status, _, err = c.exchange(ctx, req, start, body)
	}
	return status, err
}

// retryable reports whether a failed exchange on a reused connection may be
// sent again: nothing of the response had arrived, and either none of the
// request was written or its method is idempotent, so the server cannot have
// acted on it twice. Timeouts are not retried: the deadline is the
// request's, not the attempt's.
func (c *Client) retryable(ctx context.Context, req *Request, wrote bool, err error) bool {
	var e *Error
	if ctx.Err() != nil || !errors.As(err, &e) || !e.reused() || errors.Is(err, ErrMalformed) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	switch {
	case e.Phase == PhaseWrite:
		return !errors.Is(err, errPartial) || idempotent(req.Method)
	case e.Phase == PhaseHeader:
		return wrote && !errors.Is(err, errPartial) && idempotent(req.Method)
	}
	return false
}

// idempotent reports whether sending a request with method twice means the
// same as sending it once (RFC 9110 §9.2.2), which makes it safe to retry.
func idempotent(method string) bool {
	switch method {
	case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	return false
}

// errPartial marks an exchange that failed part-way: some of the request
// went out, or some of the response came in. The server may have acted on
// it, so it is not sent again unless it is idempotent.
var errPartial = errors.New("connection closed mid-exchange")

// reusedError marks an error on a connection that had carried a request
// before, the only kind worth retrying.
type reusedError struct{ error }

func (r reusedError) Unwrap() error { return r.error }

func (e *Error) reused() bool {
	var r reusedError
	return errors.As(e.Err, &r)
}

// exchange is one attempt at a request that started at start: connect if
// needed, write, read. wrote reports whether the request was written in full.
func (c *Client) exchange(ctx context.Context, req *Request, start time.Time, body io.Writer) (status int, wrote bool, err error) {
	deadline := start.Add(req.Timeout)
	if c.conn != nil && (c.addr != req.Addr || c.tls != req.TLS || c.serverName != req.ServerName) {
		c.Close()
	}
	if c.conn != nil && (start.Sub(c.lastUsed) > c.t.cfg.IdleCheck || !idempotent(req.Method)) && !alive(c.conn) {
		c.Close()
	}
	if c.conn == nil {
		if err := c.dial(ctx, req, deadline); err != nil {
			return 0, false, err
		}
	} else if err := c.conn.SetDeadline(deadline); err != nil {
		c.Close()
		return 0, false, &Error{Phase: PhaseWrite, Addr: req.Addr, Err: err}
	}
	c.watch(ctx)
	// A cancel that landed before the deadline above was set would have
	// been overwritten by it.
	if err := ctx.Err(); err != nil {
		return 0, false, &Error{Phase: PhaseWrite, Addr: req.Addr, Err: err}
	}
	reused := c.reused
	wrap := func(p Phase, err error) error {
		if reused {
			err = reusedError{err}
		}
		return &Error{Phase: p, Addr: req.Addr, Err: err}
	}

	bp := c.t.writers.Get().(*[]byte)
	*bp = c.appendRequest((*bp)[:0], req)
	n, err := c.conn.Write(*bp)
	c.t.writers.Put(bp)
	if err != nil {
		c.Close()
		if n > 0 {
			err = fmt.Errorf("%w: %w", errPartial, err)
		}
		return 0, false, wrap(PhaseWrite, err)
	}
	// The answer cannot be back yet, so reading now would only cost a
	// read that finds nothing before parking on the poller. Letting the
	// other VUs run first makes the read find it, when there are others.
	runtime.Gosched()

	br := c.t.readers.Get().(*bufio.Reader)
	br.Reset(c.conn)
	status, keep, err := readResponse(br, req.Method == "HEAD", req.OnHeader, body)
	// Anything left over was not asked for: the connection's framing can
	// no longer be trusted.
	keep = keep && err == nil && br.Buffered() == 0 && !c.t.cfg.NoReuse
	br.Reset(nil)
	c.t.readers.Put(br)
	if err != nil {
		c.Close()
		var pe *phaseError
		if errors.As(err, &pe) {
			return status, true, wrap(pe.phase, pe.err)
		}
		return status, true, wrap(PhaseHeader, err)
	}
	if !keep {
		c.Close()
	} else {
		// Idle time counts from the request's start, which saves a clock
		// read and only ever makes the check run sooner.
		c.reused = true
		c.lastUsed = start
	}
	return status, true, nil
}

func (c *Client) dial(ctx context.Context, req *Request, deadline time.Time) error {
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	conn, err := c.t.cfg.Dialer.DialContext(dctx, "tcp", req.Addr)
	if err != nil {
		return &Error{Phase: PhaseDial, Addr: req.Addr, Err: err}
	}
	if req.TLS {
		cfg := &tls.Config{}
		if c.t.cfg.TLS != nil {
			cfg = c.t.cfg.TLS.Clone()
		}
		cfg.ServerName = req.ServerName
		cfg.NextProtos = []string{"http/1.1"}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(dctx); err != nil {
			conn.Close()
			return &Error{Phase: PhaseHandshake, Addr: req.Addr, Err: err}
		}
		conn = tc
	}
	if err := conn.SetDeadline(deadline); err != nil {
		conn.Close()
		return &Error{Phase: PhaseDial, Addr: req.Addr, Err: err}
	}
	c.conn, c.addr, c.tls, c.serverName, c.reused = conn, req.Addr, req.TLS, req.ServerName, false
	return nil
}

// watch arranges for ctx's cancellation to abort the connection's I/O,
// once per connection and context rather than once per request.
func (c *Client) watch(ctx context.Context) {
	if c.stopCancel != nil && c.ctx == ctx {
		return
	}
	if c.stopCancel != nil {
		c.stopCancel()
	}
	conn := c.conn
	c.ctx = ctx
	// A deadline in the past wakes every blocked read and write at once.
	c.stopCancel = context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
}

// Close closes the connection, if any. The client stays usable: its next
// request dials.
func (c *Client) Close() {
	if c.stopCancel != nil {
		c.stopCancel()
		c.stopCancel, c.ctx = nil, nil
	}
	if c.conn != nil {
		_ = c.conn.Close() // nothing to do about a failed close of a connection we are done with
		c.conn = nil
	}
}

func (c *Client) appendRequest(b []byte, req *Request) []byte {
	b = append(b, req.Method...)
	b = append(b, ' ')
	b = append(b, req.URI...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, req.Host...)
	b = append(b, "\r\n"...)
	b = append(b, req.Header...)
	for _, f := range req.Extra {
		b = append(b, f.Name...)
		b = append(b, ": "...)
		b = append(b, f.Value...)
		b = append(b, "\r\n"...)
	}
	// As net/http: a body's length is always sent, and so is a zero length
	// for the methods that normally carry a body.
	if req.Body != "" || req.Method == "POST" || req.Method == "PUT" || req.Method == "PATCH" {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(req.Body)), 10)
		b = append(b, "\r\n"...)
	}
	if c.t.cfg.NoReuse {
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, "\r\n"...)
	return append(b, req.Body...)
}
