package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// forwardedHeader marks a request a follower forwarded. A node that is not
// the leader answers such a request itself instead of forwarding it again,
// so two nodes with stale views of each other cannot bounce a request
// between them. Clients could set it too; all it does is prevent forwarding.
const forwardedHeader = "X-Tempest-Forwarded"

// FilenameHeader optionally names the submitted job file, so problems in
// a 400 answer name it as the client knows it.
const FilenameHeader = "X-Tempest-Filename"

// statusClientClosed counts requests whose client left before an answer.
const statusClientClosed = 499

// recorder remembers what a handler answered, for metrics and the request
// log. Handlers below observe always get the *recorder itself, so they can
// annotate it; everything else reaches the connection through Unwrap.
type recorder struct {
	http.ResponseWriter
	status    int
	bytes     int64
	route     string
	jobID     string
	forwarded bool
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 && code >= 200 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

// Flush lets streaming handlers and httputil.ReverseProxy flush through
// the recorder.
func (r *recorder) Flush() {
	_ = http.NewResponseController(r.ResponseWriter).Flush()
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// annotate records the job a handler worked on, for the request log.
func annotate(w http.ResponseWriter, jobID string) {
	if rec, ok := w.(*recorder); ok {
		rec.jobID = jobID
	}
}

// observe counts and logs every request. The accounting is deferred so it
// also runs when a forwarded stream aborts with http.ErrAbortHandler.
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := s.cfg.Now()
		s.metrics.servedOn(r.Context())
		rec := &recorder{ResponseWriter: w, route: "unmatched"}
		defer func() {
			status := rec.status
			if status == 0 {
				// Nothing written. Either the client left first (499, as
				// nginx counts it) or net/http answers 200 with no body.
				status = http.StatusOK
				if r.Context().Err() != nil {
					status = statusClientClosed
				}
			}
			s.metrics.request(r.Method, rec.route, status, s.cfg.Now().Sub(start))
			if s.log.Enabled(r.Context(), slog.LevelDebug) {
				attrs := []any{"method", r.Method, "route", rec.route, "status", status,
					"duration", s.cfg.Now().Sub(start), "bytes", rec.bytes, "remote", r.RemoteAddr}
				if rec.jobID != "" {
					attrs = append(attrs, "job_id", rec.jobID)
				}
				if rec.forwarded {
					attrs = append(attrs, "forwarded", true)
				}
				s.log.Debug("api request", attrs...)
			}
		}()
		if r.ContentLength > s.cfg.MaxBodyBytes {
			writeErrorBody(rec, http.StatusRequestEntityTooLarge, ErrorBody{Code: CodeTooLarge,
				Error: "request body larger than the " + formatBytes(s.cfg.MaxBodyBytes) + " allowed"})
			return
		}
		// The original writer, not rec: net/http then also closes the
		// connection after an oversized body instead of draining it.
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
		next.ServeHTTP(rec, r)
	})
}

