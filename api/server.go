package api

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tempest/internal/obs"
)

// Server serves the client API over a Backend.
//
// Locks: Server.mu guards the listener and http.Server; ipLimiter.mu,
// apiMetrics.mu and forwarder.mu each guard their own state. No code path
// holds two of them at once.
type Server struct {
	cfg       ServerConfig
	backend   Backend
	log       *slog.Logger
	tokenHash [sha256.Size]byte
	limiter   *ipLimiter
	metrics   *apiMetrics
	// metricsHandler serves the node's registry; metricsErr is why the
	// API's series could not join it (Start reports it).
	metricsHandler http.Handler
	metricsErr     error
	fwd            *forwarder
	handler        http.Handler
	// parsing holds a token per job body being read and parsed
	// (MaxParsing): what submissions may cost in memory at once.
	parsing chan struct{}

	// streams is cancelled when Shutdown starts: http.Server.Shutdown waits
	// for handlers to return, and an event stream only returns at its job's
	// end, so without this a watched long job would hold shutdown hostage.
	streams      context.Context
	cancelStream context.CancelFunc

	mu      sync.Mutex
	srv     *http.Server
	ln      net.Listener
	tls     bool
	stopped bool
	wg      sync.WaitGroup // the Serve goroutine
}

// NewServer builds a server; the config is checked by Start. A nil Logger
// discards, a nil Now is time.Now.
func NewServer(cfg ServerConfig, backend Backend) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{
		cfg:       cfg,
		backend:   backend,
		log:       cfg.Logger.With("component", "api"),
		tokenHash: sha256.Sum256([]byte(cfg.Token)),
		limiter:   newIPLimiter(cfg.RateLimit, cfg.RateBurst, cfg.Now),
		parsing:   make(chan struct{}, max(cfg.MaxParsing, 1)),
	}
	reg := cfg.Metrics
	if reg == nil {
		reg = obs.NewRegistry()
	}
	var collectors []prometheus.Collector
	s.metrics, collectors = newAPIMetrics(s.limiter.size)
	s.metricsErr = obs.Register(reg, collectors...)
	// The token is checked before, with the API's error body.
	s.metricsHandler = obs.Handler(reg, "", obs.ServeJobSeries(cfg.MetricsToken, cfg.MetricsJobSeries))
	s.fwd = newForwarder(cfg.ForwardTLS, cfg.RequestTimeout, s.log, s.metrics)
	s.fwd.keys, s.fwd.now = cfg.Keyring, cfg.Now
	s.streams, s.cancelStream = context.WithCancel(context.Background())
	s.handler = s.routes()
	return s
}

// Handler is the server's whole HTTP handler (middleware included), for
// embedding in another server or an httptest.Server. Only Start validates
// the config; whoever serves Handler alone should call Validate first.
func (s *Server) Handler() http.Handler { return s.handler }

