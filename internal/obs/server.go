package obs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Server serves a registry at /metrics on its own port, for a node with no
// API server (a worker). Start and Shutdown own its one goroutine.
type Server struct {
	srv *http.Server
	ln  net.Listener
	wg  sync.WaitGroup
}

// Listen binds addr at once (so Addr is known) and serves g at /metrics,
// requiring token as a bearer token when it is not empty, until Shutdown;
// jobs is Handler's.
func Listen(ctx context.Context, addr string, g prometheus.Gatherer, token string, jobs bool, log *slog.Logger) (*Server, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", Handler(g, token, jobs))
	s := &Server{ln: ln, srv: &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		WriteTimeout:      time.Minute,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}}
	s.wg.Go(func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "addr", ln.Addr().String(), "err", err)
		}
	})
	return s, nil
}

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Shutdown stops serving, waiting for scrapes in flight until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(fmt.Errorf("metrics: shutdown: %w", err), s.srv.Close())
	}
	s.wg.Wait()
	return err
}