// rateLimit applies the per-client-IP token bucket to every request,
// before authentication, so guessing tokens is rate limited too.
func (s *Server) rateLimit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := s.rateKey(r)
		ok, wait := s.limiter.allow(key)
		if !ok {
			w.Header().Set("Retry-After", retryAfterHeader(wait))
			writeErrorBody(w, http.StatusTooManyRequests, ErrorBody{Code: CodeRateLimited,
				Error: "too many requests from " + key})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authenticate checks the bearer token. Both sides are hashed first so the
// constant-time comparison does not leak the token's length either.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearerToken(r.Header.Get("Authorization"))
		got := sha256.Sum256([]byte(token))
		if !ok || subtle.ConstantTimeCompare(got[:], s.tokenHash[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tempest"`)
			msg := "missing bearer token"
			if ok {
				msg = "wrong bearer token"
			}
			writeErrorBody(w, http.StatusUnauthorized, ErrorBody{Code: CodeUnauthenticated, Error: msg})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearerMatches reports whether r carries want as its bearer token,
// comparing hashes in constant time.
func bearerMatches(r *http.Request, want string) bool {
	token, ok := bearerToken(r.Header.Get("Authorization"))
	got, exp := sha256.Sum256([]byte(token)), sha256.Sum256([]byte(want))
	return ok && subtle.ConstantTimeCompare(got[:], exp[:]) == 1
}

func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// leaderOnly serves on the leader and forwards from a follower. A
// forwarded event stream ends when Shutdown starts, as a local one does.
func (s *Server) leaderOnly(next http.Handler, stream bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		isLeader, leaderAPI := s.backend.Leader()
		if !isLeader && leaderAPI == "" && r.Header.Get(forwardedHeader) == "" {
			if e, ok := s.backend.(Elected); ok && e.LeaderElected() {
				isLeader, leaderAPI = s.awaitLeader(r.Context())
			}
		}
		if isLeader {
			next.ServeHTTP(w, r)
			return
		}
		if r.Header.Get(forwardedHeader) != "" {
			writeErrorBody(w, http.StatusServiceUnavailable, ErrorBody{Code: CodeNoLeader,
				Error: "forwarded to a node that is not the leader (leadership is changing); retry"})
			return
		}
		if leaderAPI == "" {
			// Answered at once when no leader is elected: holding the
			// request for an election that may take minutes under a
			// partition cost every client this node's share of its
			// deadline. The client goes on to its next endpoint, and
			// waits for an election itself (Client.exchange).
			w.Header().Set("Retry-After", retryAfterHeader(NoLeaderRetryAfter))
			writeErrorBody(w, http.StatusServiceUnavailable, ErrorBody{Code: CodeNoLeader,
				Error: "this node is not the leader and knows no leader; retry"})
			return
		}
		if rec, ok := w.(*recorder); ok {
			rec.forwarded = true
		}
		if stream {
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			defer context.AfterFunc(s.streams, cancel)()
			r = r.WithContext(ctx)
		}
		// A request forwarded to a leader that turns out dead (the dial
		// failed, so nothing reached it) is forwarded again once the
		// election names another, up to LeaderWait, rather than sending the
		// client off to back off. Its body (bounded by MaxBodyBytes, which
		// the leader would read whole anyway) is kept to send again.
		if s.cfg.LeaderWait <= 0 {
			s.fwd.serve(w, r, leaderAPI)
			return
		}
		var body []byte
		if r.Body != nil && r.Body != http.NoBody {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				var tooBig *http.MaxBytesError
				if errors.As(err, &tooBig) {
					writeErrorBody(w, http.StatusRequestEntityTooLarge, ErrorBody{Code: CodeTooLarge,
						Error: "request body larger than the " + formatBytes(s.cfg.MaxBodyBytes) + " allowed"})
					return
				}
				writeErrorBody(w, http.StatusBadRequest, ErrorBody{Code: CodeMalformed, Error: "read request body: " + err.Error()})
				return
			}
			body = b
		}
		rewind := func() {
			if body != nil {
				r.Body = io.NopCloser(bytes.NewReader(body))
				r.ContentLength = int64(len(body))
			}
		}
		deadline := time.Now().Add(s.cfg.LeaderWait)
		for {
			df := &dialFailure{}
			rewind()
			s.fwd.serve(w, r.WithContext(context.WithValue(r.Context(), dialFailureKey{}, df)), leaderAPI)
			if !df.failed {
				return
			}
			dead := leaderAPI
			isLeader, leaderAPI = s.awaitNewLeader(r.Context(), dead, deadline)
			switch {
			case isLeader:
				rewind()
				next.ServeHTTP(w, r)
				return
			case leaderAPI == "":
				writeErrorBody(w, http.StatusServiceUnavailable, ErrorBody{Code: CodeUnavailable,
					Error: fmt.Sprintf("leader at %s is unreachable and no other was elected; retry", dead)})
				return
			}
		}
	})
}

// awaitNewLeader polls until the backend leads or names a leader other than
// dead, or deadline passes ("" then).
func (s *Server) awaitNewLeader(ctx context.Context, dead string, deadline time.Time) (bool, string) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if isLeader, leaderAPI := s.backend.Leader(); isLeader || (leaderAPI != "" && leaderAPI != dead) {
			return isLeader, leaderAPI
		}
		select {
		case <-ctx.Done():
			return false, ""
		case <-s.streams.Done():
			return false, ""
		case <-t.C:
		}
	}
}

// awaitLeader polls the backend, for up to LeaderWait, until it leads or
// knows its leader's API address. Nothing of the request has been acted on
// yet, so holding it is safe for any method.
func (s *Server) awaitLeader(ctx context.Context) (bool, string) {
	if s.cfg.LeaderWait <= 0 {
		return false, ""
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.LeaderWait)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, ""
		case <-s.streams.Done():
			return false, ""
		case <-t.C:
		}
		if isLeader, leaderAPI := s.backend.Leader(); isLeader || leaderAPI != "" {
			return isLeader, leaderAPI
		}
	}
}

// clientIP is the remote address without its port. X-Forwarded-For is not
// trusted: any client could set it to dodge its rate limit (a follower's
// signed X-Tempest-Client is, see rateKey).
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v) // the client went away; nothing to tell it
}

func writeErrorBody(w http.ResponseWriter, status int, body ErrorBody) {
	writeJSON(w, status, body)
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