// Start validates the config, listens at once (so Addr is known when it
// returns) and serves in a goroutine that Shutdown stops. ctx bounds only
// the listen.
func (s *Server) Start(ctx context.Context) error {
	if err := s.cfg.Validate(); err != nil {
		return err
	}
	if s.backend == nil {
		return errors.New("api: nil backend")
	}
	if s.metricsErr != nil {
		return fmt.Errorf("api: %w", s.metricsErr)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil || s.stopped {
		return errors.New("api: server already started")
	}
	var tlsCfg *tls.Config
	if s.cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.cfg.TLSCertFile, s.cfg.TLSKeyFile)
		if err != nil {
			return fmt.Errorf("api: load TLS certificate %s: %w", s.cfg.TLSCertFile, err)
		}
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if s.cfg.TLSClientCAFile != "" {
			pool, err := LoadCertPool(s.cfg.TLSClientCAFile)
			if err != nil {
				return fmt.Errorf("api: client CA: %w", err)
			}
			tlsCfg.ClientCAs, tlsCfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
			// The leader asks followers for a certificate too.
			s.fwd.presentCertificate(cert)
		}
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("api: listen on %s: %w", s.cfg.Listen, err)
	}
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ConnState:         s.metrics.connState,
		ConnContext:       withConn,
		// A 1 MiB job file from a slow client still fits; the write side has
		// no timeout because event streams last as long as their job.
		ReadTimeout: time.Minute,
		IdleTimeout: 2 * time.Minute,
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		TLSConfig:   tlsCfg,
		// The client API is HTTP/1.1 (README); an empty map keeps TLS from offering h2.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	srv.RegisterOnShutdown(s.cancelStream)
	s.srv, s.ln, s.tls = srv, ln, tlsCfg != nil
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		var err error
		if tlsCfg != nil {
			err = srv.ServeTLS(ln, "", "")
		} else {
			err = srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("api server stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	s.log.Info("api listening", "addr", ln.Addr().String(), "tls", tlsCfg != nil)
	return nil
}

// Addr is the address the server listens on, "" before Start.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// URL is the server's base URL ("http://127.0.0.1:7411"), what managers
// publish in their SWIM meta for followers to forward to; "" before Start.
func (s *Server) URL() string {
	addr := s.Addr()
	if addr == "" {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tls {
		return "https://" + addr
	}
	return "http://" + addr
}

// Shutdown stops accepting, ends event streams, waits for other requests to
// finish until ctx ends (then closes their connections), and waits for the
// serving goroutine. It is safe to call more than once, or without Start.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	srv := s.srv
	s.stopped = true
	s.mu.Unlock()
	s.cancelStream()
	var err error
	if srv != nil {
		if err = srv.Shutdown(ctx); err != nil {
			err = errors.Join(fmt.Errorf("api: shutdown: %w", err), srv.Close())
		}
	}
	s.wg.Wait()
	s.fwd.close()
	return err
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	allowed := make(map[string][]string) // path → methods, for 405 answers
	for _, rt := range []struct {
		method, path string
		v1           bool
		h            http.HandlerFunc
	}{
		{"GET", "/healthz", false, s.healthz},
		{"GET", "/metrics", false, s.metricsText},
		{"POST", "/v1/jobs", true, s.submitJob},
		{"GET", "/v1/jobs", true, s.listJobs},
		{"GET", "/v1/jobs/{id}", true, s.getJob},
		{"GET", "/v1/jobs/{id}/events", true, s.jobEvents},
		{"POST", "/v1/jobs/{id}/cancel", true, s.cancelJob},
		{"GET", "/v1/jobs/{id}/results", true, s.jobResults},
		{"GET", "/v1/cluster", true, s.cluster},
		{"POST", "/v1/members", true, s.addMember},
		{"DELETE", "/v1/members/{id}", true, s.removeMember},
		{"GET", "/v1/blobs/{sum}", true, s.statBlob},
		{"PUT", "/v1/blobs/{sum}", true, s.putBlobChunk},
		{"POST", "/v1/blobs/{sum}/commit", true, s.commitBlob},
	} {
		s.route(mux, rt.method+" "+rt.path, rt.path, rt.v1, rt.h)
		allowed[rt.path] = append(allowed[rt.path], rt.method)
	}
	// A known path with another method: without these, the catch-alls below
	// would answer 404, and net/http's own 405 is plain text.
	for path, methods := range allowed {
		s.route(mux, path, path, strings.HasPrefix(path, "/v1/"), methodNotAllowed(methods))
	}
	s.route(mux, "/v1/", "unmatched", true, s.notFound)
	s.route(mux, "/", "unmatched", false, s.notFound)
	return s.observe(s.rateLimit(mux))
}

// route registers h under pattern, labelled route in metrics and logs. /v1
// routes are authenticated and, on a follower, forwarded to the leader.
func (s *Server) route(mux *http.ServeMux, pattern, label string, v1 bool, h http.HandlerFunc) {
	var next http.Handler = h
	if v1 {
		next = s.authenticate(s.leaderOnly(next, strings.HasSuffix(label, "/events")))
	}
	mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rec, ok := w.(*recorder); ok {
			rec.route = label
			rec.jobID = r.PathValue("id")
		}
		next.ServeHTTP(w, r)
	}))
}

func methodNotAllowed(methods []string) http.HandlerFunc {
	allow := strings.Join(methods, ", ")
	if slices.Contains(methods, "GET") {
		allow += ", HEAD"
	}
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeErrorBody(w, http.StatusMethodNotAllowed, ErrorBody{Code: CodeMalformed,
			Error: fmt.Sprintf("%s %s: method not allowed (allowed: %s)", r.Method, r.URL.Path, allow)})
	}
}

// callContext bounds one backend call.
func (s *Server) callContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
}
