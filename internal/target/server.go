package target

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Server timeouts. Read and write deadlines cover the whole request, wait
// included, so they sit well above MaxDelay: a deadline firing mid-wait
// would cancel the request and lose an answer the config asked for.
const (
	readHeaderTimeout = 10 * time.Second
	requestTimeout    = MaxDelay + time.Minute
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 64 << 10
	// drainLimit bounds how long a forced Shutdown waits for aborted
	// handlers to return; they are already unblocked, so this is slack.
	drainLimit = 5 * time.Second
)

// ErrAlreadyServing is returned by Start and Serve on a server that is
// already serving a listener.
var ErrAlreadyServing = errors.New("target: already serving")

// Server is the built-in HTTP target. It is an http.Handler too, so tests
// can mount it on httptest.Server if they prefer.
type Server struct {
	cfg  Config
	log  *slog.Logger
	now  func() time.Time
	ok   cannedBody
	dice *dice
	http *http.Server
	// tls is the HTTPS config (Config.TLS), certPEM its certificate.
	tls     *tls.Config
	certPEM []byte

	c      counters
	timers sync.Pool // *time.Timer, see wait

	// abort is closed when a Shutdown runs out of time: it cuts every
	// latency wait short so handlers return at once.
	abort     chan struct{}
	abortOnce sync.Once

	mu      sync.Mutex
	ln      net.Listener // the listener being served; nil before Start/Serve
	started time.Time    // when serving began

	serving sync.WaitGroup // the Serve goroutine Start launched
}

// New checks cfg and builds a server; nothing listens until Start or Serve.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("target config: %w", err)
	}
	s := &Server{
		cfg:   cfg,
		log:   cfg.Logger,
		now:   cfg.Clock,
		ok:    canned(okBody(cfg.BodySize)),
		dice:  newDice(cfg.Seed, cfg.ErrorRate, cfg.Jitter),
		abort: make(chan struct{}),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.http = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       requestTimeout,
		WriteTimeout:      requestTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	if cfg.TLS {
		host, _, _ := net.SplitHostPort(cfg.Addr)
		cert, pemCert, err := selfSigned(host, s.now())
		if err != nil {
			return nil, err
		}
		// No h2 in NextProtos: the target answers HTTP/1.1, as it does in
		// plain text, so TLS is the only difference a comparison sees.
		s.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		s.certPEM = pemCert
	}
	return s, nil
}

// Start listens on Config.Addr and serves in the background until
// Shutdown. ctx bounds only the bind; it does not stop the server.
func (s *Server) Start(ctx context.Context) error {
	if s.cfg.Addr == "" {
		return errors.New("target: Addr: required for Start")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("target listen on %s: %w", s.cfg.Addr, err)
	}
	if err := s.claim(ln); err != nil {
		ln.Close()
		return err
	}
	s.serving.Go(func() {
		if err := s.serve(ln); err != nil {
			s.log.Error("target stopped serving", "addr", ln.Addr().String(), "err", err)
		}
	})
	return nil
}

// Serve answers on ln until Shutdown, then returns nil. It takes ownership
// of ln.
func (s *Server) Serve(ln net.Listener) error {
	if err := s.claim(ln); err != nil {
		return err
	}
	return s.serve(ln)
}

func (s *Server) claim(ln net.Listener) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return ErrAlreadyServing
	}
	s.ln = ln
	s.started = s.now()
	return nil
}

func (s *Server) serve(ln net.Listener) error {
	if s.tls != nil {
		ln = tls.NewListener(ln, s.tls)
	}
	s.log.Info("target serving", "addr", ln.Addr().String(),
		"latency", s.cfg.Latency, "jitter", s.cfg.Jitter,
		"error_rate", s.cfg.ErrorRate, "body_size", s.cfg.BodySize)
	err := s.http.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Addr is the address being served (with the real port when Config.Addr
// asked for port 0), or Config.Addr before serving starts. After Start it
// is the bound address; a caller running Serve in a goroutine already holds
// the listener and should read ln.Addr() instead.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return s.ln.Addr().String()
	}
	return s.cfg.Addr
}

// Shutdown stops accepting connections and lets requests in flight finish,
// their latency included, returning once they have. If ctx ends first it
// cuts the remaining waits short (those requests are not answered or
// counted), closes every connection, waits for the handlers to return and
// returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.http.Shutdown(ctx)
	if err != nil {
		s.abortOnce.Do(func() { close(s.abort) })
		s.http.Close()
		s.drainHandlers()
	}
	s.serving.Wait()
	if err == nil {
		s.log.Info("target stopped", "requests", s.Stats().Requests)
	}
	return err
}

// drainHandlers polls, with a bound, until no handler is running. It runs
// only after a forced close, when every handler is already unblocked: its
// wait was aborted and its connection closed under any read or write.
func (s *Server) drainHandlers() {
	deadline := time.Now().Add(drainLimit)
	for s.c.inFlight.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// Stats returns the counters now. See Stats for what each one means.
func (s *Server) Stats() Stats {
	st := s.c.snapshot()
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if !started.IsZero() {
		st.StartedAt = started
		st.UptimeSeconds = s.now().Sub(started).Seconds()
	}
	return st
}

// CertificatePEM is the self-signed certificate a TLS target serves (a
// client's only root for it), nil without Config.TLS.
func (s *Server) CertificatePEM() []byte { return s.certPEM }

// Reset zeroes the counters, as POST /__reset does. started_at is kept.
func (s *Server) Reset() { s.c.reset() }
