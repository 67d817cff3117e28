package api

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"tempest/security"
)

// forwarder proxies a follower's /v1 requests to the leader's API. The
// bearer token passes through unchanged: every node of a cluster serves the
// same token, and the follower has already checked it.
type forwarder struct {
	transport *http.Transport
	log       *slog.Logger
	metrics   *apiMetrics
	keys      *security.Keyring // nil: no client header
	now       func() time.Time

	// One proxy is cached for the current leader; a leader change builds a
	// new one. Connections are pooled by the shared transport either way.
	mu     sync.Mutex
	target string
	proxy  *httputil.ReverseProxy
}

func newForwarder(tlsCfg *tls.Config, requestTimeout time.Duration, log *slog.Logger, m *apiMetrics) *forwarder {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &forwarder{
		transport: &http.Transport{
			// Leaders are cluster-internal: an HTTP_PROXY meant for the
			// outside world must not capture these requests.
			Proxy:               nil,
			DialContext:         dialer.DialContext,
			TLSClientConfig:     tlsCfg.Clone(),
			TLSHandshakeTimeout: 5 * time.Second,
			MaxIdleConnsPerHost: 16,
			IdleConnTimeout:     90 * time.Second,
			// The leader answers headers once its backend call returns (or at
			// once for event streams), which RequestTimeout bounds there.
			ResponseHeaderTimeout: requestTimeout + 5*time.Second,
		},
		log:     log,
		metrics: m,
	}
}

// presentCertificate makes forwarded requests present cert, for a leader
// that requires client certificates. Called before serving.
func (f *forwarder) presentCertificate(cert tls.Certificate) {
	if f.transport.TLSClientConfig == nil {
		f.transport.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	f.transport.TLSClientConfig.Certificates = []tls.Certificate{cert}
}

// dialFailure, when in a request's context, asks proxyError to record a
// failed dial there instead of answering, so the caller can try a new
// leader: nothing of the request reached anyone.
type dialFailure struct{ failed bool }

type dialFailureKey struct{}

func (f *forwarder) serve(w http.ResponseWriter, r *http.Request, leaderAPI string) {
	proxy, err := f.proxyFor(leaderAPI)
	if err != nil {
		f.log.Warn("cannot forward to leader", "leader_api", leaderAPI, "err", err)
		writeErrorBody(w, http.StatusServiceUnavailable, ErrorBody{Code: CodeUnavailable,
			Error: fmt.Sprintf("leader API address %q is unusable", leaderAPI)})
		return
	}
	f.metrics.forward()
	proxy.ServeHTTP(w, r)
}

func (f *forwarder) proxyFor(leaderAPI string) (*httputil.ReverseProxy, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.proxy != nil && f.target == leaderAPI {
		return f.proxy, nil
	}
	target, err := url.Parse(leaderAPI)
	if err != nil {
		return nil, fmt.Errorf("parse leader API URL: %w", err)
	}
	if (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		return nil, fmt.Errorf("leader API URL %q: want http(s)://host:port", leaderAPI)
	}
	f.target = leaderAPI
	f.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
			pr.Out.Header.Set(forwardedHeader, "1")
			// The leader limits the original client, not us, when we
			// vouch for it; whatever header the client sent is replaced.
			pr.Out.Header.Del(clientHeader)
			if f.keys != nil {
				if v := signClient(f.keys, clientIP(pr.In), f.now()); v != "" {
					pr.Out.Header.Set(clientHeader, v)
				}
			}
		},
		Transport: f.transport,
		// Flush every write: event streams must not sit in a buffer, and the
		// other answers are single small JSON bodies anyway.
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(f.log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			f.proxyError(w, r, leaderAPI, err)
		},
	}
	return f.proxy, nil
}

// proxyError tells a client whether its request may have run: a failed dial
// means the leader never saw it (503, safe to retry anywhere), anything later
// means it might have (502).
func (f *forwarder) proxyError(w http.ResponseWriter, r *http.Request, leaderAPI string, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the client left; nobody to answer
	}
	f.log.Warn("forward to leader failed", "leader_api", leaderAPI, "method", r.Method,
		"path", r.URL.Path, "err", err)
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		if df, ok := r.Context().Value(dialFailureKey{}).(*dialFailure); ok {
			df.failed = true
			return
		}
		writeErrorBody(w, http.StatusServiceUnavailable, ErrorBody{Code: CodeUnavailable,
			Error: fmt.Sprintf("leader at %s is unreachable; retry", leaderAPI)})
		return
	}
	writeErrorBody(w, http.StatusBadGateway, ErrorBody{Code: CodeBadGateway,
		Error: fmt.Sprintf("leader at %s failed to answer: %v", leaderAPI, err)})
}

func (f *forwarder) close() { f.transport.CloseIdleConnections() }
